// The TCP wire format: round trips and refusal of what is not ours.
#include <catch2/catch.hpp>

#include "transport/frame.hpp"

using namespace kizuna;
using namespace kizuna::transport;

TEST_CASE("hello and frame headers round-trip", "[frame]") {
  const Hello h{0x1122334455667788ull, 5, 9, 42};
  const HelloBytes hb = encode_hello(h);
  const Hello back = decode_hello(hb.data());
  CHECK(back.comm_id == h.comm_id);
  CHECK(back.rank == 5);
  CHECK(back.world_size == 9);
  CHECK(back.incarnation == 42);
  const FrameHeader f{FrameKind::Data, {17, 3}, 1 << 20};
  const HeaderBytes fb = encode_header(f);
  const FrameHeader fback = decode_header(fb.data());
  CHECK(fback.kind == FrameKind::Data);
  CHECK(fback.tag == MessageTag{17, 3});
  CHECK(fback.bytes == 1u << 20);
  // little-endian on the wire, whatever the host
  CHECK(fb[0] == 0x4b);
  CHECK(fb[8] == 17);
}

TEST_CASE("strangers, other versions and corrupt headers are refused", "[frame]") {
  HelloBytes hb = encode_hello({1, 0, 2, 3});
  hb[0] ^= 0xff;
  CHECK_THROWS_WITH(decode_hello(hb.data()), Catch::Contains("not a kizuna handshake"));
  hb = encode_hello({1, 0, 2, 3});
  hb[4] = 99;
  CHECK_THROWS_WITH(decode_hello(hb.data()), Catch::Contains("wire version 99"));
  HeaderBytes fb = encode_header({FrameKind::Data, {1, 0}, 8});
  fb[4] = 7;
  CHECK_THROWS_WITH(decode_header(fb.data()), Catch::Contains("frame kind 7"));
  fb = encode_header({FrameKind::Data, {1, 0}, 8});
  fb[31] = 0xff;  // absurd size
  CHECK_THROWS_AS(decode_header(fb.data()), Error);
}

TEST_CASE("abort notices round-trip and survive truncation", "[frame]") {
  const AbortNotice n{2, 3, ErrorCode::PeerLost, "lost rank 3: connection closed"};
  const auto bytes = encode_abort(n);
  const AbortNotice back = decode_abort(bytes.data(), bytes.size());
  CHECK(back.origin == 2);
  CHECK(back.lost_rank == 3);
  CHECK(back.code == ErrorCode::PeerLost);
  CHECK(back.message == n.message);
  CHECK(decode_abort(bytes.data(), 4).message == "truncated abort notice");
}

TEST_CASE("a hello is accepted only from the expected rank of this communicator", "[frame]") {
  const Hello self{77, 0, 4, 1};
  const std::map<int, std::uint64_t> expected{{2, 20}, {3, 30}};
  CHECK(hello_refusal(self, {77, 2, 4, 20}, expected).empty());
  CHECK(hello_refusal(self, {77, 3, 4, 30}, expected).empty());
  CHECK_THAT(hello_refusal(self, {78, 2, 4, 20}, expected), Catch::Contains("another communicator"));
  CHECK_THAT(hello_refusal(self, {77, 2, 5, 20}, expected), Catch::Contains("world of 5 ranks, not 4"));
  CHECK_THAT(hello_refusal(self, {77, 1, 4, 20}, expected), Catch::Contains("rank 1 is not expected"));
  CHECK_THAT(hello_refusal(self, {77, 2, 4, 21}, expected), Catch::Contains("stale process for rank 2"));
  CHECK_THAT(hello_refusal(self, {77, -1, 4, 20}, expected), Catch::Contains("outside the world of 4"));
  // An expectation outside the world is never met.
  CHECK_THAT(hello_refusal(self, {77, 9, 4, 90}, {{9, 90}}), Catch::Contains("outside the world"));
}
