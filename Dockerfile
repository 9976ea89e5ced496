# The rlvr image: the project and its pinned environment, for the nightly-docker deployment in
# prefect.yaml (a docker work pool). Build it from the repository root on the worker's host:
#
#   docker build -t rlvr:latest .
#
# As ./dev sets up .venv: Python 3.11, every version from requirements.lock, torch as the 2.13.0
# CPU wheel (from PyPI, torch==2.13.0 would resolve to the CUDA build), offline at run time. The
# repository's git history comes along (.dockerignore keeps .git): DVC needs the repository, and
# the flow's artifacts name the commit.
FROM python:3.11-slim

RUN apt-get update \
 && apt-get install -y --no-install-recommends git \
 && rm -rf /var/lib/apt/lists/*

# Where the CPU build of torch comes from (a mirror of it, or a folder with --find-links, works too).
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu

WORKDIR /opt/rlvr
COPY requirements.lock pyproject.toml ./
RUN python -m pip install --no-cache-dir --disable-pip-version-check pip==25.3 \
 && python -m pip install --no-cache-dir --index-url "$TORCH_INDEX_URL" torch==2.13.0 \
 && python -m pip install --no-cache-dir -r requirements.lock -c requirements.lock

COPY . .
RUN python -m pip install --no-cache-dir --no-deps -e .

ENV HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 DVC_NO_ANALYTICS=1 \
    GX_ANALYTICS_ENABLED=false PREFECT_SERVER_ANALYTICS_ENABLED=false \
    TOKENIZERS_PARALLELISM=false RLVR_ROOT=/opt/rlvr PREFECT_HOME=/opt/rlvr/.prefect
