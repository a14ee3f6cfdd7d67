#!/usr/bin/env bash
# scripts/bench_compare.sh BUILD_DIR: kizuna, Gloo and Open MPI side by side,
# in one run on this machine. The raw results, the report (report.md) and
# its PNG plots (plots/) go to BENCH_OUT (default BUILD_DIR/bench-compare),
# never into docs/.
#
# scripts/bench_compare.sh --doc BUILD_DIR (make bench-doc): measures
# nothing; rewrites the generated "bench-compare" section of
# docs/performance.md and the plots in docs/plots/ from the results already
# in BENCH_OUT.
#
# Each repetition (BENCH_REPS, default 3) runs, for 2 and 4 ranks, every
# configuration once, interleaved so that the machine's drift hits them all
# alike, in an order shuffled for each repetition:
#   kizuna-perf    --transport shm|tcp x --algo auto|ring|tree, and
#                  --transport shm -R 2 (symmetric memory, docs/symmetric-memory.md)
#   gloo-perf      --algo ring|ring_chunked|halving_doubling|bcube (TCP, async mode)
#   mpi-perf       under mpirun: default (shared memory), and --mca btl tcp,self
# all-reduce, float32 sum, 4 B .. 64 MiB by factors of 2, every result
# checked, as two sweeps (as the OSU micro-benchmarks do): the latency
# sizes, 4 B .. 1 KiB, whose calls take microseconds and whose figures over
# 20 calls are the scheduler's luck, with many iterations; the rest, from
# 2 KiB, with few (a sweep is a fresh job: its first size, 2 KiB, is one no
# target judges); and the ceilings the targets are judged against:
#   bench_reduce   memcpy and float32 reduce at 64 MiB (memory-bandwidth ceiling),
#                  one process alone and p = min(ranks, cores) at once
#   tcp-ring-rate  loopback TCP with 2 processes (full duplex) and a ring of 4,
#                  under the congestion control kizuna's connections use
#                  (Reno on loopback, KIZUNA_TCP_CONGESTION=auto), with 1 MiB
#                  blocks (cache-resident: the rate the targets are judged
#                  against) and with blocks of BENCH_MAX (from memory; when
#                  BENCH_MAX is 8 MiB or more); and with 1 MiB blocks under the
#                  system's congestion control, the one Gloo and Open MPI use
#   cache-distance the round trip of a cache line between the first two CPUs,
#                  before and after each sweep:
#                  on a virtual machine, the host's placement of its CPUs
# bench/compare/report.py then takes medians over the repetitions, derives
# the ceilings, checks the targets and plots.
#
# Knobs: BENCH_REPS (3), BENCH_ITERS (-n from 2 KiB, 20), BENCH_WARMUP (-w
# from 2 KiB, 5), BENCH_SMALL_ITERS (-n up to 1 KiB, 1000), BENCH_SMALL_WARMUP
# (-w up to 1 KiB, 100), BENCH_MAX (-e, 64M), BENCH_WORLDS ("2 4"), BENCH_OUT (results folder,
# default BUILD_DIR/bench-compare).
set -euo pipefail
doc=0
if [[ ${1:-} == --doc ]]; then
  doc=1
  shift
fi
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$build" && pwd)
out=${BENCH_OUT:-$build/bench-compare}

# report DOC PLOTS: the comparison's section of DOC, its plots in PLOTS.
report() {
  (cd "$root" && /usr/bin/python3 bench/compare/report.py compare --results "$out" --doc "$1" --plots "$2" \
    --command "make bench-compare")
}

if ((doc)); then
  if ! compgen -G "$out/*.json" >/dev/null; then
    echo "bench_compare.sh: no results in $out; run make bench-compare first" >&2
    exit 1
  fi
  report "$root/docs/performance.md" "$root/docs/plots"
  exit
fi

