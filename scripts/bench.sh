#!/usr/bin/env bash
# scripts/bench.sh BUILD_DIR: every benchmark, full sweeps.
set -euo pipefail
build=${1:-build}
"$build/bench/bench_reduce" --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
