// Token authentication: the right token works; a wrong or missing one is
// refused with a clear error; a recorded handshake replayed on a new
// connection is refused; the token never crosses the wire.
#include <catch2/catch.hpp>

#include <kizuna/error.hpp>
#include <kizuna/tcp_store.hpp>
#include <kizuna/tcp_store_server.hpp>

#include <algorithm>
#include <thread>

#include "store/auth.hpp"
#include "store/wire.hpp"
#include "store_test_util.hpp"

using namespace kizuna;
using namespace kizuna::test;
using namespace std::chrono_literals;
namespace wire = kizuna::store::wire;

namespace {

constexpr const char* kToken = "correct horse battery staple";

TcpStoreOptions server_options(std::string token) {
  TcpStoreOptions o;
  o.port = 0;
  o.token = std::move(token);
  return o;
}

TcpStoreOptions client_options(int port, std::string token) {
  TcpStoreOptions o;
  o.port = port;
  o.token = std::move(token);
  o.timeout = 30s;
  return o;
}

std::pair<ErrorCode, std::string> error_of(const TcpStoreOptions& o) {
  try {
    TcpStore s(o);
  } catch (const Error& e) {
    return {e.code(), e.what()};
  }
  FAIL("the client was accepted");
  return {ErrorCode::Internal, ""};
}

// Reads one frame from a raw socket.
std::pair<wire::Header, wire::Bytes> read_frame(RawSocket& raw) {
  const auto head = raw.read_exactly(wire::kHeaderBytes);
  wire::FrameReader reader(1 << 20);
  auto space = reader.prepare(head.size());
  std::copy(head.begin(), head.end(), space.begin());
  reader.commit(head.size());
  const std::size_t body_bytes = reader.wanted();
  const auto body = raw.read_exactly(body_bytes);
  space = reader.prepare(body.size());
  std::copy(body.begin(), body.end(), space.begin());
  reader.commit(body.size());
  wire::Header h;
  std::span<const std::uint8_t> view;
  std::string error;
  REQUIRE(reader.next(h, view, error) == wire::FrameReader::Result::Frame);
  return {h, wire::Bytes(view.begin(), view.end())};
}

}  // namespace

TEST_CASE("the right token is accepted", "[auth]") {
  TcpStoreServer server(server_options(kToken));
  TcpStore a(client_options(server.port(), kToken));
  TcpStore b(client_options(server.port(), kToken));
  a.set("secret", std::string_view("shared"));
  CHECK(b.get_string("secret") == "shared");
}

TEST_CASE("a wrong token is refused, and the server serves the others", "[auth]") {
  TcpStoreServer server(server_options(kToken));
  TcpStore good(client_options(server.port(), kToken));
  const auto [code, message] = error_of(client_options(server.port(), "guessed"));
  CHECK(code == ErrorCode::Mismatch);
  CHECK_THAT(message, Catch::Contains("authentication failed"));
  CHECK_THAT(message, Catch::Contains("127.0.0.1:" + std::to_string(server.port())));
  good.set("still", std::string_view("served"));
  CHECK(good.get_string("still") == "served");
}

TEST_CASE("a missing token is refused with what to set", "[auth]") {
  TcpStoreServer server(server_options(kToken));
  const auto [code, message] = error_of(client_options(server.port(), ""));
  CHECK(code == ErrorCode::InvalidArgument);
  CHECK_THAT(message, Catch::Contains("store at 127.0.0.1:" + std::to_string(server.port()) +
                                      " requires a token: set KIZUNA_STORE_TOKEN"));
}

TEST_CASE("a client with a token refuses a store without one", "[auth]") {
  TcpStoreServer server(server_options(""));
  const auto [code, message] = error_of(client_options(server.port(), kToken));
  CHECK(code == ErrorCode::Mismatch);
  CHECK_THAT(message, Catch::Contains("does not authenticate"));
}

