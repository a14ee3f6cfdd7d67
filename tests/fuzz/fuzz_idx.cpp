// libFuzzer target: the IDX loader of the Fashion-MNIST data set
// (mlp/dataset.hpp), on the files' decompressed bytes in memory.
//
// Input layout: bytes 0..1, little-endian, the length of the images file
// (at most what follows); then the images file and the labels file. Each is parsed alone by parse_idx(), then both together by
// parse_image_split(), which checks them against each other.
//
// Checked beyond "no crash, no leak, no undefined behaviour": a file that
// parses holds exactly the elements its dimensions promise, and a split
// that parses has one label (< 10) per 28x28 image and pixels in [0, 1].
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "mlp/dataset.hpp"

using namespace kizuna;

namespace {

void check(bool condition) {
  if (!condition) std::abort();
}

constexpr std::size_t kMaxElements = 1 << 16;  // the fuzzer's inputs are small

void one_file(const std::uint8_t* data, std::size_t size) {
  std::vector<std::uint32_t> dims;
  try {
    const auto elements = mlp::parse_idx(data, size, dims, "fuzz", kMaxElements);
    std::uint64_t product = 1;
    for (std::uint32_t d : dims) product *= d;
    check(!dims.empty() && dims.size() <= 4 && product == elements.size());
    check(elements.size() + 4 + 4 * dims.size() == size);
  } catch (const Error& e) {
    check(e.code() == ErrorCode::InvalidArgument);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const std::size_t rest = size - 2;
  const std::size_t split = std::min<std::size_t>(data[0] | data[1] << 8, rest);
  const std::uint8_t* images = data + 2;
  const std::uint8_t* labels = images + split;
  one_file(images, split);
  one_file(labels, rest - split);
  try {
    const mlp::Dataset d =
        mlp::parse_image_split(images, split, "images", labels, rest - split, "labels", "fuzz");
    check(d.features == 28 * 28 && d.outputs == 10);
    check(d.labels.size() == d.size && d.inputs.size() == d.size * 28 * 28);
    for (std::int32_t label : d.labels) check(label >= 0 && label < 10);
    for (float x : d.inputs) check(x >= 0.0f && x <= 1.0f);
  } catch (const Error& e) {
    check(e.code() == ErrorCode::InvalidArgument);
  }
  return 0;
}
