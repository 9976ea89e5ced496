"""What every stage script shares: the gate check, params loading, and errors as plain lines.

A stage is `main(params) -> int`; `run_stage` loads params.yaml, checks the reward-test gate
(unless the stage is the gate itself) and turns the pipeline's own errors into one line on stderr
and a non-zero exit, so `dvc repro` stops with a readable reason instead of a traceback.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from pathlib import Path

from rlvr.config import Params, load_params
from rlvr.data import write_json
from rlvr.errors import PipelineError
from rlvr.gate import require_gate

TIMING_DIR = Path("reports/timing")


def run_stage(name: str, main: Callable[[Params], int], gated: bool = True) -> None:
    started = time.perf_counter()
    try:
        if gated:
            require_gate()
        code = main(load_params())
    except PipelineError as error:
        print(f"{name}: {error}", file=sys.stderr)
        sys.exit(1)
    seconds = time.perf_counter() - started
    # Wall time per stage, for the report's provenance; kept out of the metric files, which must
    # be identical between runs with the same seed.
    write_json(TIMING_DIR / f"{name}.json", {"seconds": round(seconds, 1), "exit_code": code})
    print(f"{name}: {'done' if code == 0 else 'FAILED'} in {seconds:.1f} s", file=sys.stderr)
    sys.exit(code)
