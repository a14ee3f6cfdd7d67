#!/usr/bin/env bash
# scripts/demo.sh BUILD_DIR: the main demonstration, on the CPU.
# (`make demo` installs the Debian packages, Fashion-MNIST included, and
# builds first; see scripts/deps.sh.)
#
#   1. kizuna-train: 4 ranks as processes under kizuna-run, data-parallel
#      MLP training on Fashion-MNIST (784-512-256-10, 8 epochs, batch 64 per
#      rank): test accuracy after each epoch, throughput, and how much of the
#      gradient all-reduce backward hid. About a minute on a quiet 2-core
#      machine.
#   2. kizuna-perf: a short all-reduce sweep (8 B .. 1 MiB, x4) over the same
#      4 ranks, nccl-tests' columns.
set -euo pipefail
build=${1:-build}
bin=$build/bin
for tool in kizuna-run kizuna-train kizuna-perf; do
  [[ -x $bin/$tool ]] || { echo "demo: $bin/$tool is missing; run 'make build' first" >&2; exit 1; }
done
data=/usr/share/datasets/fashion-mnist
if [[ ! -f $data/train-images-idx3-ubyte.gz ]]; then
  echo "demo: Fashion-MNIST is not in $data; install it with: apt-get install dataset-fashion-mnist" >&2
  exit 1
fi

echo "== kizuna-train: 4 ranks (kizuna-run), Fashion-MNIST, MLP 784-512-256-10, SGD + cosine, global batch 256"
"$bin/kizuna-run" --nproc-per-node 4 -- "$bin/kizuna-train" \
  --data fashion-mnist --hidden 512,256 --epochs 8 --batch-size 64 \
  --optimizer sgd --lr 0.1 --weight-decay 5e-4 --warmup 100 --schedule cosine \
  --target-accuracy 0.89

echo
echo "== kizuna-perf: all-reduce, float32 sum, 4 ranks (kizuna-run), 8 B .. 1 MiB"
"$bin/kizuna-run" --nproc-per-node 4 -- "$bin/kizuna-perf" -b 8 -e 1M -f 4
