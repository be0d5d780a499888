# syntax=docker/dockerfile:1.7
# The custom torch wheel: the pinned PyTorch source, patched with our harness and
# built the way v2.11.0's release wheels are. `make build` runs it with
#   docker buildx build -f docker/builder.Dockerfile --target wheel --output type=local,dest=dist .
# and the wheel lands in dist/. The README ("Full build") explains every choice.

# An official CUDA 13.0 development image with cuDNN. The digest was read from
# public Dockerfiles (this project's machines reach no registry): check it with
# `docker buildx imagetools inspect nvidia/cuda:13.0.2-cudnn-devel-ubuntu24.04`,
# or pass --build-arg BUILDER_IMAGE=... (pytorch/manylinux2_28-builder:cuda13.0
# works too; its python is /opt/python/cp312-cp312/bin/python, set PYTHON).
ARG BUILDER_IMAGE=nvidia/cuda:13.0.2-cudnn-devel-ubuntu24.04@sha256:e071e85c52ad91fc9ea24158ff5330876b2d1a5c4ac83ccc6066976835873c01

FROM ${BUILDER_IMAGE} AS toolchain
ARG PYTHON=python3
ENV DEBIAN_FRONTEND=noninteractive \
    PIP_NO_CACHE_DIR=1 \
    PYTORCH_SRC=/opt/pytorch \
    CCACHE_DIR=/root/.cache/ccache \
    CCACHE_MAXSIZE=30G \
    PATH=/opt/venv/bin:${PATH}
# git clones the source; ccache keeps object files between builds; python3-dev
# gives Python.h for torch's C extension. cmake and ninja come from the pinned
# requirements-build.txt below, at the versions v2.11.0 asks for.
RUN if command -v apt-get >/dev/null; then \
        apt-get update && \
        apt-get install -y --no-install-recommends git ca-certificates ccache python3 python3-dev python3-venv && \
        rm -rf /var/lib/apt/lists/*; \
    fi && \
    "${PYTHON}" -m venv /opt/venv && \
    /opt/venv/bin/python -m pip install --upgrade pip

# --- source: `make source` (clone the pinned tag with submodules, check the commit).
# Only the files that step reads are copied, so that editing the rest of the
# harness or the patch set does not clone again.
FROM toolchain AS source
WORKDIR /dwconv
COPY pin.toml ./
COPY build_scripts/__init__.py build_scripts/__main__.py build_scripts/errors.py \
     build_scripts/gitutil.py build_scripts/pin.py build_scripts/source.py \
     build_scripts/stamp.py ./build_scripts/
ARG PYTORCH_GIT_URL=
RUN PYTORCH_GIT_URL="${PYTORCH_GIT_URL}" python -m build_scripts source

# --- requirements: v2.11.0's build requirements (the checkout's own
# requirements-build.txt), PyPA build, and the harness's few dependencies.
FROM source AS requirements
COPY pyproject.toml ./
COPY build_scripts/wheel_build.py build_scripts/wheel_facts.py ./build_scripts/
RUN python -m build_scripts build-wheel --steps requirements

# --- patched: `make patch`, the same harness code, all or nothing.
FROM requirements AS patched
COPY . /dwconv
RUN python -m build_scripts patch && python -m build_scripts series

# --- compile: `python -m build --wheel --no-isolation` with our settings
# (build_scripts/wheel_build.py). ccache lives in a BuildKit cache mount and the
# source path is always /opt/pytorch, so a kernel edit recompiles one file.
FROM patched AS compile
ARG TORCH_CUDA_ARCH_LIST=
ARG MAX_JOBS=
RUN --mount=type=cache,id=dwconv-ccache,target=/root/.cache/ccache \
    TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST}" MAX_JOBS="${MAX_JOBS}" \
    python -m build_scripts build-wheel --steps compile --out /dist && \
    ccache --show-stats

# --- wheel: only the wheel, for `--output type=local,dest=dist`.
FROM scratch AS wheel
COPY --from=compile /dist/ /
