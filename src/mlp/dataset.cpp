// mlp/dataset.cpp: see dataset.hpp.
#include "mlp/dataset.hpp"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "core/check.hpp"

namespace kizuna::mlp {

Dataset Dataset::head(std::size_t n) const {
  if (n >= size) return *this;
  Dataset d;
  d.name = name;
  d.task = task;
  d.size = n;
  d.features = features;
  d.outputs = outputs;
  d.inputs.assign(inputs.begin(), inputs.begin() + static_cast<std::ptrdiff_t>(n * features));
  if (!labels.empty()) d.labels.assign(labels.begin(), labels.begin() + static_cast<std::ptrdiff_t>(n));
  if (!targets.empty())
    d.targets.assign(targets.begin(), targets.begin() + static_cast<std::ptrdiff_t>(n * outputs));
  return d;
}

namespace {

constexpr const char* kPackageHint =
    "install Debian's dataset-fashion-mnist package (apt-get install dataset-fashion-mnist), "
    "or point --data-dir at a folder holding the four Fashion-MNIST .gz files";

// The whole (decompressed) content of a gzip or plain file.
std::vector<std::uint8_t> read_gzip(const std::string& path, std::size_t max_bytes) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT)
      KIZUNA_THROW(ErrorCode::SystemError, path, " does not exist: ", kPackageHint);
    KIZUNA_THROW(ErrorCode::SystemError, "cannot read ", path, ": ", std::strerror(err));
  }
  gzFile file = ::gzopen(path.c_str(), "rb");
  if (!file) KIZUNA_THROW(ErrorCode::SystemError, "cannot open ", path, ": ", std::strerror(errno));
  std::vector<std::uint8_t> bytes;
  constexpr unsigned kChunk = 1u << 20;
  for (;;) {
    const std::size_t at = bytes.size();
    if (at > max_bytes) {
      ::gzclose(file);
      KIZUNA_THROW(ErrorCode::InvalidArgument, path, " decompresses to more than ", max_bytes,
                   " bytes; not an IDX file of this data set");
    }
    bytes.resize(at + kChunk);
    const int got = ::gzread(file, bytes.data() + at, kChunk);
    if (got < 0) {
      int code = 0;
      const std::string message = ::gzerror(file, &code);
      ::gzclose(file);
      KIZUNA_THROW(ErrorCode::InvalidArgument, path, " is corrupt (zlib: ", message, ")");
    }
    bytes.resize(at + static_cast<std::size_t>(got));
    if (got == 0) break;
  }
  int code = 0;
  const std::string message = ::gzerror(file, &code);
  ::gzclose(file);
  // Z_BUF_ERROR at the end: the input stopped in the middle of a gzip stream.
  if (code == Z_BUF_ERROR)
    KIZUNA_THROW(ErrorCode::InvalidArgument, path, " is truncated (the gzip stream ends early after ",
                 bytes.size(), " bytes)");
  if (code != Z_OK) KIZUNA_THROW(ErrorCode::InvalidArgument, path, " is corrupt (zlib: ", message, ")");
  return bytes;
}

}  // namespace

std::vector<std::uint8_t> read_idx(const std::string& path, std::vector<std::uint32_t>& dims,
                                   std::size_t max_bytes) {
  const std::vector<std::uint8_t> bytes = read_gzip(path, max_bytes);
  return parse_idx(bytes.data(), bytes.size(), dims, path, max_bytes);
}

namespace {

// Images and labels of one split, checked against each other.
Dataset load_split(const std::string& images_path, const std::string& labels_path, const std::string& name) {
  const std::vector<std::uint8_t> images = read_gzip(images_path, kMaxIdxBytes);
  const std::vector<std::uint8_t> labels = read_gzip(labels_path, kMaxIdxBytes);
  return parse_image_split(images.data(), images.size(), images_path, labels.data(), labels.size(),
                           labels_path, name);
}

}  // namespace

DataSplits load_fashion_mnist(const std::string& dir) {
  DataSplits s;
  s.train = load_split(dir + "/train-images-idx3-ubyte.gz", dir + "/train-labels-idx1-ubyte.gz",
                       "fashion-mnist/train");
  s.test = load_split(dir + "/t10k-images-idx3-ubyte.gz", dir + "/t10k-labels-idx1-ubyte.gz",
                      "fashion-mnist/test");
  // Standardise with the training set's statistics (sums in double, in
  // order: the same bits on every rank).
  double sum = 0, sum_sq = 0;
  for (float x : s.train.inputs) {
    sum += x;
    sum_sq += static_cast<double>(x) * x;
  }
  const double n = static_cast<double>(s.train.inputs.size());
  const double mean = sum / n;
  const double stddev = std::sqrt(std::max(sum_sq / n - mean * mean, 1e-12));
  const auto m = static_cast<float>(mean);
  const auto inv = static_cast<float>(1.0 / stddev);
  for (float& x : s.train.inputs) x = (x - m) * inv;
  for (float& x : s.test.inputs) x = (x - m) * inv;
  return s;
}

