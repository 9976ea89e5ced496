#!/usr/bin/env bash
# The GPU check: on one CUDA GPU, with no network, in at most 8 minutes, build a random-init model
# with Qwen3-0.6B's architecture (model.init: local_llm: 28 layers, hidden 1024, vocab 151936) and
# run the real prepare_model and smoke stages on it for 20 GRPO steps with the GPU profile
# (profiles/gpu.yaml: bf16 on CUDA, LoRA on; vLLM if installed), then print steps/s, tokens/s
# (completion, and prompt + completion) and peak GPU memory.
#
#   bash scripts/gpu_wheels.sh              here first (the registry is reachable here): gpu_wheels/
#   bash scripts/gpu_check.sh               on the GPU machine (device tool: carry ["gpu_wheels"])
#   bash scripts/gpu_check.sh --cpu-dry-run here: the same steps on CPU, tiny sizes, fp32, 2 steps,
#                                           with the project's .venv (no wheels needed)
#   bash scripts/gpu_check.sh --cpu-full    here: Qwen3-0.6B's shape in fp32 on the CPU (LoRA r16,
#                                           G = 2, 2 prompts, 2 steps, completions <= 16 tokens,
#                                           sampling calls of at most 512 tokens) through every
#                                           stage after the gates, for one RL seed and its RFT
#                                           baseline: prepare_model, smoke, verified, train,
#                                           evaluate, rft, recipe, report, publish, then verified's
#                                           sampling at 32 a prompt, bounded and not; peak RSS,
#                                           seconds per step and adapter size; at most 25 minutes
#
# On the GPU machine it installs gpu_wheels/ with pip --target into a temporary folder put first on
# PYTHONPATH (the machine's own torch and site-packages are not touched), copies the project to a
# temporary folder, writes the check's params.yaml there (gpu_wheels/params.yaml, which
# scripts/gpu_wheels.sh made with DVC's code, sized by scripts/gpu_check.py), writes instruct-style
# data (16 training rows), and runs the stages without DVC. Each phase is time-boxed; any failure
# is one line starting `gpu_check: FAILED`. With $OUT set (the device tool sets it), the figures
# also go to $OUT/gpu_check.json.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODE=cuda
case "${1:-}" in
  --cpu-dry-run) MODE=cpu ;;
  --cpu-full) MODE=cpu_full ;;
  "") ;;
  *) echo "usage: bash scripts/gpu_check.sh [--cpu-dry-run | --cpu-full]" >&2; exit 2 ;;
esac
fail() { echo "gpu_check: FAILED: $*" >&2; exit 1; }
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export PYTHONUNBUFFERED=1 HF_HUB_DISABLE_PROGRESS_BARS=1
STARTED=$SECONDS
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

LIMIT=470  # the whole check: under 8 minutes (25 for --cpu-full), whatever each phase may take
[ "$MODE" = cpu_full ] && LIMIT=1490
DEADLINE=$((SECONDS + LIMIT))
# phase NAME SECONDS COMMAND...: run it in the project copy, time-boxed (its own limit or what is
# left of the whole check's), and fail loudly
phase() {
  local name=$1 limit=$2 start=$SECONDS rc
  shift 2
  [ $((DEADLINE - SECONDS)) -lt "$limit" ] && limit=$((DEADLINE - SECONDS))
  [ "$limit" -gt 0 ] || fail "no time left for $name (the check stops at $LIMIT s)"
  (cd "$WORK/project" && timeout --kill-after=10 "$limit" "$@")
  rc=$?
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && fail "$name did not finish within $limit s"
  [ $rc -eq 0 ] || fail "$name exited $rc (its output is above)"
  echo "gpu_check: $name done in $((SECONDS - start)) s"
}

