#!/usr/bin/env bash
# scripts/bench_auto.sh BUILD_DIR (make bench-auto): is "auto" the fastest
# way to run an all-reduce here? For every configuration, one launch of
# kizuna-perf --calibrate PROFILE --versus PROFILE, in which the same
# processes
#   1. measure every candidate and write their section of the tuning
#      profile BENCH_OUT/profile.txt (docs/tuning.md#tuner), going on for
#      up to BENCH_PLACEMENT_WAIT (default 60s) while the CPUs were found
#      near or far in fewer rounds than BENCH_REPS, so that the profile
#      holds a table of each placement where the host moves the CPUs;
#   2. race, alternating in BENCH_REPS rounds (default 5), each round's
#      contenders in another order: auto with that profile, auto without
#      one (the built-in rules), and every forced choice: each algorithm,
#      the mailboxes (up to 1 KiB), the staged route and, on symmetric
#      memory, the symmetric route (tools/perf/versus.hpp);
#   3. bench/auto/report.py takes each one's median per size and writes,
#      per configuration, auto / best forced and the worst ratio.
# One set of processes per configuration: the host places ranks on its
# CPUs differently at each launch, and the same code then differs by more
# than the 10% the comparison looks for.
# Configurations: shared memory with BENCH_SHM_WORLDS ranks ("2 3 4 8"),
# private and symmetric buffers (-R 2); TCP with BENCH_TCP_WORLDS ("2 4"),
# private buffers (symmetric memory needs shared memory). All-reduce of
# float32, sum, in place, 8 B .. BENCH_MAX (64M) by factors of 2, every
# contender's result checked at every size.
# Results go to BENCH_OUT (default BUILD_DIR/bench-auto); --doc rewrites the
# "bench-auto" section of docs/performance.md from them.
set -euo pipefail
doc=0
if [[ ${1:-} == --doc ]]; then
  doc=1
  shift
fi
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$build" && pwd)
out=${BENCH_OUT:-$build/bench-auto}
report() { (cd "$root" && /usr/bin/python3 bench/auto/report.py --results "$out" "$@"); }

if ((doc)); then
  compgen -G "$out/*.json" >/dev/null || { echo "bench_auto.sh: no results in $out; run make bench-auto first" >&2; exit 1; }
  report --doc "$root/docs/performance.md"
  exit
fi

reps=${BENCH_REPS:-5}
placement_wait=${BENCH_PLACEMENT_WAIT:-60s}
max=${BENCH_MAX:-64M}
shm_worlds=${BENCH_SHM_WORLDS:-2 3 4 8}
tcp_worlds=${BENCH_TCP_WORLDS:-2 4}
perf=$build/bin/kizuna-perf
[[ -x $perf ]] || { echo "bench_auto.sh: $perf is not built" >&2; exit 1; }
source "$root/bench/compare/launcher.sh"

rm -rf "$out"
mkdir -p "$out"
profile=$out/profile.txt

configs=()
for n in $shm_worlds; do configs+=("shm $n 0" "shm $n 2"); done
for n in $tcp_worlds; do configs+=("tcp $n 0"); done

start=$(date +%s)
for config in "${configs[@]}"; do
  read -r transport n register <<<"$config"
  cname="$transport-n$n-$([[ $register == 2 ]] && echo symmetric || echo private)"
  echo "== $cname"
  if launch "$n" "$perf" --transport "$transport" -R "$register" -b 8 -e "$max" -f 2 --rounds "$reps" \
    --placement-wait "$placement_wait" --calibrate "$profile" --versus "$profile" --json "$out/$cname--versus.json" >"$out/$cname.txt" 2>"$out/$cname.err"; then
    grep -E '# (wrote|wrong)' "$out/$cname.txt" || true
  else
    echo "bench_auto.sh: $cname failed; see $out/$cname.txt and $out/$cname.err" >&2
    echo "$cname" >>"$out/failures.txt"
  fi
done
echo "bench_auto.sh: $(($(date +%s) - start)) s" | tee "$out/duration.txt"
report --markdown "$out/report.md"
echo "bench_auto.sh: report in $out/report.md (make bench-auto-doc puts it in docs/performance.md)"
