// The wire format without sockets: every request and reply round-trips,
// the header is laid out as docs/store-protocol.md says, and the decoders
// refuse what does not fit.
#include <catch2/catch.hpp>

#include <random>

#include "store/wire.hpp"

using namespace kizuna::store::wire;

namespace {

Bytes b(std::string_view s) { return Bytes(s.begin(), s.end()); }

// Feeds `bytes` to a FrameReader in pieces of `step` and returns the frames.
std::vector<std::pair<Header, Bytes>> frames_of(const Bytes& bytes, std::size_t step,
                                                std::uint64_t max_body = 1 << 20) {
  FrameReader reader(max_body);
  std::vector<std::pair<Header, Bytes>> out;
  for (std::size_t pos = 0; pos < bytes.size(); pos += step) {
    const std::size_t n = std::min(step, bytes.size() - pos);
    auto space = reader.prepare(n);
    std::copy_n(bytes.begin() + static_cast<std::ptrdiff_t>(pos), n, space.begin());
    reader.commit(n);
    for (;;) {
      Header h;
      std::span<const std::uint8_t> body;
      std::string error;
      const auto r = reader.next(h, body, error);
      INFO(error);
      REQUIRE(r != FrameReader::Result::Error);
      if (r == FrameReader::Result::NeedMore) break;
      out.emplace_back(h, Bytes(body.begin(), body.end()));
    }
  }
  return out;
}

Request round_trip(const Request& r) {
  Bytes bytes;
  encode(r, bytes);
  const auto frames = frames_of(bytes, 3);
  REQUIRE(frames.size() == 1);
  Request out;
  std::string error;
  INFO(error);
  REQUIRE(decode(frames[0].first, frames[0].second, Limits{}, out, error));
  return out;
}

Reply round_trip(const Reply& r) {
  Bytes bytes;
  encode(r, bytes);
  const auto frames = frames_of(bytes, 5);
  REQUIRE(frames.size() == 1);
  Reply out;
  std::string error;
  REQUIRE(decode(frames[0].first, frames[0].second, Limits{}, out, error));
  return out;
}

}  // namespace

TEST_CASE("the header is laid out byte by byte, little-endian", "[wire]") {
  Header h;
  h.op = Op::Get;
  h.status = Status::Timeout;
  h.id = 0x04030201;
  h.body_bytes = 0x0d0c0b0a;
  std::uint8_t out[kHeaderBytes];
  encode_header(h, out);
  const std::uint8_t expected[kHeaderBytes] = {'K', 'Z', 'S', 'T', 1,    17,   1,    0,
                                               1,   2,   3,   4,   0x0a, 0x0b, 0x0c, 0x0d};
  CHECK(std::equal(out, out + kHeaderBytes, expected));
}

TEST_CASE("a set request is laid out byte by byte", "[wire]") {
  Request r;
  r.op = Op::Set;
  r.id = 9;
  r.keys = {"ab"};
  r.values = {b("xyz")};
  Bytes out;
  encode(r, out);
  const Bytes expected = {'K', 'Z', 'S', 'T', 1, 16,  0,   0, 9, 0, 0, 0,   13,  0,  0,
                          0,   2,   0,   0,   0, 'a', 'b', 3, 0, 0, 0, 'x', 'y', 'z'};
  CHECK(out == expected);
}

TEST_CASE("every request round-trips", "[wire]") {
  Request r;
  r.id = 42;
  SECTION("set") {
    r.op = Op::Set;
    r.keys = {"k"};
    r.values = {b("value")};
  }
  SECTION("get") {
    r.op = Op::Get;
    r.keys = {"k"};
    r.timeout_ms = 123456;
  }
  SECTION("add") {
    r.op = Op::Add;
    r.keys = {"counter"};
    r.number = -1234567890123LL;
  }
  SECTION("compare_set") {
    r.op = Op::CompareSet;
    r.keys = {"k"};
    r.values = {Bytes{}, b("new")};
  }
  SECTION("wait") {
    r.op = Op::Wait;
    r.keys = {"a", "b", "c"};
    r.timeout_ms = 7;
  }
  SECTION("check") {
    r.op = Op::Check;
    r.keys = {"a"};
  }
  SECTION("delete") {
    r.op = Op::Delete;
    r.keys = {"gone"};
  }
  SECTION("num_keys") { r.op = Op::NumKeys; }
  SECTION("multi_get") {
    r.op = Op::MultiGet;
    r.keys = {"x", "y"};
    r.timeout_ms = 1;
  }
  SECTION("multi_set") {
    r.op = Op::MultiSet;
    r.keys = {"x", "y"};
    r.values = {b("1"), Bytes{}};
  }
  SECTION("append") {
    r.op = Op::Append;
    r.keys = {"log"};
    r.values = {b("more")};
  }
  SECTION("join") {
    r.op = Op::Join;
    r.number = 64;
    r.timeout_ms = 60000;
  }
  SECTION("list_keys") {
    r.op = Op::ListKeys;
    r.prefix = "rank/";
  }
  SECTION("ping") { r.op = Op::Ping; }
  const Request out = round_trip(r);
  CHECK(out.op == r.op);
  CHECK(out.id == r.id);
  CHECK(out.keys == r.keys);
  CHECK(out.values == r.values);
  CHECK(out.number == r.number);
  CHECK(out.timeout_ms == r.timeout_ms);
  CHECK(out.prefix == r.prefix);
}

