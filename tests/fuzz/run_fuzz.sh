#!/usr/bin/env bash
# run_fuzz.sh TARGET WORK_DIR SOURCE_DIR SECONDS
# Builds libFuzzer target TARGET (tests/fuzz/fuzz_TARGET.cpp) with clang++
# (-fsanitize=fuzzer,address,undefined) straight from the library sources it
# needs, then fuzzes it for SECONDS starting from the committed seed corpus
# tests/fuzz/corpus/TARGET. New corpus entries and crash reproducers go to
# WORK_DIR, never into the source tree. Exit 77 (reported by CTest as
# skipped) when clang++ or libFuzzer is missing.
#
# Targets (the sources each is built from, beside its fuzz_TARGET.cpp):
#   store_wire       the store's request/reply parser     store/wire.cpp
#   transport_frame  TCP link hello, frames, aborts        transport/frame.cpp
#   device_steps     the step-table decoder                comm/device_steps.cpp
#   idx              the Fashion-MNIST IDX loader          mlp/idx.cpp
#   checkpoint       the checkpoint loader                 ddp/checkpoint.cpp
set -euo pipefail
target=$1 seconds=${4:-10}
work=$(realpath -m "$2") src=$(realpath "$3")

core=(src/core/error.cpp)
case $target in
  store_wire)      sources=(src/store/wire.cpp) ;;
  transport_frame) sources=(src/transport/frame.cpp "${core[@]}") ;;
  device_steps)    sources=(src/comm/device_steps.cpp "${core[@]}") ;;
  idx)             sources=(src/mlp/idx.cpp "${core[@]}") ;;
  checkpoint)      sources=(src/ddp/checkpoint.cpp src/ddp/crc32c.cpp src/core/types.cpp "${core[@]}") ;;
  *) echo "run_fuzz.sh: unknown target '$target'" >&2; exit 2 ;;
esac

clang=""
for c in clang++ clang++-19 clang++-18 clang++-17 clang++-16 clang++-15 clang++-14; do
  if command -v "$c" >/dev/null 2>&1; then clang=$c; break; fi
done
if [[ -z "$clang" ]]; then
  echo "skipped: clang++ not found (install Debian's clang to fuzz $target)"
  exit 77
fi

mkdir -p "$work/corpus" "$work/artifacts"
binary=$work/fuzz_$target
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -DKIZUNA_NO_CLONES -I "$src/include" -I "$src/src" -I "$src")
paths=()
for s in "${sources[@]}"; do paths+=("$src/$s"); done
if ! "$clang" "${flags[@]}" "$src/tests/fuzz/fuzz_$target.cpp" "${paths[@]}" \
     -o "$binary" 2>"$work/build.log"; then
  if grep -q -e "libclang_rt.fuzzer" -e "fuzzer.*not found" "$work/build.log"; then
    echo "skipped: $clang has no libFuzzer runtime (install Debian's libclang-rt-dev)"
    cat "$work/build.log"
    exit 77
  fi
  cat "$work/build.log"
  exit 1
fi
echo "built $binary with $clang; fuzzing for $seconds s"
cd "$work"
# libFuzzer exits 77 on a crash by default, which CTest would read as
# "skipped": a finding must fail the test.
exec "$binary" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=4096 \
  -error_exitcode=1 -timeout_exitcode=1 \
  -print_final_stats=1 -artifact_prefix="$work/artifacts/" "$work/corpus" "$src/tests/fuzz/corpus/$target"
