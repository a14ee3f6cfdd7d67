#!/usr/bin/env bash
# tests/gpu/run.sh: everything that needs a GPU, in one go, for a machine
# with an NVIDIA GPU (CUDA at /usr/local/cuda). Builds with CUDA, runs the
# GPU tests, a `kizuna-perf --device cuda` all-reduce sweep (8 B .. 1 GiB,
# 2/4/8 ranks on one GPU) and a device-to-device cudaMemcpy bandwidth measurement, and writes
# a summary to $OUT/gpu-summary.txt (or ./gpu-summary.txt).
#
# PREBUILT=DIR skips the build and runs DIR/bin with DIR/lib first on the
# library path: for a GPU machine that lacks the build's dependencies (no
# Asio, no package registry). tests/gpu/pack.sh DIR fills DIR from build/.
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
  echo "MPS: $(pgrep -f nvidia-cuda-mps-control >/dev/null && echo on || echo off)"
  if [ -n "${PREBUILT:-}" ]; then
    bin=$PREBUILT/bin
    export LD_LIBRARY_PATH=$PREBUILT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    echo "prebuilt: $(cat "$PREBUILT/commit" 2>/dev/null || echo unknown commit)"
  else
    cmake -S . -B "$build" -DKIZUNA_CUDA=ON -DKIZUNA_BENCH=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build "$build" -j "$(nproc)" --target test_gpu kizuna-d2d-bandwidth kizuna-perf kizuna-run >/dev/null
    mkdir -p "$build/gpu-bin"
    ln -sf ../tests/gpu/test_gpu ../tests/gpu/kizuna-d2d-bandwidth ../bin/kizuna-perf ../bin/kizuna-run "$build/gpu-bin/"
    bin=$build/gpu-bin
  fi
  echo "## device-to-device copy rate (cudaMemcpy)"
  "$bin/kizuna-d2d-bandwidth" || echo "kizuna-d2d-bandwidth: exit $?"
  # Each step is bounded and a failure is reported, not fatal: the summary
  # must come back within the device time even if a step hangs or fails.
  echo "## GPU tests (at most ${GPU_TEST_LIMIT:-300} s)"
  timeout -k 10 "${GPU_TEST_LIMIT:-300}" "$bin/test_gpu" || echo "test_gpu: exit $?"
  for n in ${PERF_RANKS:-2 4 8}; do
    echo "## kizuna-perf --device cuda, all_reduce float32 sum, $n ranks on GPU 0 (at most ${PERF_LIMIT:-90} s)"
    timeout -k 10 "${PERF_LIMIT:-90}" "$bin/kizuna-run" --nproc-per-node "$n" -- "$bin/kizuna-perf" --device cuda \
      -b 8 -e "${PERF_MAX:-1G}" -f 4 -n 10 -w 2 || echo "kizuna-perf with $n ranks: exit $?"
  done
  echo "# total $(( $(date +%s) - start )) s"
} 2>&1 | tee "$out/gpu-summary.txt"
