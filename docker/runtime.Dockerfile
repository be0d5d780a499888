# syntax=docker/dockerfile:1.7
# The patched environment: our torch wheel from `make build` on a slim CUDA 13.0
# runtime with cuDNN, plus what the upstream tests need. `make docker` builds it:
#   docker buildx build -f docker/runtime.Dockerfile --build-arg TORCH_WHEEL=dist/<wheel> -t <tag> --load .
#   docker run --gpus all <tag>            a shell in the patched environment
#   docker run --gpus all <tag> selftest   versions, patch set, GPU; our kernels run or it fails

# The digest was read from public Dockerfiles (this project's machines reach no
# registry): check it with `docker buildx imagetools inspect`, or override it.
ARG RUNTIME_IMAGE=nvidia/cuda:13.0.2-cudnn-runtime-ubuntu24.04@sha256:14d94b039cb94bbd5da559f303b46bc4b0d5d6c24ab1a9d7b186e566ed3400dc

FROM ${RUNTIME_IMAGE}
ENV DEBIAN_FRONTEND=noninteractive \
    PIP_NO_CACHE_DIR=1 \
    PATH=/opt/venv/bin:${PATH}
# cuda-cupti: the profiler (Kineto) loads libcupti, which the runtime image lacks;
# libgomp1: torch is built with GCC's OpenMP.
# The ubuntu24.04 CUDA images carry NVIDIA's apt repository, so its version matches.
RUN apt-get update && \
    apt-get install -y --no-install-recommends python3 python3-venv libgomp1 cuda-cupti-13-0 && \
    rm -rf /var/lib/apt/lists/* && \
    python3 -m venv /opt/venv
COPY docker/runtime/requirements.txt /opt/dwconv/requirements.txt
ARG TORCH_WHEEL
RUN test -n "${TORCH_WHEEL}" || { echo "build with --build-arg TORCH_WHEEL=dist/<wheel> (make docker does)" >&2; exit 1; }
COPY ${TORCH_WHEEL} /tmp/wheels/
RUN python -m pip install /tmp/wheels/torch-*.whl -r /opt/dwconv/requirements.txt && \
    rm -rf /tmp/wheels
COPY docker/runtime/selftest.py docker/runtime/entrypoint.sh /opt/dwconv/
WORKDIR /workspace
ENTRYPOINT ["/opt/dwconv/entrypoint.sh"]
CMD []
