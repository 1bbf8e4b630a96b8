# syntax=docker/dockerfile:1
#
# The JAX transfer gate on an NVIDIA GPU (the default) or a Google Cloud TPU
# (--build-arg ACCELERATOR=tpu): one file, two images that differ only in their base image and
# JAX's extra.
#
# CUDA base image: nvidia/cuda's "base" flavour for CUDA 12.8 on Ubuntu 24.04. It is the smallest
# CUDA image (the CUDA runtime and the forward-compatibility libraries, ~100 MB, no cuDNN): JAX's
# jax[cuda12] / jax[cuda13] extras install cuBLAS, cuDNN, NCCL and ptxas as pip wheels and load
# those, so a -cudnn-runtime or -devel image would only add gigabytes JAX never loads. The image
# also sets NVIDIA_VISIBLE_DEVICES / NVIDIA_DRIVER_CAPABILITIES for the NVIDIA Container Toolkit,
# which mounts the host's driver when the container starts with `--gpus all`.
# TPU base image: plain Ubuntu 24.04. jax[tpu] brings libtpu as a pip wheel; the chips come from
# the TPU VM (/dev/accel* or /dev/vfio/*) when the container starts privileged.
# Ubuntu 24.04 brings Python 3.12 (jax needs >= 3.11).
#
# For reproducible builds, pin the base image by digest. Look the digest up with
#   docker buildx imagetools inspect nvidia/cuda:12.8.1-base-ubuntu24.04
# (the "Digest:" line), then build with
#   docker build --build-arg BASE_IMAGE=nvidia/cuda:12.8.1-base-ubuntu24.04@sha256:<digest> .
# (TPU_BASE_IMAGE likewise for ubuntu:24.04). Dependabot's and Renovate's docker updaters can keep
# such a digest current.
#
# Build:  docker build -t jax-transfer-gate .
#         CUDA 13 (needs a newer driver): docker build --build-arg JAX_CUDA=cuda13 \
#           --build-arg BASE_IMAGE=nvidia/cuda:13.0.1-base-ubuntu24.04 -t jax-transfer-gate .
#         TPU: docker build --build-arg ACCELERATOR=tpu -t jax-transfer-gate:tpu .
# Run:    docker run --rm --gpus all --user "$(id -u):$(id -g)" \
#           -v "$PWD:/repo" -v jax-cache:/cache/jax jax-transfer-gate
#         On a TPU VM, as Google runs TPU workloads in Docker: privileged (the chips) on the
#         host's network (libtpu reads the VM's metadata), with a larger /dev/shm:
#           docker run --rm --privileged --net=host --shm-size 16g \
#             -v "$PWD:/repo" -v jax-cache:/cache/jax jax-transfer-gate:tpu
#         This runs `transfer-gate run` in the repository mounted at /repo. Arguments after the image
#         name replace `run`, e.g. `... jax-transfer-gate run --junit reports/transfer-gate.xml policies/`.
#         --user makes the reports belong to you rather than to the image's user.

ARG BASE_IMAGE=nvidia/cuda:12.8.1-base-ubuntu24.04
ARG TPU_BASE_IMAGE=ubuntu:24.04
# cuda or tpu: which of the two base stages below the image is built on.
ARG ACCELERATOR=cuda

FROM ${BASE_IMAGE} AS cuda-base
FROM ${TPU_BASE_IMAGE} AS tpu-base

FROM ${ACCELERATOR}-base AS build

ARG ACCELERATOR
# cuda12 or cuda13: the jax extra that brings the CUDA wheels (ACCELERATOR=cuda only).
ARG JAX_CUDA=cuda12
ARG JAX_VERSION=0.10.2

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/venv/bin:$PATH

# pip only warns about an unknown extra and then installs a CPU-only jax, so check the names first.
# Python comes from Ubuntu's archive, unpinned (DL3008): the archive drops superseded versions, so
# an exact pin would break the build at the next security update.
# hadolint ignore=DL3008
RUN case "${ACCELERATOR}" in \
      cuda|tpu) ;; \
      *) echo "ACCELERATOR must be cuda or tpu, not '${ACCELERATOR}'" >&2; exit 1 ;; \
    esac \
 && case "${JAX_CUDA}" in \
      cuda12|cuda13) ;; \
      *) echo "JAX_CUDA must be cuda12 or cuda13, not '${JAX_CUDA}'" >&2; exit 1 ;; \
    esac \
 && apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv \
 && rm -rf /var/lib/apt/lists/* \
 && python3 -m venv /opt/venv

# JAX and its accelerator's wheels go in first, as the largest layer: it is rebuilt only when these
# arguments change, not on every change to the gate. The extra is jax[cuda12], jax[cuda13] or
# jax[tpu]; the check after it fails the build if pip quietly left the accelerator out.
RUN if [ "${ACCELERATOR}" = tpu ]; then extra=tpu plugin=libtpu; \
    else extra="${JAX_CUDA}" plugin="jax-${JAX_CUDA}-plugin"; fi \
 && pip install "jax[${extra}]==${JAX_VERSION}" \
 && pip show "${plugin}" > /dev/null

WORKDIR /src
COPY . .
RUN pip install . \
 && pip check


FROM ${ACCELERATOR}-base

LABEL org.opencontainers.image.title="jax-transfer-gate" \
      org.opencontainers.image.description="Runs JAX code regions under JAX's transfer guard and writes a JUnit report"

# python3: the interpreter /opt/venv was made with. git lets actions/checkout make a real clone
# inside the container (without git it downloads a tarball through the REST API instead). Neither
# is pinned to a version (DL3008): Ubuntu's archive drops superseded versions, so an exact pin
# would break the build at the next security update.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 git \
 && rm -rf /var/lib/apt/lists/*

COPY --from=build /opt/venv /opt/venv

# /cache/jax is world-writable (with the sticky bit) because the container may run as any uid:
# --user "$(id -u)" locally, and the runner's user in the accelerator job's sandbox
# (.github/actions/sandbox), whose first use of a volume copies this folder, mode and all.
RUN groupadd --gid 10001 gate \
 && useradd --no-log-init --create-home --uid 10001 --gid 10001 gate \
 && mkdir -p /cache/jax /repo \
 && chmod 1777 /cache/jax \
 && chown gate:gate /repo

# TF_CPP_MIN_LOG_LEVEL=0: the transfer guard's log-mode messages are C++ warnings, and a level of 2,
# which many CI images set, hides every one of them.
# NVIDIA_DRIVER_CAPABILITIES: without "compute" the container toolkit mounts only the utility
# libraries (nvidia-smi), not libcuda. The CUDA base image sets it; it is repeated here so that a
# BASE_IMAGE override without it still gets a working GPU. A TPU image never reads it.
# JAX_COMPILATION_CACHE_DIR: JAX's persistent compilation cache. Mount a volume there so that
# later runs skip recompiling.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    TF_CPP_MIN_LOG_LEVEL=0 \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    JAX_COMPILATION_CACHE_DIR=/cache/jax

VOLUME ["/cache/jax"]

# Mount the repository that has the policies/ folder here.
WORKDIR /repo
# Numeric, so that runtimes that check for a non-root user (runAsNonRoot) can tell.
USER 10001:10001

RUN transfer-gate --help > /dev/null

ENTRYPOINT ["transfer-gate"]
CMD ["run"]
