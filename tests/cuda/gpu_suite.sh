#!/usr/bin/env bash
# One part of the CUDA backend's GPU suite (tests/cuda/gpu_suite.c), with
# the device each step needs: `ops` draws every op family on the CPU and
# on the GPU from the same inputs and compares them; the other parts run
# on the GPU alone. Registered by -DLZ_CUDA_GPU_TESTS=ON (ctest -L
# cuda_gpu), run by scripts/device_check.sh.
# usage: gpu_suite.sh GPU_SUITE PART [OUT_DIR]
set -uo pipefail
suite=$1
part=$2
out=${3:-$(mktemp -d)}
mkdir -p "$out"
if [ "$part" = ops ]; then
  LZ_DEVICE=cpu "$suite" ops "$out/ops_cpu.safetensors" || exit 1
  LZ_DEVICE=cuda "$suite" ops "$out/ops_cuda.safetensors" || exit 1
  exec env LZ_DEVICE=cpu "$suite" compare "$out/ops_cpu.safetensors" "$out/ops_cuda.safetensors"
fi
exec env LZ_DEVICE=cuda "$suite" "$part"
