#!/usr/bin/env bash
# Build gpu_wheels/ (git-ignored) HERE, where the package registry is reachable, for the GPU check
# (scripts/gpu_check.sh) on a GPU machine that reaches no network:
#   - the wheels of scripts/gpu_wheels.txt at requirements.lock's versions and hashes, without
#     dependencies (the rest is on the GPU image), for CPython 3.11 and 3.12 where a wheel is binary
#     (the GPU image has 3.12; trl 1.16 needs >= 3.11; GPU_WHEELS_PYTHONS="3.12" narrows it);
#     requirements.txt: their pins and hashes (the GPU check installs with --require-hashes);
#   - params.yaml: params.yaml with profiles/gpu.yaml applied by DVC's code (DVC is not on the GPU
#     machine); the check sizes the model and the run on top of it.
# Usage: bash scripts/gpu_wheels.sh     then the device tool: command "bash scripts/gpu_check.sh",
#                                       carry ["gpu_wheels"] (64 MiB at most with the working tree)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=gpu_wheels
PYTHONS=${GPU_WHEELS_PYTHONS:-3.11 3.12}  # not 3.10: trl 1.16 requires Python >= 3.11

# pure Python, with no wheel on PyPI: built here into one, from its sdist (checked by its hash)
BUILT=" antlr4-python3-runtime "

rm -rf "$OUT"
mkdir -p "$OUT/built"
log=$(mktemp)
fail() { grep -v "is ignored: it is neither" "$log" >&2; echo "gpu_wheels: FAILED $1" >&2; exit 1; }
for name in $(sed 's/#.*//' scripts/gpu_wheels.txt); do  # each pin with its hashes
  awk -v pin="$name==" 'tolower(substr($0, 1, length(pin))) == tolower(pin) {on = 1}
                        on {print; if (!/\\$/) exit}' requirements.lock > "$OUT/entry"
  [ -s "$OUT/entry" ] || { echo "gpu_wheels: $name is not pinned in requirements.lock" >&2; exit 1; }
  if [[ "$BUILT" == *" $name "* ]]; then
    ./dev run python -m pip wheel --quiet --disable-pip-version-check --no-deps --require-hashes \
      -w "$OUT/built" -r "$OUT/entry" >"$log" 2>&1 || fail "building $name"
  else
    cat "$OUT/entry" >> "$OUT/requirements.txt"
  fi
done
rm "$OUT/entry"
for python in $PYTHONS; do  # fails when a pin has no wheel for this Python, or other bytes
  ./dev run python -m pip download --quiet --disable-pip-version-check --no-deps --require-hashes \
    --only-binary=:all: --implementation cp --python-version "$python" \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$OUT" -r "$OUT/requirements.txt" >"$log" 2>&1 \
    || fail "for Python $python"
done
for wheel in "$OUT"/built/*.whl; do  # the GPU check installs the built ones by their hash too
  pin=$(basename "$wheel" | cut -d- -f1,2 | sed 's/-/==/')
  echo "$pin --hash=sha256:$(sha256sum "$wheel" | cut -c1-64)" >> "$OUT/requirements.txt"
  mv "$wheel" "$OUT/"
done
rmdir "$OUT/built"
rm -f "$log"
./dev run python -m rlvr.params.profiles gpu --out "$OUT/params.yaml" >/dev/null
echo "gpu_wheels: $(ls "$OUT"/*.whl | wc -l) wheels for Python ${PYTHONS// /, } + params.yaml in $OUT/: $(du -sb "$OUT" | awk '{printf "%.1f MiB", $1/1048576}')"
