#!/usr/bin/env bash
# The gate's GPU checks, as one prepared run on a machine with an NVIDIA GPU and JAX's CUDA
# plugin (for instance the lent H200: `run` with this script and a timeout that leaves time for
# a rerun). CI never has a GPU; this is where the GPU-only paths get exercised:
#   1. doctor --expect gpu: JAX really runs on the GPU;
#   2. the tests marked `gpu` (guard and detector side by side on device-to-host, doctor's CUDA
#      details);
#   3. the shipped policies and the overhead benchmark on the GPU.
# Logs go to $OUT (the device tool's folder) or reports/gpu-check/.
# Needs pyyaml, junit-xml, pytest and xmlschema next to jax; carry them as wheels where the
# machine has no network (see the device tool's README).
set -uo pipefail
out=${OUT:-reports/gpu-check}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
status=0
python3 -m gate doctor --expect gpu 2>&1 | tee "$out/doctor.log" || status=1
python3 -m pytest -q -m gpu -p no:cacheprovider tests 2>&1 | tee "$out/gpu-tests.log" || status=1
python3 -m gate run --json "$out/policies.json" --junit "$out/policies.xml" 2>&1 \
  | tee "$out/policies.log" || status=1
python3 -m benchmarks gate_overhead 2>&1 | tee "$out/overhead.log" || status=1
exit "$status"
