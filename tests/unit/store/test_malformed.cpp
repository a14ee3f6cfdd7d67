// Untrusted input: frames the server cannot parse close that connection,
// with a logged reason, and every other client is served as before.
#include <catch2/catch.hpp>

#include <kizuna/tcp_store.hpp>
#include <kizuna/tcp_store_server.hpp>

#include <random>
#include <thread>

#include "store/wire.hpp"
#include "store_test_util.hpp"

using namespace kizuna;
using namespace kizuna::test;
using namespace std::chrono_literals;
namespace wire = kizuna::store::wire;

namespace {

wire::Bytes header_bytes(std::uint8_t version, std::uint8_t op, std::uint32_t body_bytes) {
  wire::Bytes out(wire::kHeaderBytes);
  wire::Header h;
  h.version = version;
  h.op = static_cast<wire::Op>(op);
  h.id = 1;
  h.body_bytes = body_bytes;
  wire::encode_header(h, out.data());
  return out;
}

wire::Bytes valid_set(const std::string& key, const std::string& value) {
  wire::Request r;
  r.op = wire::Op::Set;
  r.id = 1;
  r.keys = {key};
  r.values = {wire::Bytes(value.begin(), value.end())};
  wire::Bytes out;
  wire::encode(r, out);
  return out;
}

// A server on a free port, or a client of the one on `port`, without a token.
TcpStoreOptions open_options(int port = 0) {
  TcpStoreOptions o;
  o.port = port;
  o.token = "";
  return o;
}

// Appends the frame of request `id`, `op` on `keys`, to `out`.
void append_request(wire::Bytes& out, wire::Op op, std::uint32_t id, std::vector<std::string> keys = {},
                    std::uint32_t timeout_ms = 0) {
  wire::Request r;
  r.op = op;
  r.id = id;
  r.keys = std::move(keys);
  r.timeout_ms = timeout_ms;
  wire::encode(r, out);
}

// Hands `bytes` to `reader` as if read from its socket.
void feed(wire::FrameReader& reader, const std::vector<std::uint8_t>& bytes) {
  auto space = reader.prepare(bytes.size());
  std::copy(bytes.begin(), bytes.end(), space.begin());
  reader.commit(bytes.size());
}

struct Case {
  const char* name;
  wire::Bytes bytes;
  bool then_shutdown;  // send EOF after the bytes (a truncated frame)
};

std::vector<Case> malformed_cases() {
  std::vector<Case> cases;
  std::mt19937 rng(1234);
  wire::Bytes random(1000);
  for (auto& byte : random) byte = static_cast<std::uint8_t>(rng());
  random[0] = 'x';  // never the magic's first byte
  cases.push_back({"random bytes", random, false});
  const std::string http = "GET / HTTP/1.1\r\nHost: store\r\n\r\n";
  cases.push_back({"bad magic", wire::Bytes(http.begin(), http.end()), false});
  cases.push_back({"bad version", header_bytes(9, 16, 0), false});
  cases.push_back({"huge length", header_bytes(wire::kVersion, 16, 0xffffffffu), false});
  cases.push_back({"unknown opcode", header_bytes(wire::kVersion, 99, 0), false});
  wire::Bytes truncated = valid_set("key", std::string(100, 'v'));
  truncated.resize(truncated.size() - 50);
  cases.push_back({"truncated frame", truncated, true});
  // A well-formed header whose body lies: a key length past the end.
  wire::Bytes lying = header_bytes(wire::kVersion, 16, 8);
  for (std::uint8_t b : wire::Bytes{0xff, 0xff, 0x00, 0x00, 'k', 'e', 'y', '!'}) lying.push_back(b);
  cases.push_back({"key length past the body", lying, false});
  wire::Bytes trailing = valid_set("k", "v");
  trailing[12] += 3;  // claim three more body bytes than the fields use
  for (int i = 0; i < 3; ++i) trailing.push_back(0);
  cases.push_back({"trailing bytes", trailing, false});
  wire::Bytes as_reply = valid_set("k", "v");
  as_reply[6] = 1;  // a request with a status
  cases.push_back({"status in a request", as_reply, false});
  cases.push_back({"hello sent to the server", header_bytes(wire::kVersion, 1, 0), false});
  return cases;
}

}  // namespace

TEST_CASE("malformed frames close that connection, and the server serves the others",
          "[malformed]") {
  TcpStoreServer server(open_options());
  const TcpStoreOptions co = open_options(server.port());
  TcpStore bystander(co);  // connected before, used after each attack
  bystander.set("before", std::string_view("1"));

  for (const Case& c : malformed_cases()) {
    SECTION(c.name) {
      RawSocket raw(server.port());
      raw.read_exactly(wire::kHeaderBytes + 1);  // the server's hello
      raw.send(c.bytes);                         // may fail half-way once the server has closed
      if (c.then_shutdown) raw.shutdown_write();
      bool closed = false;
      const auto got = raw.read_until_closed(closed);
      CHECK(closed);
      CHECK(got.empty());  // closed without an answer
      CHECK(bystander.get_string("before") == "1");
      bystander.add("served", 1);
      TcpStore newcomer(co);
      CHECK(newcomer.add("served", 1) == 2);
      CHECK(eventually([&] { return server.num_connections() == 2; }));
    }
  }
}

