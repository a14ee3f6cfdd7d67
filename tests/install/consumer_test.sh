#!/usr/bin/env bash
# consumer_test.sh BUILD_DIR CONSUMER_SRC CXX CC [SAN_FLAGS]
# Installs BUILD_DIR into a scratch prefix, then, with no LD_LIBRARY_PATH:
#   - runs the installed kizuna-perf (its RPATH finds libkizuna);
#   - builds the C++ consumer with CMake's find_package(kizuna) and the C
#     consumer with pkg-config, exactly as docs/getting-started.md shows
#     them (the test checks that the page quotes these files verbatim);
#   - runs each with 3 ranks under the installed kizuna-run.
# SAN_FLAGS (e.g. "-fsanitize=thread -fno-omit-frame-pointer") are the
# sanitizer flags libkizuna was built with; the consumers get them too.
# Any failure fails the test.
set -euo pipefail
build=$1 src=$2 cxx=$3 cc=$4 san=${5:-}
work=$(mktemp -d /tmp/kizuna-install-XXXXXX)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
unset LD_LIBRARY_PATH

cmake --install "$build" --prefix "$prefix" >/dev/null
libdir=$(dirname "$(find "$prefix" -name 'libkizuna.so' | head -1)")

echo "== docs/getting-started.md quotes the consumer verbatim"
guide=$src/../../../docs/getting-started.md
for file in CMakeLists.txt consumer.cpp consumer.c; do
  python3 -c 'import sys; sys.exit(open(sys.argv[1]).read() not in open(sys.argv[2]).read())' "$src/$file" "$guide" ||
    { echo "docs/getting-started.md does not quote tests/install/consumer/$file verbatim" >&2; exit 1; }
done

echo "== the installed tools find libkizuna without LD_LIBRARY_PATH"
"$prefix/bin/kizuna-perf" --help >/dev/null

echo "== find_package(kizuna), 3 ranks"
cmake -S "$src" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_CXX_FLAGS="$san" -DCMAKE_EXE_LINKER_FLAGS="$san" >/dev/null
cmake --build "$work/cmake-build" >/dev/null
"$prefix/bin/kizuna-run" --nproc-per-node 3 -- "$work/cmake-build/consumer"

echo "== pkg-config kizuna, the C ABI, 3 ranks"
export PKG_CONFIG_PATH=$libdir/pkgconfig
# shellcheck disable=SC2086
"$cc" -std=c11 $san "$src/consumer.c" $(pkg-config --cflags --libs kizuna) \
  -Wl,-rpath,"$(pkg-config --variable=libdir kizuna)" -o "$work/consumer-c"
"$prefix/bin/kizuna-run" --nproc-per-node 3 -- "$work/consumer-c"
echo "install test passed"
