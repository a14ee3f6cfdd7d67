#!/usr/bin/env bash
# fuzz_all.sh WORK_DIR [SECONDS] [JOBS]: `make fuzz`. Runs every fuzz target
# (run_fuzz.sh) for SECONDS (default 60), JOBS at a time (default: the number
# of cores), each in WORK_DIR/<target> with its log in WORK_DIR/<target>.log,
# then prints one line per target: executions, corpus size, crashes (files
# in WORK_DIR/<target>/artifacts). Exit 1 if any target crashed or failed.
set -uo pipefail
work=$(realpath -m "$1") seconds=${2:-60} jobs=${3:-$(nproc)}
src=$(cd "$(dirname "$0")/../.." && pwd)
targets=(store_wire transport_frame device_steps idx checkpoint)
mkdir -p "$work"

printf '%s\n' "${targets[@]}" | xargs -P "$jobs" -I{} sh -c \
  '"$0"/tests/fuzz/run_fuzz.sh {} "$1"/{} "$0" "$2" >"$1"/{}.log 2>&1; echo $? >"$1"/{}.rc' \
  "$src" "$work" "$seconds"

status=0
printf '%-16s %12s %8s %8s  %s\n' target executions corpus crashes result
for t in "${targets[@]}"; do
  rc=$(cat "$work/$t.rc" 2>/dev/null || echo 1)
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$work/$t.log" | awk '{print $2}')
  corpus=$(ls "$work/$t/corpus" 2>/dev/null | wc -l)
  crashes=$(ls "$work/$t/artifacts" 2>/dev/null | wc -l)
  case $rc in
    0) result=ok ;;
    77) result=skipped ;;
    *) result="FAILED (exit $rc, see $work/$t.log)"; status=1 ;;
  esac
  (( crashes > 0 )) && status=1
  printf '%-16s %12s %8s %8s  %s\n' "$t" "${execs:-0}" "$corpus" "$crashes" "$result"
done
exit $status
