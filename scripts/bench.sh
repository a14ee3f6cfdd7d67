#!/usr/bin/env bash
# scripts/bench.sh BUILD_DIR: every benchmark, full sweeps.
#   1. bench_reduce: the host reductions (Google Benchmark).
#   2. kizuna-perf: every collective at 2 and 4 ranks (processes), float32,
#      4 B .. 64 MiB, BENCH_REPS runs each (default 3), every result checked;
#      the medians go into BENCH_OUT/report.md (bench/compare/report.py).
# Everything it writes stays in the build directory, never in docs/.
# Ranks are started by kizuna-run when it is built, else by
# bench/compare/launch.sh. Knobs: BENCH_REPS, BENCH_ITERS (-n, default 20),
# BENCH_WARMUP (-w, 5), BENCH_MAX (-e, 64M), BENCH_WORLDS ("2 4"), BENCH_OUT
# (results folder, default BUILD_DIR/bench-results).
set -euo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$build" && pwd)
"$build/bench/bench_reduce" --benchmark_repetitions=3 --benchmark_report_aggregates_only=true

reps=${BENCH_REPS:-3}
iters=${BENCH_ITERS:-20}
warmup=${BENCH_WARMUP:-5}
max=${BENCH_MAX:-64M}
worlds=${BENCH_WORLDS:-2 4}
out=${BENCH_OUT:-$build/bench-results}
rm -rf "$out"
mkdir -p "$out"
(cd "$root" && /usr/bin/python3 bench/compare/report.py stamp --results "$out")

source "$root/bench/compare/launcher.sh"

for ((rep = 1; rep <= reps; rep++)); do
  for n in $worlds; do
    for c in all_reduce all_gather reduce_scatter broadcast reduce; do
      echo "== kizuna-perf $c, $n ranks, run $rep of $reps"
      launch "$n" "$build/bin/kizuna-perf" --collective "$c" -b 4 -e "$max" -f 4 -n "$iters" -w "$warmup" \
        --json "$out/kizuna-$c-n$n-r$rep.json"
    done
  done
done
cd "$root"
/usr/bin/python3 bench/compare/report.py bench --results "$out" --doc "$out/report.md" --command "make bench"
