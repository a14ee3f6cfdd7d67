#!/usr/bin/env bash
# bench/compare/launch.sh N PROGRAM [ARGS...]: start N ranks of PROGRAM on
# this machine with the launcher variables kizuna, gloo-perf and torchrun
# programs read (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK,
# MASTER_ADDR=127.0.0.1, MASTER_PORT=a free port), for when kizuna-run is
# not built. Rank 0's output goes to stdout, every other rank's to stderr.
# Exit status: 0 when every rank exits 0; otherwise the first failing rank's
# status, after the others are stopped (SIGTERM, then SIGKILL). A watchdog
# of LAUNCH_TIMEOUT seconds (default 600) stops a hung job.
set -euo pipefail

if [[ $# -lt 2 || ! $1 =~ ^[0-9]+$ || $1 -lt 1 ]]; then
  echo "usage: $0 N PROGRAM [ARGS...]" >&2
  exit 2
fi
n=$1
shift
timeout_s=${LAUNCH_TIMEOUT:-600}

# A port the kernel just handed out; rank 0 binds it right after.
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  sleep 1
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
}
trap cleanup INT TERM

for ((r = 0; r < n; r++)); do
  if [[ $r -eq 0 ]]; then
    RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n NODE_RANK=0 \
      MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout -k 5 "$timeout_s" "$@" &
  else
    RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n NODE_RANK=0 \
      MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout -k 5 "$timeout_s" "$@" >&2 &
  fi
  pids+=($!)
done

status=0
remaining=$n
while ((remaining > 0)); do
  rc=0
  wait -n || rc=$?
  remaining=$((remaining - 1))
  if ((rc != 0 && status == 0)); then
    status=$rc
    echo "launch.sh: a rank of '$*' exited with status $rc; stopping the others" >&2
    cleanup
  fi
done
exit $status
