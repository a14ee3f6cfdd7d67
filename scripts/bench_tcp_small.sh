#!/usr/bin/env bash
# Small all-reduces over loopback TCP: kizuna against Open MPI (btl tcp,self),
# with the floor under both (bench/compare/tcp-exchange), in one run.
#
#   scripts/bench_tcp_small.sh [BUILD_DIR]      (make bench-tcp-small)
#
# BENCH_REPS repetitions (default 5); in each, for 2 ranks then 4, kizuna-perf
# under kizuna-run and mpi-perf under mpirun take turns, 8 B to 1 KiB by
# factors of 2, float32 sum, BENCH_ITERS calls after a warm-up (default 1000),
# and with 2 ranks tcp-exchange measures the bare exchange of each size.
# Prints a table of medians (time per call of the in-place all-reduce, us)
# with kizuna / Open MPI, and writes the raw output to
# BUILD_DIR/bench-tcp-small/. Open MPI missing: an error.
set -euo pipefail

build=${1:-build}
reps=${BENCH_REPS:-5}
iters=${BENCH_ITERS:-1000}
out="$build/bench-tcp-small"
mpirun=$(command -v mpirun || true)
for tool in "$build/bin/kizuna-run" "$build/bin/kizuna-perf" "$build/bench/compare/mpi-perf" \
  "$build/bench/compare/tcp-exchange"; do
  [[ -x "$tool" ]] || { echo "bench_tcp_small: $tool is not built (make build; Open MPI: make deps)" >&2; exit 1; }
done
[[ -n "$mpirun" ]] || { echo "bench_tcp_small: mpirun not found (Debian openmpi-bin; make deps)" >&2; exit 1; }
mkdir -p "$out"
rm -f "$out"/*.txt

sizes=(8 16 32 64 128 256 512 1024)
for ((rep = 1; rep <= reps; rep++)); do
  for n in 2 4; do
    "$build/bin/kizuna-run" --nproc-per-node "$n" -- "$build/bin/kizuna-perf" --transport tcp \
      -b 8 -e 1K -f 2 -n "$iters" -w 100 >"$out/kizuna-n$n-r$rep.txt" 2>&1
    "$mpirun" --allow-run-as-root --oversubscribe -np "$n" --mca btl tcp,self \
      "$build/bench/compare/mpi-perf" --transport tcp -b 8 -e 1K -f 2 -n "$iters" -w 100 \
      >"$out/mpi-n$n-r$rep.txt" 2>&1
    if ((n == 2)); then
      for s in "${sizes[@]}"; do
        "$build/bench/compare/tcp-exchange" --bytes "$s" --rounds $((iters * 10)) --reps 1 | tail -1
      done >"$out/floor-n2-r$rep.txt"
    fi
  done
  echo "bench_tcp_small: repetition $rep of $reps done" >&2
done

python3 - "$out" "$reps" <<'EOF'
import re, statistics, sys
out, reps = sys.argv[1], int(sys.argv[2])

def perf_times(path):
    """{size: in-place time (us)} from a kizuna-perf or mpi-perf report."""
    times = {}
    for line in open(path):
        f = re.sub(r"^\[\d+\]", "", line).split()
        if len(f) >= 13 and f[0].isdigit() and f[2] == "float":
            times[int(f[0])] = float(f[9])
    return times

def floor_times(path):
    times = {}
    for line in open(path):
        m = re.match(r"tcp-exchange bytes (\d+) median ([0-9.]+) us", line)
        if m:
            times[int(m[1])] = float(m[2])
    return times

def medians(kind, n, reader):
    runs = [reader(f"{out}/{kind}-n{n}-r{r}.txt") for r in range(1, reps + 1)]
    sizes = sorted(set.intersection(*(set(t) for t in runs)))
    return {s: statistics.median(t[s] for t in runs) for s in sizes}

k2, m2, f2 = medians("kizuna", 2, perf_times), medians("mpi", 2, perf_times), medians("floor", 2, floor_times)
k4, m4 = medians("kizuna", 4, perf_times), medians("mpi", 4, perf_times)
print(f"Time per all-reduce (us), float32 sum in place, loopback TCP; medians of {reps} repetitions")
print("| size | 2 ranks: floor | kizuna | Open MPI | kizuna / Open MPI | 4 ranks: kizuna | Open MPI | kizuna / Open MPI |")
print("|---|---|---|---|---|---|---|---|")
for s in sorted(k2):
    print(f"| {s} B | {f2.get(s, float('nan')):.1f} | {k2[s]:.1f} | {m2[s]:.1f} | {k2[s] / m2[s]:.2f} | "
          f"{k4[s]:.1f} | {m4[s]:.1f} | {k4[s] / m4[s]:.2f} |")
EOF