reps=${BENCH_REPS:-3}
iters=${BENCH_ITERS:-20}
warmup=${BENCH_WARMUP:-5}
max=${BENCH_MAX:-64M}
worlds=${BENCH_WORLDS:-2 4}
small_iters=${BENCH_SMALL_ITERS:-1000}
small_warmup=${BENCH_SMALL_WARMUP:-100}
# The sweeps: NAME-small.json up to 1 KiB, NAME.json from 2 KiB (or the
# small one alone up to BENCH_MAX when that is 1 KiB or less).
max_bytes=$(numfmt --from=iec "$max")
small_sweep=(-b 4 -e "$((max_bytes < 1024 ? max_bytes : 1024))" -f 2 -n "$small_iters" -w "$small_warmup")
large_sweep=()
((max_bytes > 1024)) && large_sweep=(-b 2K -e "$max" -f 2 -n "$iters" -w "$warmup")

for tool in bin/kizuna-perf bench/bench_reduce bench/compare/tcp-ring-rate bench/compare/cache-distance; do
  [[ -x "$build/$tool" ]] || { echo "bench_compare.sh: $build/$tool is not built" >&2; exit 1; }
done
have_gloo=0
have_mpi=0
[[ -x "$build/bench/compare/gloo-perf" ]] && have_gloo=1 ||
  echo "bench_compare.sh: gloo-perf is not built (libgloo-dev missing?); Gloo is left out" >&2
[[ -x "$build/bench/compare/mpi-perf" ]] && command -v mpirun >/dev/null && have_mpi=1 ||
  echo "bench_compare.sh: mpi-perf or mpirun missing (libopenmpi-dev, openmpi-bin); Open MPI is left out" >&2

# The congestion control of kizuna's loopback connections, for tcp-ring-rate
# ("" when that is the system's).
case "${KIZUNA_TCP_CONGESTION:-auto}" in
  auto) congestion=reno ;;
  system) congestion="" ;;
  *) congestion=$KIZUNA_TCP_CONGESTION ;;
esac
ring_rate() { "$build/bench/compare/tcp-ring-rate" --seconds 2 ${congestion:+--congestion "$congestion"} "$@"; }

rm -rf "$out"
mkdir -p "$out"
cat /proc/sys/net/ipv4/tcp_congestion_control >"$out/tcp-congestion.txt" 2>/dev/null || true
(cd "$root" && /usr/bin/python3 bench/compare/report.py stamp --results "$out")
source "$root/bench/compare/launcher.sh"

mpi() {
  local n=$1
  shift
  timeout -k 10 "$LAUNCH_TIMEOUT" mpirun --allow-run-as-root --oversubscribe -np "$n" "$@"
}

# run NAME COMMAND...: one configuration of one repetition; its table goes to
# $out/NAME.txt and its results to $out/NAME.json. A run that fails (a crash,
# a wrong result) is reported, its results are set aside as NAME.failed.json
# and listed in $out/failures.txt, and the comparison goes on without it.
run() {
  local name=$1
  shift
  echo "-- $name"
  distance "$name"
  if "$@" --json "$out/$name.json" >"$out/$name.txt" 2>"$out/$name.err" && [[ -s "$out/$name.json" ]]; then
    grep -E '^(\[0\] )?# Avg bus bandwidth' "$out/$name.txt" || true
  else
    echo "bench_compare.sh: $name failed; its output is in $out/$name.txt and $out/$name.err" >&2
    tail -3 "$out/$name.err" >&2 || true
    [[ -f "$out/$name.json" ]] && mv "$out/$name.json" "$out/$name.failed.json"
    echo "$name" >>"$out/failures.txt"
  fi
  distance "$name"
}

# distance NAME: where this machine's first two CPUs are, before and after a
# sweep (cache-distance: one line each into $out/NAME.distance).
distance() {
  "$build/bench/compare/cache-distance" >>"$out/$1.distance" 2>/dev/null || true
}

