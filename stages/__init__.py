"""One thin command per DVC stage (see dvc.yaml): parse params, call rlvr, write outputs.

Importing this package pins torch's numerics from params.yaml `runtime` (rlvr.core.numerics) before
any stage module imports torch: `python -m stages.<name>` imports it first, whoever starts the
stage (`dvc repro`, the flows, accelerate's ranks).
"""

from rlvr.core.numerics import pin_from_params

pin_from_params()
