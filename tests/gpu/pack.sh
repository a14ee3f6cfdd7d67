#!/usr/bin/env bash
# tests/gpu/pack.sh DIR: copies the GPU checks' programs from a CUDA build
# (BUILD, default build/) into DIR/bin, stripped, with the libraries they
# need beyond glibc and libstdc++ in DIR/lib, for `PREBUILT=DIR
# tests/gpu/run.sh` on a GPU machine that cannot build the project.
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=${1:?usage: tests/gpu/pack.sh DIR}
build=${BUILD:-build}
[ -x "$build/tests/gpu/test_gpu" ] || { echo "pack.sh: $build/tests/gpu/test_gpu is missing; build with CUDA first" >&2; exit 1; }
rm -rf "$dir"
mkdir -p "$dir/bin" "$dir/lib"
cp "$build/tests/gpu/test_gpu" "$build/tests/gpu/kizuna-d2d-bandwidth" "$build/bin/kizuna-perf" "$build/bin/kizuna-run" "$dir/bin/"
# Every library the programs load except the C and C++ runtimes, which a
# newer distribution has in a compatible version.
ldd "$dir"/bin/* | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  grep -vE '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s)\.so' |
  while read -r lib; do cp -L "$lib" "$dir/lib/"; done
strip "$dir"/bin/* "$dir"/lib/libkizuna.so.* 2>/dev/null || true
git rev-parse --short HEAD >"$dir/commit"
du -sh "$dir"
