// transport/tcp/tcp_connect.hpp: opening a communicator's TCP connections.
//
// TcpListener listens on port 0 of the chosen address and is what a rank
// publishes through the store. connect_peers() then opens one connection
// per pair, in a fixed order: a rank connects to every higher-ranked peer
// it needs and accepts the lower-ranked ones, all at once on one Asio
// io_context, until every connection is up or the deadline passes.
//
// Each connection starts with a Hello both ways {magic, version,
// communicator id, rank, world, incarnation}. A connection that is not
// kizuna, speaks another version, belongs to another communicator, claims a
// rank we do not expect (or twice), or comes from a stale process (an
// incarnation other than the one the rank published) is refused, closed and
// logged; the others proceed. Connection attempts that fail are retried
// with backoff until the deadline; then Timeout names the missing ranks.
#pragma once

#include <chrono>
#include <functional>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport/frame.hpp"

namespace kizuna::transport {

struct TcpPeer {
  int rank = -1;
  std::string host;
  int port = 0;
  std::uint64_t incarnation = 0;
};

class TcpListener {
 public:
  // Binds `host`:0. Throws SystemError naming the address on failure.
  // `congestion` is KIZUNA_TCP_CONGESTION's setting for the connections it
  // accepts and the ones connect_peers opens (transport/tcp/congestion.hpp).
  explicit TcpListener(const std::string& host, const std::string& congestion = "auto");
  ~TcpListener();
  TcpListener(const TcpListener&) = delete;
  TcpListener& operator=(const TcpListener&) = delete;

  const std::string& host() const;
  int port() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  friend std::vector<int> connect_peers(TcpListener&, const Hello&, const std::vector<TcpPeer>&,
                                        const std::vector<TcpPeer>&,
                                        std::chrono::steady_clock::time_point,
                                        const std::function<std::string()>&);
};

// Connects to every peer in `connect_to` and accepts every peer in
// `accept_from`. Returns one connected descriptor per world rank (-1 where
// none); the caller owns them. Throws Timeout naming the missing ranks.
// `give_up`, when given, is asked about every 100 ms: a non-empty answer
// ends set-up at once with Mismatch and that text (a failure another rank
// published, comm/bootstrap.hpp).
std::vector<int> connect_peers(TcpListener& listener, const Hello& self,
                               const std::vector<TcpPeer>& connect_to,
                               const std::vector<TcpPeer>& accept_from,
                               std::chrono::steady_clock::time_point deadline,
                               const std::function<std::string()>& give_up = {});

// TCP_NODELAY, applied to every data connection.
void tune_socket(int fd);

}  // namespace kizuna::transport
