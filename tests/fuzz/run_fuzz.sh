#!/usr/bin/env bash
# run_fuzz.sh WORK_DIR SOURCE_DIR SECONDS
# Builds the libFuzzer target for the store's wire decoder with clang++
# (-fsanitize=fuzzer,address,undefined) straight from its sources, then
# fuzzes it for SECONDS starting from the committed seed corpus. New corpus
# entries and crash reproducers go to WORK_DIR, never into the source tree.
# Exit 77 (reported by CTest as skipped) when clang++ or libFuzzer is missing.
set -euo pipefail
work=$1 src=$2 seconds=${3:-30}

clang=""
for c in clang++ clang++-19 clang++-18 clang++-17 clang++-16 clang++-15 clang++-14; do
  if command -v "$c" >/dev/null 2>&1; then clang=$c; break; fi
done
if [[ -z "$clang" ]]; then
  echo "skipped: clang++ not found (install Debian's clang to fuzz the store's wire decoder)"
  exit 77
fi

mkdir -p "$work/corpus" "$work/artifacts"
binary=$work/fuzz_store_wire
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -I "$src/src")
if ! "$clang" "${flags[@]}" "$src/tests/fuzz/fuzz_store_wire.cpp" "$src/src/store/wire.cpp" \
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
exec "$binary" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=4096 \
  -print_final_stats=1 -artifact_prefix="$work/artifacts/" "$work/corpus" "$src/tests/fuzz/corpus/store_wire"
