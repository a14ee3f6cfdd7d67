#!/usr/bin/env bash
# scripts/bench_auto.sh BUILD_DIR (make bench-auto): is "auto" the fastest
# way to run an all-reduce here? For every configuration, in one run:
#   1. kizuna-perf --calibrate measures every candidate and writes its
#      section of the tuning profile BENCH_OUT/profile.txt
#      (docs/tuning.md#tuner);
#   2. each repetition (BENCH_REPS, default 5) runs, in an order shuffled
#      for that repetition: auto with the profile (KIZUNA_TUNING_FILE), auto
#      without it (the built-in rules), and every forced choice: each
#      algorithm (--algo), the mailboxes (KIZUNA_MAILBOX_UPTO=1K, up to
#      1 KiB), the staged route (KIZUNA_STAGED_FROM=0) and, on symmetric
#      memory, the symmetric route (KIZUNA_SYMMETRIC_FROM=0);
#   3. bench/auto/report.py takes the median time of each per size and
#      writes, per configuration, auto / best forced and the worst ratio.
# Configurations: shared memory with BENCH_SHM_WORLDS ranks ("2 3 4 8"),
# private and symmetric buffers (-R 2); TCP with BENCH_TCP_WORLDS ("2 4"),
# private buffers (symmetric memory needs shared memory). All-reduce of
# float32, sum, every result checked, as three sweeps: 8 B .. 1 KiB by
# factors of 2 (-n 200), 4 KiB .. 1 MiB and 4 MiB .. BENCH_MAX (64M) by
# factors of 4 (-n 20, then -n 4: the largest calls take tens of ms).
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
max=${BENCH_MAX:-64M}
shm_worlds=${BENCH_SHM_WORLDS:-2 3 4 8}
tcp_worlds=${BENCH_TCP_WORLDS:-2 4}
perf=$build/bin/kizuna-perf
[[ -x $perf ]] || { echo "bench_auto.sh: $perf is not built" >&2; exit 1; }
source "$root/bench/compare/launcher.sh"
never=4611686018427387904  # 4 EiB: a route threshold never reached

rm -rf "$out"
mkdir -p "$out"
profile=$out/profile.txt

# sweeps NAME N ARGS...: the three sweeps of one run, NAME-{small,mid,large}.json.
sweeps() {
  local name=$1 n=$2
  shift 2
  local part args
  for part in small mid large; do
    case $part in
      small) args=(-b 8 -e 1K -f 2 -n 200 -w 20) ;;
      mid) args=(-b 4K -e 1M -f 4 -n 20 -w 3) ;;
      large) args=(-b 4M -e "$max" -f 4 -n 4 -w 1) ;;
    esac
    if ! launch "$n" "$@" "${args[@]}" --json "$out/$name-$part.json" >"$out/$name-$part.txt" 2>"$out/$name-$part.err"; then
      echo "bench_auto.sh: $name-$part failed; see $out/$name-$part.err" >&2
      [[ -f $out/$name-$part.json ]] && mv "$out/$name-$part.json" "$out/$name-$part.failed.json"
      echo "$name-$part" >>"$out/failures.txt"
    fi
    if [[ $name == *--mailbox--* ]]; then break; fi  # the mailboxes end at 1 KiB
  done
}

# run CONFIG CHOICE N TRANSPORT REGISTER: one choice's sweeps.
run() {
  local config=$1 choice=$2 n=$3 transport=$4 register=$5
  local name="$config--$choice--r$rep"
  local common=("$perf" --transport "$transport" -R "$register")
  echo "-- $name"
  case $choice in
    auto) KIZUNA_TUNING_FILE=$profile sweeps "$name" "$n" "${common[@]}" ;;
    rules) sweeps "$name" "$n" "${common[@]}" ;;
    mailbox) KIZUNA_MAILBOX_UPTO=1K KIZUNA_STAGED_FROM=$never KIZUNA_SYMMETRIC_FROM=$never \
      sweeps "$name" "$n" "${common[@]}" ;;
    staged) KIZUNA_MAILBOX_UPTO=0 KIZUNA_STAGED_FROM=0 KIZUNA_SYMMETRIC_FROM=$never \
      sweeps "$name" "$n" "${common[@]}" ;;
    symmetric) KIZUNA_MAILBOX_UPTO=0 KIZUNA_STAGED_FROM=$never KIZUNA_SYMMETRIC_FROM=0 \
      sweeps "$name" "$n" "${common[@]}" ;;
    *) sweeps "$name" "$n" "${common[@]}" --algo "$choice" ;;
  esac
}

configs=()
for n in $shm_worlds; do configs+=("shm $n 0" "shm $n 2"); done
for n in $tcp_worlds; do configs+=("tcp $n 0"); done

start=$(date +%s)
for config in "${configs[@]}"; do
  read -r transport n register <<<"$config"
  cname="$transport-n$n-$([[ $register == 2 ]] && echo symmetric || echo private)"
  echo "== $cname: calibrating"
  launch "$n" "$perf" --transport "$transport" -R "$register" -b 8 -e "$max" -f 2 --calibrate "$profile" >"$out/$cname--calibrate.txt" 2>&1 ||
    { echo "bench_auto.sh: calibration of $cname failed; see $out/$cname--calibrate.txt" >&2; exit 1; }
  tail -1 "$out/$cname--calibrate.txt"
  choices=(auto rules ring tree doubling)
  [[ $n -gt 1 ]] && choices+=(oneshot twoshot)
  if [[ $transport == shm ]]; then
    choices+=(mailbox staged)
    [[ $register == 2 ]] && choices+=(symmetric)
  fi
  for ((rep = 1; rep <= reps; rep++)); do
    echo "== $cname: repetition $rep of $reps"
    for choice in $(printf '%s\n' "${choices[@]}" | shuf); do
      run "$cname" "$choice" "$n" "$transport" "$register"
    done
  done
done
echo "bench_auto.sh: $(($(date +%s) - start)) s" | tee "$out/duration.txt"
report --markdown "$out/report.md"
echo "bench_auto.sh: report in $out/report.md (make bench-auto-doc puts it in docs/performance.md)"
