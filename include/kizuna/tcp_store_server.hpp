// kizuna/tcp_store_server.hpp: the server TcpStore clients talk to.
//
// TcpStoreServer listens (SO_REUSEADDR; port 0 picks a free port, read it
// back with port()) and serves every connection on one Asio io_context
// running on a thread of its own, started by the constructor and joined by
// the destructor, which closes every connection (their clients get PeerLost).
// The key-value map and the held requests (get, wait, multi_get of missing
// keys; joins short of world_size) live on that thread only; a held request
// ends when its keys exist, when its own timeout passes (a Timeout reply) or
// when its connection closes, and leaves nothing behind.
//
// Input is untrusted: a frame the server cannot parse (bad magic or version,
// an oversize length, a truncated or garbled body) closes that connection
// with a warning naming the peer and the reason; every other connection is
// served as before. With a token set (the option, else KIZUNA_STORE_TOKEN),
// a connection must pass the HMAC challenge-response before its first
// request (docs/store-protocol.md).
//
// Uses of TcpStoreOptions: host ("" or "*" = every interface), port, token,
// world_size, max_value_bytes. Errors: the constructor throws SystemError
// when it cannot listen ("address already in use" names the port and
// suggests another or port 0). Threading: every method may be called from
// any thread.
#pragma once

#include <kizuna/tcp_store.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace kizuna {

class TcpStoreServer {
 public:
  explicit TcpStoreServer(TcpStoreOptions options);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  // The port it listens on (the one the OS chose when asked for port 0).
  int port() const;
  // The address it listens on: "127.0.0.1:41234", "[::]:29500".
  std::string address() const;

  // Clients whose join has been counted (see TcpStoreOptions::world_size).
  std::int64_t num_joined() const;
  // Joins refused (another world size than the store's; after one, every
  // join is refused, so that every rank learns it).
  std::int64_t num_join_refusals() const;
  // Open connections, and requests held waiting for keys or joins.
  std::int64_t num_connections() const;
  std::int64_t num_waiters() const;

  // Blocks until `count` clients have joined or `timeout` passes; returns
  // whether they did.
  bool wait_joined(std::int64_t count, std::chrono::milliseconds timeout) const;

  // Blocks until every connection has closed, or no request has come for
  // `idle` (the clients left are done with the store, or stopped), or `cap`
  // passes; returns whether every connection closed. A process that hosts
  // the store calls it before it exits, so that ranks still setting up a
  // communicator (a split's other half) are not cut off.
  bool wait_clients_gone(std::chrono::milliseconds idle, std::chrono::milliseconds cap) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kizuna
