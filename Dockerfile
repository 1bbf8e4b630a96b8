# syntax=docker/dockerfile:1
#
# The JAX transfer gate on an NVIDIA GPU.
#
# Base image: the official Python image, not nvidia/cuda. jax[cuda12] and jax[cuda13] install the
# CUDA runtime, cuBLAS, cuDNN, NCCL and ptxas as pip wheels, and JAX loads those, not a system CUDA.
# The host only has to provide the NVIDIA driver, and the NVIDIA Container Toolkit mounts it in
# when the container starts with `--gpus all`. An nvidia/cuda:*-cudnn-runtime base would add
# several GB of a second CUDA that JAX never loads, and its version could drift from the wheels'.
# Python 3.12: jax needs >= 3.11. Debian 13 (trixie) is the current Debian stable.
#
# For reproducible builds, pin the base image by digest. Look the digest up with
#   docker buildx imagetools inspect python:3.12-slim-trixie
# (the "Digest:" line), then build with
#   docker build --build-arg BASE_IMAGE=python:3.12-slim-trixie@sha256:<digest> .
# Dependabot's and Renovate's docker updaters can keep such a digest current.
#
# Build:  docker build -t jax-transfer-gate .
#         docker build --build-arg JAX_CUDA=cuda13 -t jax-transfer-gate .   (CUDA 13 needs a newer driver)
# Run:    docker run --rm --gpus all --user "$(id -u):$(id -g)" \
#           -v "$PWD:/repo" -v jax-cache:/cache/jax jax-transfer-gate
#         This runs `transfer-gate run` in the repository mounted at /repo. Arguments after the image
#         name replace `run`, e.g. `... jax-transfer-gate run --junit reports/transfer-gate.xml policies/`.
#         --user makes the reports belong to you rather than to the image's user.

ARG BASE_IMAGE=python:3.12-slim-trixie

FROM ${BASE_IMAGE} AS build

# cuda12 or cuda13: the jax extra that brings the CUDA wheels.
ARG JAX_CUDA=cuda12
ARG JAX_VERSION=0.10.2

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/venv/bin:$PATH

# pip only warns about an unknown extra and then installs a CPU-only jax, so check the name first.
RUN case "${JAX_CUDA}" in \
      cuda12|cuda13) ;; \
      *) echo "JAX_CUDA must be cuda12 or cuda13, not '${JAX_CUDA}'" >&2; exit 1 ;; \
    esac \
 && python -m venv /opt/venv

# JAX and its CUDA wheels go in first, as the largest layer: it is rebuilt only when these arguments
# change, not on every change to the gate.
RUN pip install "jax[${JAX_CUDA}]==${JAX_VERSION}" \
 && pip show "jax-${JAX_CUDA}-plugin" > /dev/null

WORKDIR /src
COPY . .
RUN pip install . \
 && pip check


FROM ${BASE_IMAGE}

LABEL org.opencontainers.image.title="jax-transfer-gate" \
      org.opencontainers.image.description="Runs JAX code regions under JAX's transfer guard and writes a JUnit report"

# git lets actions/checkout make a real clone inside the container. Without git it downloads a
# tarball through the REST API instead. git is not pinned to a version (DL3008): Debian's archive
# drops superseded versions, so an exact pin would break the build at the next security update.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends git \
 && rm -rf /var/lib/apt/lists/*

COPY --from=build /opt/venv /opt/venv

# /cache/jax is world-writable (with the sticky bit) because the container may run as any uid:
# --user "$(id -u)" locally, and root in GitHub Actions container jobs.
RUN groupadd --gid 10001 gate \
 && useradd --no-log-init --create-home --uid 10001 --gid 10001 gate \
 && mkdir -p /cache/jax /repo \
 && chmod 1777 /cache/jax \
 && chown gate:gate /repo

# TF_CPP_MIN_LOG_LEVEL=0: the transfer guard's log-mode messages are C++ warnings, and a level of 2,
# which many CI images set, hides every one of them.
# NVIDIA_DRIVER_CAPABILITIES: without "compute" the container toolkit mounts only the utility
# libraries (nvidia-smi), not libcuda. nvidia/cuda images set this, a plain image has to set it.
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
