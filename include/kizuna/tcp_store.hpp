// kizuna/tcp_store.hpp: the Store that ranks on many machines share.
//
// TcpStore is a client of a TcpStoreServer (kizuna/tcp_store_server.hpp),
// or, with is_server, a client of a server it hosts itself on a thread of
// its own for as long as it lives (what rank 0 does in Store::from_env).
// docs/store-protocol.md describes what crosses the wire.
//
// Construction connects, retrying with backoff until the timeout when the
// server is not up yet, authenticates when a token is set, and, when
// world_size is set, waits until that many clients have joined. Then each
// call is one request and one reply on that connection: get, wait and
// multi_get are held by the server until their keys exist or their timeout
// passes (no polling), every other call returns when the server has
// answered.
//
// Errors are kizuna::Error naming the store address and the key:
//   Timeout          "timed out after 5000 ms waiting for key 'x' at store 127.0.0.1:4242";
//                    also a server that does not answer in time
//   PeerLost         the server closed the connection or died
//   SystemError      the OS refused (connect, resolve, listen: "address already in use")
//   InvalidArgument  a key over 4 KiB, a value over max_value_bytes, add on a non-integer,
//                    a server that requires a token when none is set
//   Mismatch         a wrong token, or a world_size that differs from the server's
// After an I/O error or a timeout waiting for a reply the connection is
// unusable and every later call says so; create a new TcpStore.
//
// Threading: every method may be called from any thread; calls are
// serialised on the one connection. Ownership: movable only through
// pointers; pimpl keeps Asio and OpenSSL out of this header.
#pragma once

#include <kizuna/store.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace kizuna {

struct TcpStoreOptions {
  static constexpr std::uint64_t kDefaultMaxValueBytes = 64ull << 20;

  // Client: the server's host name or address. Server: the address to listen
  // on; "" or "*" listens on every interface (and a client of that server in
  // this process connects through loopback).
  std::string host = "127.0.0.1";
  // 0 lets the OS choose a free port (servers only); port() reads it back.
  int port = 0;
  // TcpStore only: also host the server, in this process.
  bool is_server = false;
  // When set, a TcpStore's constructor returns only once this many clients
  // have joined the server (a barrier, as torch's TCPStore world_size); a
  // server with world_size refuses joins that announce another size.
  std::optional<int> world_size;
  // Deadline of connecting, of joining and of every reply; also the default
  // timeout of get, wait and multi_get. Unset: KIZUNA_STORE_TIMEOUT (60 s).
  std::optional<std::chrono::milliseconds> timeout;
  // Shared secret for the HMAC challenge-response. Unset: KIZUNA_STORE_TOKEN;
  // "" means no authentication.
  std::optional<std::string> token;
  // Largest value accepted (and sent); keys are at most 4 KiB.
  std::uint64_t max_value_bytes = kDefaultMaxValueBytes;
};

class TcpStore : public Store {
 public:
  explicit TcpStore(TcpStoreOptions options);
  ~TcpStore() override;
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  using Store::get;
  using Store::multi_get;
  using Store::set;
  using Store::wait;

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  std::int64_t num_keys() override;
  std::vector<Bytes> multi_get(const std::vector<std::string>& keys,
                               std::chrono::milliseconds timeout) override;
  void multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) override;
  void append(const std::string& key, const Bytes& value) override;

  // Keys that start with `prefix`, sorted; at most `max_keys` of them (the
  // server also stops at 16384 keys or 4 MiB of names). For tools and
  // debugging: it walks the whole store.
  std::vector<std::string> list_keys(const std::string& prefix = "", std::size_t max_keys = 16384);

  // One round trip that does nothing: is the server there?
  void ping();

  // The server's host as given, and its port (the bound one when this
  // TcpStore hosts a server on port 0).
  const std::string& host() const;
  int port() const;
  // "host:port", as error messages write it.
  const std::string& address() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kizuna
