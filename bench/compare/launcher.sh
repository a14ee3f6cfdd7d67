# bench/compare/launcher.sh: sourced by scripts/bench.sh and
# scripts/bench_compare.sh (which set $build and $root). Defines
#   launch N PROGRAM [ARGS...]
# which starts N ranks of PROGRAM on this machine with RANK, WORLD_SIZE,
# MASTER_ADDR, MASTER_PORT, ... set: through kizuna-run when it is built and
# speaks --nproc-per-node, otherwise through bench/compare/launch.sh.
# A job still running after LAUNCH_TIMEOUT seconds (default 600; one
# configuration's sweep takes well under a minute) is stopped and counted
# as failed, so that a job that hangs (the harnesses for Gloo and Open MPI
# have no deadline of their own) cannot stall the whole comparison.
export LAUNCH_TIMEOUT=${LAUNCH_TIMEOUT:-600}
if [[ -x "$build/bin/kizuna-run" ]] && "$build/bin/kizuna-run" --help 2>&1 | grep -q -- --nproc-per-node; then
  kizuna_launcher="kizuna-run"
  launch() {
    local n=$1
    shift
    timeout -k 10 "$LAUNCH_TIMEOUT" "$build/bin/kizuna-run" --nproc-per-node "$n" -- "$@"
  }
else
  kizuna_launcher="bench/compare/launch.sh"
  launch() {
    "$root/bench/compare/launch.sh" "$@"
  }
fi
echo "launcher: $kizuna_launcher" >&2
