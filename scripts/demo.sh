#!/usr/bin/env bash
# scripts/demo.sh BUILD_DIR: the main demonstration on the built-in CPU
# default. Today: the host reduction kernels every collective runs on, at the
# size the performance targets name, against memcpy and a plain float loop.
set -euo pipefail
build=${1:-build}
echo "== kizuna: host reductions (Sum, 16 MiB per operand), against memcpy and a plain float loop"
"$build/bench/bench_reduce" --benchmark_filter='/16777216$' --benchmark_repetitions=3 \
  --benchmark_report_aggregates_only=true --benchmark_min_time=0.2 2>&1 |
  grep -E 'Benchmark|----|_median'
