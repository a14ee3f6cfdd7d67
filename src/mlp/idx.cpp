// mlp/idx.cpp: the IDX format of the Fashion-MNIST files (dataset.hpp), from
// bytes in memory. No I/O here: dataset.cpp reads and decompresses the
// files, and the fuzzer (tests/fuzz/fuzz_idx.cpp) builds this file alone.
#include <cstring>

#include "core/check.hpp"
#include "mlp/dataset.hpp"

namespace kizuna::mlp {

namespace {

std::uint32_t be32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | p[3];
}

}  // namespace

std::vector<std::uint8_t> parse_idx(const std::uint8_t* bytes, std::size_t size,
                                    std::vector<std::uint32_t>& dims, const std::string& source,
                                    std::size_t max_bytes) {
  if (size < 4)
    KIZUNA_THROW(ErrorCode::InvalidArgument, source, " is truncated: ", size,
                 " bytes, less than an IDX header");
  if (bytes[0] != 0 || bytes[1] != 0)
    KIZUNA_THROW(ErrorCode::InvalidArgument, source, " is not an IDX file (bad magic ", int{bytes[0]}, " ",
                 int{bytes[1]}, ", expected 0 0)");
  if (bytes[2] != 0x08)
    KIZUNA_THROW(ErrorCode::InvalidArgument, source, " holds IDX element type 0x", std::hex, int{bytes[2]},
                 std::dec, "; this data set uses unsigned bytes (0x08)");
  const unsigned ndims = bytes[3];
  if (ndims < 1 || ndims > 4)
    KIZUNA_THROW(ErrorCode::InvalidArgument, source, " claims ", ndims, " dimensions (expected 1 to 4)");
  const std::size_t header = 4 + 4 * std::size_t{ndims};
  if (size < header)
    KIZUNA_THROW(ErrorCode::InvalidArgument, source, " is truncated inside its header");
  dims.clear();
  std::uint64_t elements = 1;
  for (unsigned d = 0; d < ndims; ++d) {
    dims.push_back(be32(bytes + 4 + 4 * d));
    elements *= dims.back();  // < 2^30 * 2^32: no overflow before the check
    if (elements > max_bytes)
      KIZUNA_THROW(ErrorCode::InvalidArgument, source, " claims more than ", max_bytes, " elements");
  }
  if (size - header != elements)
    KIZUNA_THROW(ErrorCode::InvalidArgument, source, (size - header < elements ? " is truncated" : " is corrupt"),
                 ": its header promises ", elements, " bytes of data, the file holds ", size - header);
  return std::vector<std::uint8_t>(bytes + header, bytes + size);
}

Dataset parse_image_split(const std::uint8_t* images, std::size_t images_size,
                          const std::string& images_source, const std::uint8_t* labels_bytes,
                          std::size_t labels_size, const std::string& labels_source,
                          const std::string& name) {
  std::vector<std::uint32_t> idims, ldims;
  const std::vector<std::uint8_t> pixels = parse_idx(images, images_size, idims, images_source);
  const std::vector<std::uint8_t> labels = parse_idx(labels_bytes, labels_size, ldims, labels_source);
  if (idims.size() != 3 || idims[1] != 28 || idims[2] != 28)
    KIZUNA_THROW(ErrorCode::InvalidArgument, images_source,
                 " does not hold 28x28 images (expected 3 dimensions N x 28 x 28)");
  if (ldims.size() != 1)
    KIZUNA_THROW(ErrorCode::InvalidArgument, labels_source, " does not hold labels (expected 1 dimension)");
  if (idims[0] != ldims[0])
    KIZUNA_THROW(ErrorCode::InvalidArgument, images_source, " holds ", idims[0], " images but ", labels_source,
                 " holds ", ldims[0], " labels");
  Dataset d;
  d.name = name;
  d.task = Loss::CrossEntropy;
  d.size = idims[0];
  d.features = 28 * 28;
  d.outputs = 10;
  d.labels.resize(d.size);
  for (std::size_t i = 0; i < d.size; ++i) {
    if (labels[i] > 9)
      KIZUNA_THROW(ErrorCode::InvalidArgument, labels_source, ": label ", int{labels[i]}, " of sample ", i,
                   " is not a class (0 to 9)");
    d.labels[i] = labels[i];
  }
  d.inputs.resize(pixels.size());
  for (std::size_t i = 0; i < pixels.size(); ++i) d.inputs[i] = static_cast<float>(pixels[i]) / 255.0f;
  return d;
}

}  // namespace kizuna::mlp