DataSplits make_random_regression(const RandomDataOptions& o) {
  KIZUNA_CHECK_ARG(o.features > 0 && o.outputs > 0, "the random data set needs features and outputs > 0");
  KIZUNA_CHECK_ARG(o.train_samples > 0, "the random data set needs at least one training sample");
  Rng rng(o.seed ^ 0x72616e646f6d21ull);  // its own stream, apart from the weights'
  auto make = [&](std::size_t n, const char* name) {
    Dataset d;
    d.name = name;
    d.task = Loss::MeanSquaredError;
    d.size = n;
    d.features = o.features;
    d.outputs = o.outputs;
    d.inputs.resize(n * o.features);
    d.targets.resize(n * o.outputs);
    for (float& x : d.inputs) x = static_cast<float>(rng.normal());
    for (float& y : d.targets) y = static_cast<float>(rng.normal());
    return d;
  };
  DataSplits s;
  s.train = make(o.train_samples, "random/train");
  s.test = make(o.test_samples, "random/test");
  return s;
}

namespace {

// The fixed part of a broadcast data set, as int64 words.
enum HeaderWord { kOk, kCode, kMessageBytes, kTask, kFeatures, kOutputs, kTrainSize, kTestSize, kNameBytes, kWords };

void broadcast_split(Communicator& comm, Dataset& d, int root) {
  comm.broadcast(d.inputs.data(), d.inputs.size(), DataType::Float32, root).wait();
  if (d.task == Loss::CrossEntropy)
    comm.broadcast(d.labels.data(), d.labels.size(), DataType::Int32, root).wait();
  else
    comm.broadcast(d.targets.data(), d.targets.size(), DataType::Float32, root).wait();
}

void shape_split(Dataset& d, const std::int64_t* h, std::size_t size) {
  d.task = h[kTask] == 0 ? Loss::CrossEntropy : Loss::MeanSquaredError;
  d.size = size;
  d.features = static_cast<int>(h[kFeatures]);
  d.outputs = static_cast<int>(h[kOutputs]);
  d.inputs.resize(size * d.features);
  if (d.task == Loss::CrossEntropy)
    d.labels.resize(size);
  else
    d.targets.resize(size * d.outputs);
}

}  // namespace

DataSplits broadcast_data(Communicator& comm, const std::function<DataSplits()>& load, int root) {
  if (comm.size() == 1) return load();
  const bool me = comm.rank() == root;
  DataSplits s;
  std::int64_t h[kWords] = {};
  std::string message, names;
  std::exception_ptr failure;
  if (me) {
    try {
      s = load();
      h[kOk] = 1;
      h[kTask] = s.train.task == Loss::CrossEntropy ? 0 : 1;
      h[kFeatures] = s.train.features;
      h[kOutputs] = s.train.outputs;
      h[kTrainSize] = static_cast<std::int64_t>(s.train.size);
      h[kTestSize] = static_cast<std::int64_t>(s.test.size);
      names = s.train.name + "\n" + s.test.name;
      h[kNameBytes] = static_cast<std::int64_t>(names.size());
    } catch (const Error& e) {
      failure = std::current_exception();
      message = e.what();
      h[kCode] = static_cast<std::int64_t>(e.code());
    } catch (const std::exception& e) {
      failure = std::current_exception();
      message = e.what();
      h[kCode] = static_cast<std::int64_t>(ErrorCode::Internal);
    }
    h[kMessageBytes] = static_cast<std::int64_t>(message.size());
  }
  comm.broadcast(h, kWords, DataType::Int64, root).wait();
  if (!h[kOk]) {
    message.resize(static_cast<std::size_t>(h[kMessageBytes]));
    if (!message.empty()) comm.broadcast(message.data(), message.size(), DataType::UInt8, root).wait();
    if (me) std::rethrow_exception(failure);
    KIZUNA_THROW(static_cast<ErrorCode>(h[kCode]), "rank ", root, " could not load the data set: ", message);
  }
  names.resize(static_cast<std::size_t>(h[kNameBytes]));
  if (!names.empty()) comm.broadcast(names.data(), names.size(), DataType::UInt8, root).wait();
  if (!me) {
    shape_split(s.train, h, static_cast<std::size_t>(h[kTrainSize]));
    shape_split(s.test, h, static_cast<std::size_t>(h[kTestSize]));
    const auto nl = names.find('\n');
    s.train.name = names.substr(0, nl);
    s.test.name = nl == std::string::npos ? "" : names.substr(nl + 1);
  }
  broadcast_split(comm, s.train, root);
  broadcast_split(comm, s.test, root);
  return s;
}

}  // namespace kizuna::mlp