if [ "$MODE" = cuda ]; then
  PY=${PYTHON:-python3}
  "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null \
    || fail "no CUDA device: $("$PY" -c 'import torch; print("torch", torch.__version__, "sees no GPU")' 2>&1 | tail -1). This check needs one; on a CPU run: bash scripts/gpu_check.sh --cpu-dry-run"
  [ -f "$ROOT/gpu_wheels/requirements.txt" ] && [ -f "$ROOT/gpu_wheels/params.yaml" ] \
    || fail "gpu_wheels/ is missing: run bash scripts/gpu_wheels.sh where the package registry is reachable, then carry gpu_wheels"
  "$PY" -c 'import sys, torch; print(f"gpu_check: Python {sys.version.split()[0]}, torch {torch.__version__}, {torch.cuda.get_device_name()}")'
  timeout 60 "$PY" -m pip install --quiet --disable-pip-version-check --no-index --no-deps \
    --require-hashes --no-compile --no-cache-dir --target "$WORK/site" --find-links "$ROOT/gpu_wheels" \
    -r "$ROOT/gpu_wheels/requirements.txt" \
    || fail "installing gpu_wheels/ for Python $("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])') (GPU_WHEELS_PYTHONS=that version bash scripts/gpu_wheels.sh builds its wheels)"
  export PYTHONPATH="$WORK/project:$WORK/site"
  BASE_PARAMS=$ROOT/gpu_wheels/params.yaml
else
  PY=${PYTHON:-$ROOT/.venv/bin/python}
  [ -x "$PY" ] || fail "no $PY: run ./dev test once to set up .venv"
  export PYTHONPATH="$WORK/project"
  BASE_PARAMS=$WORK/profile.yaml
fi

# the project, without what is not source (the device tool sends the working tree) and without
# dvc.lock: its hashes are another run's, and the stages here run without DVC
mkdir "$WORK/project"
tar -C "$ROOT" --exclude=./.git --exclude=./dvc.lock --exclude=./.venv --exclude=./gpu_wheels \
  --exclude=./models \
  --exclude=./.prefect --exclude=./.dvc/cache --exclude=./.dvc/tmp --exclude=__pycache__ \
  --exclude=./reports/timing --exclude=./reports/validation/data_docs --exclude=./.pytest_cache \
  --exclude=./.hypothesis -cf - . | tar -C "$WORK/project" -xf - || fail "copying the project"
if [ "$MODE" != cuda ]; then  # here DVC is at hand: apply the profile as gpu_wheels.sh does
  phase profile 60 "$PY" -m rlvr.params.profiles gpu --out "$BASE_PARAMS"
fi
phase wheels 60 "$PY" scripts/gpu_check.py deps
ROWS=16
[ "$MODE" = cpu_full ] && ROWS=2
phase data 60 "$PY" data/make_countdown.py --style instruct --train-rows $ROWS --test-rows $ROWS \
  --val-rows $ROWS
phase params 90 "$PY" scripts/gpu_check.py params "$MODE" "$BASE_PARAMS" params.yaml
FIGURES=${OUT:+$OUT/gpu_check.json}
[ "$MODE" = cpu_full ] && FIGURES=${FIGURES:-$WORK/gpu_check.json}
phase prepare_model 300 "$PY" scripts/gpu_check.py stage prepare_model "$MODE" $FIGURES
phase smoke 330 "$PY" scripts/gpu_check.py stage smoke "$MODE" $FIGURES
if [ "$MODE" = cpu_full ]; then
  for stage in verified train evaluate rft recipe report publish; do
    phase $stage 600 "$PY" scripts/gpu_check.py stage $stage "$MODE" $FIGURES
  done
  for bound in bounded unbounded; do
    phase "verified_budget ($bound)" 600 "$PY" scripts/gpu_check.py budget "$MODE" $bound $FIGURES
  done
  "$PY" "$ROOT/scripts/gpu_check.py" summary "$FIGURES" || fail "the figures are incomplete"
fi
echo "gpu_check: PASSED in $((SECONDS - STARTED)) s ($MODE)"
