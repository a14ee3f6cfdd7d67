// core::stream_copy: byte for byte what memcpy writes, for every length and
// both pointers at every offset from a cache line, and nothing around it.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/stream_copy.hpp"

using kizuna::core::stream_copy;

namespace {

// Copies `bytes` from offset `from` of a patterned buffer to offset `to` of
// another and checks the copy and the guard bytes on both sides.
void check_copy(std::size_t bytes, std::size_t from, std::size_t to) {
  constexpr std::size_t kGuard = 80;
  std::vector<unsigned char> src(bytes + from + kGuard), dst(bytes + to + 2 * kGuard, 0xA5);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 131 + 7);
  unsigned char* d = dst.data() + kGuard + to;
  stream_copy(d, src.data() + from, bytes);
  CHECK(std::memcmp(d, src.data() + from, bytes) == 0);
  for (std::size_t i = 0; i < kGuard + to; ++i) REQUIRE(dst[i] == 0xA5);
  for (std::size_t i = kGuard + to + bytes; i < dst.size(); ++i) REQUIRE(dst[i] == 0xA5);
}

}  // namespace

TEST_CASE("stream_copy writes what memcpy writes, at every length up to 300 bytes and every offset", "[stream_copy]") {
  for (std::size_t bytes = 0; bytes <= 300; ++bytes)
    for (std::size_t from : {0, 1, 7, 16, 33})
      for (std::size_t to = 0; to < 64; to += 3) {
        CAPTURE(bytes, from, to);
        check_copy(bytes, from, to);
      }
}

TEST_CASE("stream_copy copies large buffers, aligned or not", "[stream_copy]") {
  for (std::size_t bytes : {std::size_t{64 << 10}, std::size_t{(1 << 20) + 13}})
    for (std::size_t from : {0, 5})
      for (std::size_t to : {0, 9, 64}) {
        CAPTURE(bytes, from, to);
        check_copy(bytes, from, to);
      }
}
