#!/usr/bin/env bash
# tests/gpu/pack.sh FILE.tar.gz: packs what tests/gpu/run.sh needs from a
# CUDA build ($BUILD, default build/) for a GPU machine that cannot build
# the project (only the driver and the CUDA toolkit there):
#
#   bin/  test_gpu kizuna-d2d-bandwidth kizuna-perf kizuna-run, stripped
#   lib/  every library they load beyond the C and C++ runtimes (which a
#         newer distribution has in a compatible version), libkizuna first
#   commit
#
# Paths inside are relative; at most 60 MiB. Then, on the GPU machine:
# tests/gpu/run.sh --prebuilt FILE.tar.gz
set -euo pipefail
cd "$(dirname "$0")/../.."
file=${1:?usage: tests/gpu/pack.sh FILE.tar.gz}
case $file in /*) ;; *) file=$PWD/$file ;; esac
build=${BUILD:-build}
programs=("$build/tests/gpu/test_gpu" "$build/tests/gpu/kizuna-d2d-bandwidth" "$build/bin/kizuna-perf"
          "$build/bin/kizuna-run")
for p in "${programs[@]}"; do
  [ -x "$p" ] || { echo "pack.sh: $p is missing: build with CUDA first (make build with nvcc present)" >&2; exit 1; }
done
dir=$(mktemp -d /tmp/kizuna-pack.XXXXXX)
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/bin" "$dir/lib"
cp "${programs[@]}" "$dir/bin/"
ldd "${programs[@]}" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
  grep -vE '^(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s)\.so' |
  while read -r soname path; do cp -L "$path" "$dir/lib/$soname"; done
[ -f "$dir/lib/libkizuna.so.0" ] || { echo "pack.sh: the programs do not load libkizuna.so.0" >&2; exit 1; }
strip --strip-unneeded "$dir"/bin/* "$dir"/lib/* 2>/dev/null || true
git rev-parse --short HEAD >"$dir/commit"
tar -czf "$file" -C "$dir" bin lib commit
size=$(stat -c %s "$file")
echo "pack.sh: $file, $((size >> 20)) MiB: $(ls "$dir/bin" | tr '\n' ' ')+ $(ls "$dir/lib" | wc -l) libraries"
[ "$size" -le $((60 << 20)) ] || { echo "pack.sh: over 60 MiB" >&2; exit 1; }
