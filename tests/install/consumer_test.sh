#!/usr/bin/env bash
# consumer_test.sh BUILD_DIR CONSUMER_SRC CXX CC
# Installs BUILD_DIR into a scratch prefix, then builds and runs the consumer
# program against the installed tree with CMake's find_package and with
# pkg-config. Any failure fails the test.
set -euo pipefail
build=$1 src=$2 cxx=$3 cc=$4
work=$(mktemp -d /tmp/kizuna-install-XXXXXX)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

cmake --install "$build" --prefix "$prefix" >/dev/null
libdir=$(dirname "$(find "$prefix" -name 'libkizuna.so' | head -1)")

echo "== find_package(kizuna)"
cmake -S "$src" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_C_COMPILER="$cc" >/dev/null
cmake --build "$work/cmake-build" >/dev/null
LD_LIBRARY_PATH=$libdir "$work/cmake-build/consumer"

echo "== pkg-config kizuna"
flags=$(PKG_CONFIG_PATH=$libdir/pkgconfig pkg-config --cflags --libs kizuna)
"$cxx" -std=c++20 "$src/consumer.cpp" $flags -o "$work/consumer-pc"
LD_LIBRARY_PATH=$libdir "$work/consumer-pc"
echo "install test passed"
