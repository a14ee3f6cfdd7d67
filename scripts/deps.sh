#!/usr/bin/env bash
# scripts/deps.sh: install exactly the Debian packages kizuna needs that are
# missing. Non-interactive; as root it runs apt-get, otherwise it prints the
# one apt-get line to run and exits non-zero. Prints nothing when all is there.
set -euo pipefail

packages=(
  # toolchain
  g++ make cmake pkg-config
  # tests and benchmarks
  catch2 libbenchmark-dev
  # the store: standalone Asio (header-only) and OpenSSL's libcrypto (HMAC)
  libasio-dev libssl-dev
  # the tools only (never libkizuna): command lines (CLI11) and JSON files
  # (nlohmann-json), both header-only
  libcli11-dev nlohmann-json3-dev
  # fuzzing the store's wire decoder (libFuzzer, tests/fuzz)
  clang libclang-rt-dev
  # side-by-side comparison (make bench-compare)
  libgloo-dev libopenmpi-dev openmpi-bin gnuplot-nox
  # launcher and fault tests: mpirun; ip and tc for the network-namespace
  # "nodes"; nftables for packet loss between them
  openmpi-bin iproute2 nftables
  # kizuna-train: OpenBLAS GEMMs, zlib for the gzip IDX files, Fashion-MNIST, --plot
  libopenblas-dev zlib1g-dev dataset-fashion-mnist gnuplot-nox
  # the torch.distributed backend (integrations/torch) and its pytest tests;
  # python3-venv makes the torch 2.x environment (scripts/venv_torch.sh)
  python3-torch libtorch-dev pybind11-dev python3-pytest python3-venv
)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

line="apt-get install -y --no-install-recommends ${missing[*]}"
if [[ $(id -u) -ne 0 ]]; then
  echo "kizuna needs these Debian packages: ${missing[*]}" >&2
  echo "run as root:  apt-get update && $line" >&2
  exit 1
fi
echo "kizuna: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