TEST_CASE("every reply round-trips", "[wire]") {
  Reply r;
  r.id = 5;
  SECTION("get") {
    r.op = Op::Get;
    r.values = {b("v")};
  }
  SECTION("add") {
    r.op = Op::Add;
    r.number = -3;
  }
  SECTION("check") {
    r.op = Op::Check;
    r.number = 1;
  }
  SECTION("multi_get") {
    r.op = Op::MultiGet;
    r.values = {b("a"), Bytes{}, b("ccc")};
  }
  SECTION("list_keys") {
    r.op = Op::ListKeys;
    r.keys = {"a", "b"};
    r.number = 1;
  }
  SECTION("timeout") {
    r.op = Op::Get;
    r.status = Status::Timeout;
    r.keys = {"missing"};
    r.message = "detail";
  }
  SECTION("error") {
    r.op = Op::Add;
    r.status = Status::InvalidArgument;
    r.message = "not an integer";
  }
  const Reply out = round_trip(r);
  CHECK(out.op == r.op);
  CHECK(out.status == r.status);
  CHECK(out.values == r.values);
  CHECK(out.keys == r.keys);
  CHECK(out.number == r.number);
  CHECK(out.message == r.message);
}

TEST_CASE("handshake frames round-trip", "[wire]") {
  Hello hello;
  hello.auth_required = true;
  for (std::size_t i = 0; i < kNonceBytes; ++i)
    hello.server_nonce[i] = static_cast<std::uint8_t>(i);
  Bytes bytes;
  encode(hello, bytes);
  CHECK(bytes.size() == kHeaderBytes + 1 + kNonceBytes);
  const auto frames = frames_of(bytes, 1);
  REQUIRE(frames.size() == 1);
  Hello out;
  std::string error;
  REQUIRE(decode(frames[0].first, frames[0].second, out, error));
  CHECK(out.auth_required);
  CHECK(out.server_nonce == hello.server_nonce);

  AuthRequest auth;
  auth.has_token = true;
  auth.client_nonce[3] = 7;
  auth.proof[31] = 9;
  bytes.clear();
  encode(auth, bytes);
  const auto f2 = frames_of(bytes, 64);
  AuthRequest auth_out;
  REQUIRE(decode(f2.at(0).first, f2.at(0).second, auth_out, error));
  CHECK(auth_out.client_nonce == auth.client_nonce);
  CHECK(auth_out.proof == auth.proof);
}

TEST_CASE("several frames in one buffer come out one by one", "[wire]") {
  Bytes bytes;
  for (std::uint32_t i = 0; i < 10; ++i) {
    Request r;
    r.op = Op::Add;
    r.id = i;
    r.keys = {"k" + std::to_string(i)};
    r.number = i;
    encode(r, bytes);
  }
  for (std::size_t step : {1, 7, 64, 100000}) {
    const auto frames = frames_of(bytes, step);
    REQUIRE(frames.size() == 10);
    for (std::uint32_t i = 0; i < 10; ++i) CHECK(frames[i].first.id == i);
  }
}

TEST_CASE("FrameReader rejects a bad header as soon as its bytes arrive", "[wire]") {
  auto first_error = [](const Bytes& bytes, std::uint64_t max_body = 1024) {
    FrameReader reader(max_body);
    auto space = reader.prepare(bytes.size());
    std::copy(bytes.begin(), bytes.end(), space.begin());
    reader.commit(bytes.size());
    Header h;
    std::span<const std::uint8_t> body;
    std::string error;
    const auto r = reader.next(h, body, error);
    return r == FrameReader::Result::Error ? error : std::string("no error");
  };
  CHECK_THAT(first_error(b("G")), Catch::Contains("bad magic"));
  CHECK_THAT(first_error(b("KZx")), Catch::Contains("bad magic"));
  CHECK(first_error(b("KZS")) == "no error");  // could still be a frame
  CHECK_THAT(first_error(Bytes{'K', 'Z', 'S', 'T', 2}),
             Catch::Contains("unsupported protocol version 2"));
  CHECK_THAT(first_error(Bytes{'K', 'Z', 'S', 'T', 1, 200, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}),
             Catch::Contains("unknown opcode 200"));
  CHECK_THAT(first_error(Bytes{'K', 'Z', 'S', 'T', 1, 16, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0}),
             Catch::Contains("flags"));
  CHECK_THAT(first_error(Bytes{'K', 'Z', 'S', 'T', 1, 16, 0, 0, 0, 0, 0, 0, 1, 4, 0, 0}),
             Catch::Contains("exceeds the limit of 1024"));
}

