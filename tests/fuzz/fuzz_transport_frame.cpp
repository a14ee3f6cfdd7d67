// libFuzzer target: the bytes a TCP link receives (transport/frame.hpp), as
// tcp_connect and tcp_link decode them: a 32-byte Hello, checked against
// what the receiving rank expects, then frames (32-byte header, payload),
// an abort frame's payload decoded as an AbortNotice.
//
// Input layout: byte 0 picks the receiving rank's world size (1..64) and
// byte 1 the rank it expects to hear from; the rest is the byte stream.
//
// Checked beyond "no crash, no leak, no undefined behaviour":
//   - a Hello that decodes re-encodes to the same bytes, apart from the
//     flags field (bytes 6..7, ignored by this version);
//   - hello_refusal() accepts only a rank inside the world that was expected,
//     with the expected communicator, world size and incarnation;
//   - a header that decodes re-encodes to the same bytes apart from the
//     zero fields (5..7, 20..23), and promises no more than the limits;
//   - an abort notice keeps at most kMaxAbortText bytes of text, and one
//     that fits re-encodes to the bytes it came from when its code is valid.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>

#include "transport/frame.hpp"

using namespace kizuna;
using namespace kizuna::transport;

namespace {

void check(bool condition) {
  if (!condition) std::abort();
}

constexpr std::uint64_t kCommId = 0x6b697a756e61ull;
constexpr std::uint64_t kIncarnation = 0x1234ull;

void hello(const unsigned char* b, int world, int expected_rank) {
  Hello h;
  try {
    h = decode_hello(b);
  } catch (const Error& e) {
    check(e.code() == ErrorCode::Mismatch);
    return;
  }
  HelloBytes again = encode_hello(h);
  check(std::memcmp(again.data(), b, 6) == 0 && std::memcmp(again.data() + 8, b + 8, 24) == 0);

  Hello self;
  self.comm_id = kCommId;
  self.rank = 0;
  self.world_size = world;
  self.incarnation = 1;
  const std::map<int, std::uint64_t> expected{{expected_rank, kIncarnation}};
  const std::string why = hello_refusal(self, h, expected);
  const bool acceptable = h.comm_id == kCommId && h.world_size == world && h.rank == expected_rank &&
                          expected_rank < world && h.incarnation == kIncarnation;
  check(why.empty() == acceptable);
  if (why.empty()) check(h.rank >= 0 && h.rank < world);
}

void frames(const unsigned char* data, std::size_t size) {
  std::size_t at = 0;
  while (size - at >= kFrameHeaderBytes) {
    FrameHeader h;
    try {
      h = decode_header(data + at);
    } catch (const Error& e) {
      check(e.code() == ErrorCode::Mismatch);
      return;  // the link fails here
    }
    const HeaderBytes again = encode_header(h);
    check(std::memcmp(again.data(), data + at, 5) == 0 &&
          std::memcmp(again.data() + 8, data + at + 8, 12) == 0 &&
          std::memcmp(again.data() + 24, data + at + 24, 8) == 0);
    check(h.bytes <= kMaxPayloadBytes);
    at += kFrameHeaderBytes;
    if (h.kind == FrameKind::Abort) {
      check(h.bytes <= 9 + kMaxAbortText);
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(h.bytes, size - at));
      const AbortNotice notice = decode_abort(data + at, n);
      check(notice.message.size() <= kMaxAbortText);
      if (n >= 9 && data[at + 8] <= static_cast<unsigned>(ErrorCode::Internal)) {
        const std::vector<unsigned char> bytes = encode_abort(notice);
        check(bytes.size() == n && std::memcmp(bytes.data(), data + at, n) == 0);
      }
      return;  // an abort ends the stream
    }
    // A data frame's payload goes to the receive buffer; skip it.
    if (h.bytes > size - at) return;
    at += static_cast<std::size_t>(h.bytes);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2 + kHelloBytes) return 0;
  const int world = 1 + data[0] % 64;
  const int expected_rank = data[1] % 64;  // may lie outside the world
  hello(data + 2, world, expected_rank);
  frames(data + 2 + kHelloBytes, size - 2 - kHelloBytes);
  return 0;
}
