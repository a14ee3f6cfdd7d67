#!/usr/bin/env bash
# tests/gpu/run.sh: everything that needs a GPU, in one go, for a machine
# with an NVIDIA GPU (CUDA at /usr/local/cuda). Builds with CUDA, runs the
# GPU tests, a `kizuna-perf --device cuda` all-reduce sweep (8 B .. 1 GiB,
# 2/4/8 ranks on one GPU) and a device-to-device cudaMemcpy bandwidth measurement, and writes
# a summary to $OUT/gpu-summary.txt (or ./gpu-summary.txt).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-.}
build=${BUILD:-build-gpu}
start=$(date +%s)
# Ranks sharing the GPU run their kernels at once only under MPS (without
# it kizuna stages their collectives through the host): start the daemon
# for this run when the driver has it, and stop it at the end.
if command -v nvidia-cuda-mps-control >/dev/null 2>&1; then
  export CUDA_MPS_PIPE_DIRECTORY=${CUDA_MPS_PIPE_DIRECTORY:-/tmp/kizuna-mps-pipe}
  export CUDA_MPS_LOG_DIRECTORY=${CUDA_MPS_LOG_DIRECTORY:-/tmp/kizuna-mps-log}
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if nvidia-cuda-mps-control -d; then
    trap 'echo quit | nvidia-cuda-mps-control || true' EXIT
  fi
fi
{
  echo "# kizuna GPU run, $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  echo "MPS: $(pgrep -x nvidia-cuda-mps-control >/dev/null && echo on || echo off)"
  cmake -S . -B "$build" -DKIZUNA_CUDA=ON -DKIZUNA_BENCH=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$build" -j "$(nproc)" --target test_gpu kizuna-d2d-bandwidth kizuna-perf kizuna-run >/dev/null
  echo "## device-to-device copy rate (cudaMemcpy)"
  "$build/tests/gpu/kizuna-d2d-bandwidth"
  # Each step is bounded and a failure is reported, not fatal: the summary
  # must come back within the device time even if a step hangs or fails.
  echo "## GPU tests (at most 300 s)"
  timeout -k 10 300 "$build/tests/gpu/test_gpu" || echo "test_gpu: exit $?"
  for n in 2 4 8; do
    echo "## kizuna-perf --device cuda, all_reduce float32 sum, $n ranks on GPU 0 (at most 90 s)"
    timeout -k 10 90 "$build/bin/kizuna-run" --nproc-per-node "$n" -- "$build/bin/kizuna-perf" --device cuda \
      -b 8 -e 1G -f 4 -n 10 -w 2 || echo "kizuna-perf with $n ranks: exit $?"
  done
  echo "# total $(( $(date +%s) - start )) s"
} 2>&1 | tee "$out/gpu-summary.txt"
