#!/usr/bin/env bash
# tests/gpu/run.sh: every check that needs an NVIDIA GPU, in one run of at
# most about 7 minutes, for a machine that may have only the driver and
# the CUDA toolkit.
#
#   tests/gpu/run.sh [--prebuilt DIR] [--dry-run]
#
# --prebuilt DIR  run DIR/bin with DIR/lib on the library path (DIR made by
#                 tests/gpu/pack.sh, or the .tar.gz it writes); default: the
#                 build in $BUILD (build/)
# --dry-run       on a machine without a GPU (make test does this): every step
#                 runs, the GPU checks must say they were skipped, kizuna-perf
#                 runs its sweeps on the CPU, so a typo here cannot waste a
#                 device run
#
# Steps, each under its own `timeout`: 1 the environment; 2 without MPS:
# copy rate, reduce kernels, ranks as threads of one process on the kernel
# path, the staged path; 3 MPS started and probed (else "IPC UNTESTED");
# 4 under MPS: processes GPU to GPU through CUDA IPC, DDP; 5 kizuna-perf
# --device cuda sweeps, 8 B .. 256 MiB, 2/4/8 ranks, threads and processes,
# and 8 B .. 4 MiB with each algorithm forced, 4 and 8 ranks as threads;
# 6 a rank killed in a GPU-to-GPU and in a staged collective, MPS stopped;
# 7 the measured figures against the issue's two targets.
#
# Output goes to the terminal line by line and to $OUT (default
# build/gpu-out): run.log, and results.tar.gz with kizuna-perf's JSON and
# CSV and MPS's logs. The last line is PASS or FAIL; the exit status is 1 on any
# failure.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD

dry=0
prebuilt=${PREBUILT:-}
while [ $# -gt 0 ]; do
  case $1 in
    --dry-run) dry=1 ;;
    --prebuilt) prebuilt=${2:?--prebuilt needs a folder or a .tar.gz}; shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (--prebuilt DIR, --dry-run)" >&2; exit 2 ;;
  esac
  shift
done

out=${OUT:-$root/build/gpu-out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d /tmp/kizuna-gpu.XXXXXX)
mkdir -p "$work/json" "$work/csv" "$work/mps-log"
exec > >(stdbuf -oL tee "$out/run.log") 2>&1
start=$(date +%s)

# The programs: a packed tree or the build.
if [ -n "$prebuilt" ]; then
  if [ -f "$prebuilt" ]; then
    mkdir -p "$work/pack" && tar -xzf "$prebuilt" -C "$work/pack" || { echo "FAIL: cannot unpack $prebuilt"; exit 1; }
    prebuilt=$work/pack
  fi
  bin=$prebuilt/bin
  lib=$prebuilt/lib/libkizuna.so.0
  export LD_LIBRARY_PATH=$prebuilt/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  test_gpu=$bin/test_gpu d2d=$bin/kizuna-d2d-bandwidth perf=$bin/kizuna-perf launcher=$bin/kizuna-run
  echo "# programs: $prebuilt (commit $(cat "$prebuilt/commit" 2>/dev/null || echo unknown))"
else
  build=${BUILD:-$root/build}
  lib=$build/src/libkizuna.so.0
  test_gpu=$build/tests/gpu/test_gpu d2d=$build/tests/gpu/kizuna-d2d-bandwidth
  perf=$build/bin/kizuna-perf launcher=$build/bin/kizuna-run
  echo "# programs: $build (commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown))"
fi

failed=()
passed=0
skipped=0
# step NAME LIMIT COMMAND...: runs it under `timeout`, its output indented.
# Exit 77 (no GPU) passes a dry run and fails a real one.
step() {
  local name=$1 limit=$2 t0 rc
  shift 2
  echo "== $name (at most ${limit} s)"
  t0=$(date +%s.%N)
  timeout -k 5 "$limit" stdbuf -oL "$@" 2>&1 | sed -u 's/^/   /'
  rc=${PIPESTATUS[0]}
  local took
  took=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  if [ "$rc" = 0 ]; then
    echo "   ok ($took s)"
    passed=$((passed + 1))
  elif [ "$rc" = 77 ] && [ $dry = 1 ]; then
    echo "   skipped: no GPU here ($took s)"
    skipped=$((skipped + 1))
  else
    [ "$rc" = 124 ] || [ "$rc" = 137 ] && echo "   TIMED OUT after $limit s"
    echo "   FAILED: exit $rc ($took s)"
    failed+=("$name")
  fi
  return 0
}

# Device for kizuna-perf: the GPU, or the CPU in a dry run (same flags).
if [ $dry = 1 ]; then
  device=cpu max=64K big=8K algo_max=16K iters="-n 2 -w 1" path_word=cpu
else
  device=cuda max=256M big=1M algo_max=4M iters="-n 20 -w 5" path_word="GPU to GPU"
