# The rlvr image: the project and its pinned environment, for the nightly-docker deployment in
# prefect.yaml (a docker work pool). Build it from the repository root on the worker's host:
#
#   docker build -t rlvr:latest .
#
# As ./dev sets up .venv: Python 3.11, every version from requirements.lock, torch as the 2.13.0
# CPU wheel (from PyPI, torch==2.13.0 would resolve to the CUDA build), offline at run time. The
# repository's git history comes along (.dockerignore keeps .git): DVC needs the repository, and
# the flow's artifacts name the commit.
# The base image: by tag here (a digest cannot be looked up offline); pin it by digest where you
# build, so the next build starts from the same bytes:
#   docker buildx imagetools inspect python:3.11-slim      (its "Digest: sha256:...")
#   docker build --build-arg PYTHON_IMAGE=python:3.11-slim@sha256:<digest> -t rlvr:latest .
ARG PYTHON_IMAGE=python:3.11-slim
FROM ${PYTHON_IMAGE}

RUN apt-get update \
 && apt-get install -y --no-install-recommends git \
 && rm -rf /var/lib/apt/lists/*

# Where the CPU build of torch comes from (a mirror of it, or a folder with --find-links, works too).
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu

WORKDIR /opt/rlvr
# Every file by the sha256 that requirements.lock holds for it, torch's CPU wheel too (its entry
# alone, from the CPU index: torch.txt), then the project apart, as ./dev does.
COPY requirements.lock pyproject.toml ./
RUN awk '/^pip==/ {on = 1} on {print; if (!/\\$/) exit}' requirements.lock > pip.txt \
 && awk '/^torch==/ {on = 1} on {print; if (!/\\$/) exit}' requirements.lock > torch.txt \
 && python -m pip install --no-cache-dir --disable-pip-version-check --require-hashes -r pip.txt \
 && python -m pip install --no-cache-dir --no-deps --index-url "$TORCH_INDEX_URL" \
      --require-hashes -r torch.txt \
 && python -m pip install --no-cache-dir --require-hashes -r requirements.lock \
 && rm pip.txt torch.txt

COPY . .
RUN python -m pip install --no-cache-dir --no-deps --no-build-isolation -e .

ENV HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 DVC_NO_ANALYTICS=1 \
    GX_ANALYTICS_ENABLED=false PREFECT_SERVER_ANALYTICS_ENABLED=false \
    TOKENIZERS_PARALLELISM=false RLVR_ROOT=/opt/rlvr PREFECT_HOME=/opt/rlvr/.prefect