TEST_CASE("a frame that stalls half-way is dropped after the store timeout", "[malformed]") {
  TcpStoreOptions so = open_options();
  so.timeout = 300ms;
  TcpStoreServer server(so);
  RawSocket raw(server.port());
  wire::Bytes half = valid_set("key", "value");
  half.resize(half.size() - 3);
  REQUIRE(raw.send(half));
  bool closed = false;
  raw.read_until_closed(closed);
  CHECK(closed);
}

TEST_CASE("a client streaming frames for longer than the store timeout is not dropped", "[malformed]") {
  // Each read ends half-way through a frame, but every frame completes at
  // once: the timeout is a frame's, not the stream's.
  TcpStoreOptions so = open_options();
  so.timeout = 300ms;
  TcpStoreServer server(so);
  RawSocket raw(server.port());
  raw.read_exactly(wire::kHeaderBytes + 1);  // hello
  wire::Bytes ping;
  append_request(ping, wire::Op::Ping, 1);
  const std::size_t half = ping.size() / 2;
  REQUIRE(raw.send(wire::Bytes(ping.begin(), ping.begin() + half)));
  for (int i = 0; i < 12; ++i) {  // 1.2 s: four timeouts
    std::this_thread::sleep_for(100ms);
    wire::Bytes rest(ping.begin() + half, ping.end());  // this frame's end, the next one's start
    rest.insert(rest.end(), ping.begin(), ping.begin() + half);
    REQUIRE(raw.send(rest));
    CHECK(raw.read_exactly(wire::kHeaderBytes, 5s).size() == wire::kHeaderBytes);  // its pong
  }
}

TEST_CASE("pipelined requests behind a backlog of large replies are all answered", "[malformed]") {
  // Two replies of 0.9 MB each put the connection over its 1 MiB backlog
  // while the first is being written; what follows them must still be
  // handled once the first has gone.
  TcpStoreServer server(open_options());
  const TcpStoreOptions co = open_options(server.port());
  TcpStore setter(co);
  const std::string value(900'000, 'v');
  setter.set("big", std::string_view(value));
  RawSocket raw(server.port());
  raw.read_exactly(wire::kHeaderBytes + 1);  // hello
  wire::Bytes frames;
  append_request(frames, wire::Op::Get, 1, {"big"});
  append_request(frames, wire::Op::Get, 2, {"big"});
  append_request(frames, wire::Op::Ping, 3);
  REQUIRE(raw.send(frames));
  const std::size_t expected = 2 * (wire::kHeaderBytes + 4 + value.size()) + wire::kHeaderBytes;
  const auto replies = raw.read_exactly(expected, 10s);
  REQUIRE(replies.size() == expected);
  wire::FrameReader reader(2 << 20);
  feed(reader, replies);
  wire::Header h;
  std::span<const std::uint8_t> body;
  std::string error;
  for (std::uint32_t id : {1u, 2u, 3u}) {
    REQUIRE(reader.next(h, body, error) == wire::FrameReader::Result::Frame);
    CHECK(h.id == id);
  }
  CHECK(h.op == wire::Op::Ping);
}

TEST_CASE("pipelined requests are answered in order", "[malformed]") {
  TcpStoreServer server(open_options());
  RawSocket raw(server.port());
  raw.read_exactly(wire::kHeaderBytes + 1);  // hello
  // A held get first, then a set that releases it, all in one write.
  wire::Bytes frames;
  append_request(frames, wire::Op::Get, 7, {"p"}, 60'000);
  const TcpStoreOptions co = open_options(server.port());
  TcpStore other(co);
  REQUIRE(raw.send(frames));
  REQUIRE(eventually([&] { return server.num_waiters() == 1; }));
  wire::Bytes more;
  append_request(more, wire::Op::Ping, 8);
  REQUIRE(raw.send(more));  // queued behind the held get
  other.set("p", std::string_view("released"));
  const auto replies = raw.read_exactly(wire::kHeaderBytes + 4 + 8 + wire::kHeaderBytes);
  wire::FrameReader reader(1 << 20);
  feed(reader, replies);
  wire::Header h;
  std::span<const std::uint8_t> body;
  std::string error;
  REQUIRE(reader.next(h, body, error) == wire::FrameReader::Result::Frame);
  CHECK(h.id == 7);
  wire::Reply reply;
  REQUIRE(wire::decode(h, body, wire::Limits{}, reply, error));
  CHECK(reply.values.at(0) == wire::Bytes{'r', 'e', 'l', 'e', 'a', 's', 'e', 'd'});
  REQUIRE(reader.next(h, body, error) == wire::FrameReader::Result::Frame);
  CHECK(h.id == 8);
  CHECK(h.op == wire::Op::Ping);
}