fi
# perf_sweep NAME LIMIT EXPECT ARGS...: a sweep whose every rank must report
# the path EXPECT (in its "Rank N ... device D" line) and whose results
# are all right.
perf_sweep() {
  local name=$1 limit=$2 expect=$3
  shift 3
  step "$name" "$limit" bash -c '
    expect=$1; shift
    "$@" | tee /dev/stderr | awk -v want="$expect" "
      /#  Rank/ { ranks++; if (index(\$0, want)) right++ }
      END { if (ranks == 0 || ranks != right) { print \"expected every rank on the path \" want \": \" right+0 \" of \" ranks+0; exit 1 } }"
  ' _ "$expect" "$@"
}

echo "# kizuna GPU checks$([ $dry = 1 ] && echo ', dry run (no GPU needed)'), $(date -u +%FT%TZ)"

# ---- 1. environment -----------------------------------------------------------
echo "## 1. environment"
if command -v nvidia-smi >/dev/null; then
  step "nvidia-smi" 20 nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap,clocks.max.sm --format=csv
else
  echo "   nvidia-smi: not here"
  [ $dry = 1 ] || failed+=("nvidia-smi")
fi
df -h /dev/shm | sed 's/^/   /'
for b in nvidia-cuda-mps-control nvidia-cuda-mps-server; do echo "   $b: $(command -v $b || echo 'not found')"; done
step "libraries resolve" 20 bash -c 'ldd "$@" | grep -E "not found|=> /" | sort -u; ! ldd "$@" | grep -q "not found"' \
  _ "$test_gpu" "$perf" "$launcher" "$d2d"
# cuobjdump comes with the toolkit, or with Triton's wheel.
cuobjdump=$(command -v cuobjdump || ls /usr/local/cuda/bin/cuobjdump "$root"/.venv-torch/lib/python3*/site-packages/triton/backends/nvidia/bin/cuobjdump \
  /opt/*/.venv/lib/python3*/site-packages/triton/backends/nvidia/bin/cuobjdump 2>/dev/null | head -1)
if [ -n "$cuobjdump" ]; then
  step "sm_90 code in libkizuna" 30 bash -c '"$1" --list-elf "$2" | tee /dev/stderr | grep -q "sm_90"' _ "$cuobjdump" "$lib"
else
  echo "   cuobjdump: not found, the sm_90 check is skipped"
  [ $dry = 1 ] || failed+=("cuobjdump")
fi

# ---- 2. without MPS -----------------------------------------------------------
echo "## 2. without MPS"
step "device-to-device copy rate" 60 bash -c 'set -o pipefail; "$1" | tee "$2"' _ "$d2d" "$work/d2d.txt"
step "reduce kernels against the CPU" 60 "$test_gpu" --step reduce
for n in 2 4 8; do
  step "$n ranks as threads, kernel path, every collective" 90 "$test_gpu" --step threads $n
done
# Bad accesses and races in the kernels, on small counts (the sanitizer is slow).
if command -v compute-sanitizer >/dev/null; then
  step "compute-sanitizer memcheck, 2 ranks as threads" 120 \
    compute-sanitizer --tool memcheck --error-exitcode 1 "$test_gpu" --step threads 2 quick
else
  echo "   compute-sanitizer: not here, the memcheck step is skipped"
fi
step "2 processes without MPS stage" 90 "$test_gpu" --step procs 2 ipc
step "2 processes staged, stream-wait gates" 90 "$test_gpu" --step procs 2 staged
step "2 processes staged, host-function gates" 90 "$test_gpu" --step procs 2 hostfn
step "DDP, 2 processes staged" 60 "$test_gpu" --step ddp 2 staged

# ---- 3. MPS -------------------------------------------------------------------
echo "## 3. MPS"
mps=0
if command -v nvidia-cuda-mps-control >/dev/null; then
  export CUDA_MPS_PIPE_DIRECTORY=$work/mps-pipe CUDA_MPS_LOG_DIRECTORY=$work/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY"
  if nvidia-cuda-mps-control -d && timeout 30 "$test_gpu" --step mps; then
    mps=1
    echo "   MPS is running and serves this GPU"
  else
    echo "   MPS did not start or does not serve this GPU"
    echo quit | timeout 10 nvidia-cuda-mps-control >/dev/null 2>&1
  fi
fi
[ $mps = 1 ] || echo "IPC UNTESTED: no working MPS, so processes sharing this GPU cannot go GPU to GPU"

# ---- 4. under MPS -------------------------------------------------------------
if [ $mps = 1 ]; then
  echo "## 4. under MPS"
  for n in 2 3 4 8; do
    step "$n processes through CUDA IPC, every collective" 120 "$test_gpu" --step procs $n ipc
  done
  step "DDP, 2 processes through CUDA IPC" 60 "$test_gpu" --step ddp 2 ipc
  step "DDP, 3 processes through CUDA IPC" 60 "$test_gpu" --step ddp 3 ipc
fi

# ---- 5. bandwidth and latency -------------------------------------------------
echo "## 5. kizuna-perf --device $device, all_reduce float32 sum, 8 B .. $max"
for n in 2 4 8; do
  perf_sweep "kizuna-perf, $n ranks as threads" 90 "$path_word" \
    "$perf" --device "$device" --threads $n -b 8 -e "$max" -f 2 $iters -c 1 --json "$work/json/threads-$n.json" \
    --csv "$work/csv/threads-$n.csv"
done
# The FIFO shape: more channel sets (blocks) and larger slots, 2 ranks.
for shape in "16 131072" "32 131072" "8 524288" "16 524288"; do
  set -- $shape
  perf_sweep "kizuna-perf, 2 ranks as threads, $1 channel sets of $2-byte slots" 60 "$path_word" \
    env KIZUNA_CUDA_CHANNELS=$1 KIZUNA_CUDA_SLOT_BYTES=$2 "$perf" --device "$device" --threads 2 -b "$big" -e "$max" -f 4 \
    $iters -c 1 --json "$work/json/threads-2-c$1-s$2.json"
done
# Every algorithm forced, for fitting the device link model
# (docs/tuning.md#device-link-model).
for n in 4 8; do
  for a in oneshot twoshot doubling tree ring; do
    perf_sweep "kizuna-perf, $n ranks as threads, $a forced" 30 "$path_word" \
      "$perf" --device "$device" --threads $n --algo $a -b 8 -e "$algo_max" -f 4 $iters -c 1 \
      --json "$work/json/algo-$a-$n.json"
  done
done
if [ $mps = 1 ] || [ $dry = 1 ]; then
  for n in 2 4 8; do
    perf_sweep "kizuna-perf, $n processes" 90 "$path_word" \
      "$launcher" --nproc-per-node $n -- "$perf" --device "$device" -b 8 -e "$max" -f 2 $iters -c 1 \
      --json "$work/json/procs-$n.json" --csv "$work/csv/procs-$n.csv"
  done
fi

# ---- 6. a rank killed ---------------------------------------------------------
echo "## 6. a rank killed mid-collective"
[ $mps = 1 ] && step "kill, GPU to GPU" 60 "$test_gpu" --step kill ipc
step "kill, staged" 60 "$test_gpu" --step kill staged
if [ $mps = 1 ]; then
  echo quit | timeout 10 nvidia-cuda-mps-control >/dev/null 2>&1 || echo "   MPS did not stop"
  cp -r "$CUDA_MPS_LOG_DIRECTORY"/. "$work/mps-log/" 2>/dev/null
fi

# ---- 7. the targets, as measured above (reported, not asserted) ----------------
# kizuna-perf's CSV columns: ... 5 world_size, 6 size, 11 placement, 12 time_us, 14 busbw_GBps.
echo "## 7. against the targets (docs/performance.md#gpu-nvidia-h200)"
slowest_small() {  # the slowest out-of-place call from 8 B to 64 KiB
  [ -f "$1" ] && awk -F, 'NR > 1 && $6 <= 65536 && $11 == "out_of_place" && $12 > m { m = $12 } END { if (NR > 1) printf "%.1f us", m }' "$1"
}
echo "   2 ranks, 8 B .. 64 KiB, target under 10 us a call: at most $(slowest_small "$work/csv/threads-2.csv") as threads," \
     "$(slowest_small "$work/csv/procs-2.csv" || echo 'not run') as processes"
copy=$(awk '{ for (i = 1; i < NF; i++) if ($i == "traffic" && $(i + 1) + 0 > t) t = $(i + 1) + 0 } END { if (t) print t }' \
  "$work/d2d.txt" 2>/dev/null)
for n in 2 4 8; do
  # Each bus byte is written into a FIFO slot and read from it, on each of
  # n ranks of one GPU: at least 2n bytes of memory traffic.
  [ -f "$work/csv/threads-$n.csv" ] && awk -F, -v n=$n -v copy="$copy" '
    NR > 1 && $11 == "out_of_place" && $6 + 0 >= size { size = $6 + 0; busbw = $14 + 0 }
    END {
      traffic = 2 * n * busbw
      printf "   %d ranks as threads at %d B: busbw %.1f GB/s, memory traffic at least %.0f GB/s", n, size, busbw, traffic
      if (copy) printf ", %.0f%% of the copy'"'"'s %.0f GB/s (target 70%%)\n", 100 * traffic / copy, copy
      else printf " (no copy rate measured)\n"
    }' "$work/csv/threads-$n.csv"
done

tar -czf "$out/results.tar.gz" -C "$work" json csv mps-log
rm -rf "$work"
echo "# $passed passed, $skipped skipped, ${#failed[@]} failed, $(($(date +%s) - start)) s"
for f in "${failed[@]}"; do echo "# failed: $f"; done
if [ ${#failed[@]} = 0 ]; then echo PASS; exit 0; fi
echo FAIL
exit 1
