// mlp/dataset.hpp: the data sets the trainer learns from, in memory.
//
// Fashion-MNIST (Xiao, Rasul & Vollgraf, 2017): 60,000 training and 10,000
// test images of 28x28 grey pixels in 10 classes, from Debian's
// dataset-fashion-mnist package (/usr/share/datasets/fashion-mnist/, four
// gzip-compressed IDX files). IDX, as LeCun's MNIST page defines it:
//   bytes 0-1  zero; byte 2  element type (0x08: unsigned byte);
//   byte 3     number of dimensions (3 for images, 1 for labels);
//   then one big-endian u32 per dimension, then the elements, row-major.
// Everything is checked before use (magic, type, dimensions 28x28, the byte
// count against the dimensions, image and label counts equal, labels < 10),
// and a failure is an InvalidArgument naming the file and what is wrong; a
// missing file is a SystemError that names the Debian package to install.
// Pixels become floats standardised with the training set's own mean and
// standard deviation (so the inputs have mean 0 and variance 1).
//
// random: the synthetic regression set of PyTorch's classic DDP tutorial
// (a ToyModel trained on torch.randn inputs against torch.randn targets),
// for benchmarking without a data set: inputs and targets are independent
// standard normals from Rng (mlp/rng.hpp), so the same seed gives the same
// set everywhere; there is nothing to learn beyond the targets' mean.
//
// Plain values; loading reads files and allocates, nothing else.
#pragma once

#include <kizuna/comm.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mlp/model.hpp"

namespace kizuna::mlp {

struct Dataset {
  std::string name;
  Loss task = Loss::CrossEntropy;
  std::size_t size = 0;
  int features = 0;  // per sample
  int outputs = 0;   // classes, or target values per sample
  std::vector<float> inputs;          // (size, features)
  std::vector<std::int32_t> labels;   // (size) classification
  std::vector<float> targets;         // (size, outputs) regression

  // The first n samples (n >= size: a copy of everything).
  Dataset head(std::size_t n) const;
};

struct DataSplits {
  Dataset train;
  Dataset test;
};

inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// Reads the four files from `dir`.
DataSplits load_fashion_mnist(const std::string& dir = kFashionMnistDir);

inline constexpr std::size_t kMaxIdxBytes = std::size_t{1} << 30;

// One IDX file (gzip or plain), checked as above; `dims` receives the
// dimensions, the result the elements. At most max_bytes are read.
std::vector<std::uint8_t> read_idx(const std::string& path, std::vector<std::uint32_t>& dims,
                                   std::size_t max_bytes = kMaxIdxBytes);

// The same from the file's (decompressed) bytes in memory; `source` names
// the file in error messages. read_idx() reads the file and calls this.
std::vector<std::uint8_t> parse_idx(const std::uint8_t* bytes, std::size_t size,
                                    std::vector<std::uint32_t>& dims, const std::string& source,
                                    std::size_t max_bytes = kMaxIdxBytes);

// One Fashion-MNIST split from its images and labels files' (decompressed)
// bytes, checked against each other as above; pixels scaled to [0, 1] (not
// yet standardised). load_fashion_mnist() reads the files and calls this.
Dataset parse_image_split(const std::uint8_t* images, std::size_t images_size,
                          const std::string& images_source, const std::uint8_t* labels,
                          std::size_t labels_size, const std::string& labels_source,
                          const std::string& name);

struct RandomDataOptions {
  std::size_t train_samples = 8192;
  std::size_t test_samples = 1024;
  int features = 10;  // the tutorial's nn.Linear(10, 10) ...
  int outputs = 5;    // ... and nn.Linear(10, 5)
  std::uint64_t seed = 0;
};
DataSplits make_random_regression(const RandomDataOptions& options);

// Collective: rank `root` runs load() and broadcasts the result, so every
// rank holds the same data having decompressed it once. The reason is the
// machine: with more ranks than cores (4 ranks on 2 here), four ranks each
// inflating 26 MB of gzip and converting 47 M pixels cost seconds of CPU
// that one rank and a 220 MB shared-memory broadcast (tens of ms) do not.
// A failure of load() on the root (a missing or corrupt file) is rethrown
// on the root and reported on every other rank as the same kind of Error,
// naming the root and quoting its message, instead of leaving them waiting.
DataSplits broadcast_data(Communicator& comm, const std::function<DataSplits()>& load, int root = 0);

}  // namespace kizuna::mlp
