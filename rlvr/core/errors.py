"""The pipeline's own errors: each carries a message a user can act on, and a stage turns it into
one line on stderr and a non-zero exit instead of a traceback."""


class PipelineError(Exception):
    """Base of every error the pipeline reports as a plain line."""


class ParamsError(PipelineError, ValueError):
    """params.yaml holds a value the pipeline cannot use; the message says which and why."""