TEST_CASE("FrameReader's buffer grows with what arrives, not with what is announced", "[wire]") {
  FrameReader reader(Limits{}.max_body_bytes());
  Header h;
  h.op = Op::Set;
  h.body_bytes = 60 << 20;  // announced, never sent
  Bytes head(kHeaderBytes);
  encode_header(h, head.data());
  auto space = reader.prepare(head.size());
  std::copy(head.begin(), head.end(), space.begin());
  reader.commit(head.size());
  std::span<const std::uint8_t> body;
  std::string error;
  Header out;
  CHECK(reader.next(out, body, error) == FrameReader::Result::NeedMore);
  CHECK(reader.buffered() == kHeaderBytes);
  CHECK(reader.wanted() == (60u << 20));
  // The caller reads in bounded chunks; the reader allocates what it is asked to.
  CHECK(reader.prepare(64 << 10).size() < (1u << 20));
}

TEST_CASE("decoders refuse bodies that do not fit their opcode", "[wire]") {
  auto decode_request = [](Op op, const Bytes& body, std::uint64_t max_value = 1 << 20) {
    Header h;
    h.op = op;
    h.body_bytes = static_cast<std::uint32_t>(body.size());
    Request r;
    std::string error;
    Limits limits;
    limits.max_value_bytes = max_value;
    return decode(h, body, limits, r, error) ? std::string("ok") : error;
  };
  // Set: key "k", value "v".
  const Bytes set = {1, 0, 0, 0, 'k', 1, 0, 0, 0, 'v'};
  CHECK(decode_request(Op::Set, set) == "ok");
  CHECK_THAT(decode_request(Op::Set, Bytes(set.begin(), set.end() - 1)),
             Catch::Contains("truncated value"));
  Bytes trailing = set;
  trailing.push_back(0);
  CHECK_THAT(decode_request(Op::Set, trailing), Catch::Contains("trailing"));
  CHECK_THAT(decode_request(Op::Set, set, 0),
             Catch::Contains("value of 1 bytes exceeds the limit of 0"));
  CHECK_THAT(decode_request(Op::Set, Bytes{0, 0, 0, 0, 0, 0, 0, 0}), Catch::Contains("empty key"));
  CHECK_THAT(decode_request(Op::Set, Bytes{0x01, 0x10, 0, 0}),
             Catch::Contains("key of 4097 bytes exceeds"));
  // A count larger than the body could hold is refused before any reserve().
  CHECK_THAT(decode_request(Op::Check, Bytes{0x00, 0x40, 0, 0}), Catch::Contains("does not fit"));
  CHECK_THAT(decode_request(Op::Check, Bytes{0xff, 0xff, 0xff, 0xff}),
             Catch::Contains("exceeds the limit"));
  CHECK_THAT(decode_request(Op::Join, Bytes{0, 0, 0, 0, 0, 0, 0, 0}),
             Catch::Contains("world size 0"));
  CHECK_THAT(decode_request(Op::Hello, Bytes{}), Catch::Contains("not a request"));
}

TEST_CASE("random bodies never crash a decoder", "[wire]") {
  std::mt19937 rng(7);
  for (int i = 0; i < 20000; ++i) {
    Bytes body(rng() % 64);
    for (auto& byte : body) byte = static_cast<std::uint8_t>(rng() % 4 == 0 ? rng() : rng() % 3);
    Header h;
    h.op = static_cast<Op>(16 + rng() % 14);
    h.status = static_cast<Status>(rng() % 8);
    h.body_bytes = static_cast<std::uint32_t>(body.size());
    Request req;
    Reply rep;
    std::string error;
    decode(h, body, Limits{}, req, error);
    decode(h, body, Limits{}, rep, error);
  }
  SUCCEED();
}

TEST_CASE("printable escapes what is not printable", "[wire]") {
  CHECK(printable("abc") == "abc");
  CHECK(printable(std::string("a\0\n", 3)) == "a\\x00\\x0a");
  CHECK(printable(std::string(200, 'x'), 10) == "xxxxxxxxxx...");
}
