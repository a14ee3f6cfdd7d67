// libFuzzer target: the checkpoint loader (kizuna/checkpoint.hpp), as
// Checkpoint::read_file() and the collective load() run it on a file's
// bytes: Checkpoint::deserialize().
//
// Input layout: byte 0 bit 0 set means "fix the trailer": the CRC-32C of the
// rest is computed and written over its last four bytes before decoding, so
// the fuzzer gets past the checksum and explores the entries; clear, the
// bytes are decoded as they are (the checksum's own paths).
//
// Checked beyond "no crash, no leak, no undefined behaviour": a checkpoint
// that decodes re-encodes to exactly the same bytes (one encoding per
// checkpoint, so a file that loads is the file that was saved), and every
// entry reads back through get() with its own dtype and count.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <kizuna/checkpoint.hpp>

#include "ddp/crc32c.hpp"

using namespace kizuna;

namespace {

void check(bool condition) {
  if (!condition) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  std::vector<std::uint8_t> bytes(data + 1, data + size);
  if ((data[0] & 1) && bytes.size() >= 4) {
    ddp::Crc32c crc;
    crc.update(bytes.data(), bytes.size() - 4);
    const std::uint32_t c = crc.value();
    for (int i = 0; i < 4; ++i) bytes[bytes.size() - 4 + i] = static_cast<std::uint8_t>(c >> (8 * i));
  }
  Checkpoint ck;
  try {
    ck = Checkpoint::deserialize(bytes, "fuzz");
  } catch (const Error& e) {
    check(e.code() == ErrorCode::InvalidArgument);
    return 0;
  }
  check(ck.serialize() == bytes);
  for (const std::string& name : ck.names()) {
    const std::size_t count = ck.count(name);
    const DataType dtype = ck.dtype(name);
    std::vector<std::uint8_t> out(count * size_of(dtype));
    ck.get(name, out.data(), count, dtype);
  }
  return 0;
}