# sweep NAME COMMAND...: both sweeps of one configuration, one after the other.
sweep() {
  local name=$1
  shift
  run "$name-small" "$@" "${small_sweep[@]}"
  ((${#large_sweep[@]} == 0)) || run "$name" "$@" "${large_sweep[@]}"
}

# configuration N WHAT...: both sweeps of one configuration for N ranks
# (kizuna TRANSPORT ALGO, kizuna shm symmetric, gloo ALGO, mpi shm|tcp), in
# repetition $rep.
configuration() {
  local n=$1 what=$2 a=$3 b=${4:-}
  case $what in
    kizuna)
      if [[ $b == symmetric ]]; then
        sweep "kizuna-shm-symmetric-n$n-r$rep" launch "$n" "$build/bin/kizuna-perf" --transport shm --algo auto -R 2
      else
        sweep "kizuna-$a-$b-n$n-r$rep" launch "$n" "$build/bin/kizuna-perf" --transport "$a" --algo "$b"
      fi
      ;;
    gloo) sweep "gloo-$a-n$n-r$rep" launch "$n" "$build/bench/compare/gloo-perf" --algo "$a" ;;
    mpi)
      if [[ $a == shm ]]; then
        sweep "mpi-shm-n$n-r$rep" mpi "$n" "$build/bench/compare/mpi-perf" --transport shm
      else
        sweep "mpi-tcp-n$n-r$rep" mpi "$n" --mca btl tcp,self "$build/bench/compare/mpi-perf" --transport tcp
      fi
      ;;
  esac
}

cores=$(nproc)
start=$(date +%s)
for ((rep = 1; rep <= reps; rep++)); do
  echo "== repetition $rep of $reps"
  "$build/bench/bench_reduce" --benchmark_filter='^(BM_memcpy|BM_reduce/float32)/67108864$' \
    --benchmark_format=json --benchmark_out="$out/memory-r$rep.json" --benchmark_out_format=json >/dev/null
  # The same with p processes at once, p = min(ranks, cores) for each world:
  # the rates each of p ranks gets while the others copy too.
  for n in $worlds; do
    p=$((n < cores ? n : cores))
    ((p > 1)) && [[ ! -e $out/memory-p$p-r$rep-c0.json ]] || continue
    for ((k = 0; k < p; k++)); do
      "$build/bench/bench_reduce" --benchmark_filter='^(BM_memcpy|BM_reduce/float32)/67108864$' \
        --benchmark_format=json --benchmark_out="$out/memory-p$p-r$rep-c$k.json" \
        --benchmark_out_format=json >/dev/null &
    done
    wait
  done
  for n in $worlds; do
    ring_rate --procs "$n" | tee "$out/tcp-ring-n$n-r$rep.txt" | tail -1
    # The same from memory, as the largest all-reduce's data comes, once
    # that is beyond the caches.
    if ((max_bytes >= 8 << 20)); then
      ring_rate --procs "$n" --block "$max_bytes" | tee "$out/tcp-stream-n$n-r$rep.txt" | tail -1
    fi
    # What Gloo and Open MPI get: the system's congestion control.
    if [[ -n $congestion ]]; then
      "$build/bench/compare/tcp-ring-rate" --procs "$n" --seconds 2 | tee "$out/tcp-system-n$n-r$rep.txt" | tail -1
    fi
    # The configurations, in an order shuffled for each repetition (seeded
    # with its number, so a rerun repeats it), so that none always runs
    # after the same one: what runs before may leave the CPUs placed one
    # way or the other.
    configs=()
    for transport in shm tcp; do
      for algo in auto ring tree; do configs+=("kizuna $transport $algo"); done
    done
    configs+=("kizuna shm symmetric")
    if ((have_gloo)); then
      for algo in ring ring_chunked halving_doubling bcube; do configs+=("gloo $algo"); done
    fi
    if ((have_mpi)); then configs+=("mpi shm" "mpi tcp"); fi
    mapfile -t order < <(/usr/bin/python3 -c 'import random, sys
names = sys.argv[2:]
random.Random(int(sys.argv[1])).shuffle(names)
print("\n".join(names))' "$rep$n" "${configs[@]}")
    for c in "${order[@]}"; do
      # shellcheck disable=SC2086  # "kizuna shm auto": three words
      configuration "$n" $c
    done
  done
done
echo "== measured in $(( $(date +%s) - start )) s; results in $out"

status=0
report "$out/report.md" "$out/plots" || status=$?
echo "== the report is $out/report.md; make bench-doc puts it into docs/performance.md"
exit $status