TEST_CASE("a replayed handshake is refused, and the token never crosses the wire", "[auth]") {
  TcpStoreServer server(server_options(kToken));

  // A legitimate handshake, recorded.
  RawSocket first(server.port());
  auto [hello_header, hello_body] = read_frame(first);
  wire::Hello hello;
  std::string error;
  REQUIRE(wire::decode(hello_header, hello_body, hello, error));
  REQUIRE(hello.auth_required);
  wire::AuthRequest auth;
  auth.has_token = true;
  auth.client_nonce = store::auth::random_nonce();
  auth.proof = store::auth::client_proof(kToken, hello.server_nonce, auth.client_nonce);
  wire::Bytes recorded;
  wire::encode(auth, recorded);
  REQUIRE(first.send(recorded));
  auto [ok_header, ok_body] = read_frame(first);
  REQUIRE(ok_header.op == wire::Op::AuthOk);
  wire::AuthOk ok;
  REQUIRE(wire::decode(ok_header, ok_body, ok, error));
  CHECK(store::auth::equal(
      ok.proof, store::auth::server_proof(kToken, hello.server_nonce, auth.client_nonce)));
  const std::string token = kToken;
  CHECK(std::search(recorded.begin(), recorded.end(), token.begin(), token.end()) ==
        recorded.end());

  // The same bytes on a new connection: a fresh server nonce, so refused.
  RawSocket second(server.port());
  auto [hello2_header, hello2_body] = read_frame(second);
  wire::Hello hello2;
  REQUIRE(wire::decode(hello2_header, hello2_body, hello2, error));
  CHECK(hello2.server_nonce != hello.server_nonce);
  REQUIRE(second.send(recorded));
  auto [refusal_header, refusal_body] = read_frame(second);
  CHECK(refusal_header.op == wire::Op::Auth);
  CHECK(refusal_header.status == wire::Status::AuthFailed);
  bool closed = false;
  second.read_until_closed(closed);
  CHECK(closed);

  // The recorded connection itself goes on working.
  wire::Request ping;
  ping.op = wire::Op::Ping;
  ping.id = 1;
  wire::Bytes frame;
  wire::encode(ping, frame);
  REQUIRE(first.send(frame));
  auto [pong, pong_body] = read_frame(first);
  CHECK(pong.op == wire::Op::Ping);
  CHECK(pong.status == wire::Status::Ok);
}

TEST_CASE("a request before authenticating closes the connection", "[auth]") {
  TcpStoreServer server(server_options(kToken));
  RawSocket raw(server.port());
  read_frame(raw);  // hello
  wire::Request get;
  get.op = wire::Op::Get;
  get.id = 1;
  get.keys = {"k"};
  wire::Bytes frame;
  wire::encode(get, frame);
  raw.send(frame);
  bool closed = false;
  const auto rest = raw.read_until_closed(closed);
  CHECK(closed);
  CHECK(rest.empty());
  TcpStore good(client_options(server.port(), kToken));
  good.ping();
}

TEST_CASE("a connection that never authenticates is closed after the store timeout", "[auth]") {
  TcpStoreOptions o = server_options(kToken);
  o.timeout = 300ms;
  TcpStoreServer server(o);
  RawSocket raw(server.port());
  read_frame(raw);  // hello, then nothing: it would hold a descriptor for good
  bool closed = false;
  const auto start = std::chrono::steady_clock::now();
  CHECK(raw.read_until_closed(closed, 10s).empty());
  CHECK(closed);
  CHECK(std::chrono::steady_clock::now() - start < 5s);
  TcpStore good(client_options(server.port(), kToken));
  std::this_thread::sleep_for(600ms);  // an authenticated connection may idle
  good.ping();
}

TEST_CASE("HMAC proofs depend on the token, both nonces and the direction", "[auth]") {
  const wire::Nonce a = store::auth::random_nonce();
  const wire::Nonce b = store::auth::random_nonce();
  CHECK(a != b);
  const wire::Mac p = store::auth::client_proof("t", a, b);
  CHECK(store::auth::equal(p, store::auth::client_proof("t", a, b)));
  CHECK_FALSE(store::auth::equal(p, store::auth::client_proof("u", a, b)));
  CHECK_FALSE(store::auth::equal(p, store::auth::client_proof("t", b, a)));
  CHECK_FALSE(store::auth::equal(p, store::auth::server_proof("t", a, b)));
}
