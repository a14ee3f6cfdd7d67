// transport/tcp/tcp_link.hpp: a Link over one connected TCP socket.
//
// Asio opens and handshakes the connection (tcp_connect.hpp); the data path
// then drives the socket's descriptor directly with non-blocking sendmsg /
// recvmsg from the executor's thread: every queued frame goes out in one
// gathered write, and a receive reads header and payload with one call,
// the payload straight into the destination (copy) or through a small
// cache-resident staging buffer that is reduced as it fills (reduce).
//
// Owns the descriptor; closes it when destroyed. Not thread-safe (see Link).
#pragma once

#include <memory>

#include "transport/link.hpp"

namespace kizuna::transport {

struct TcpLinkOptions {
  std::size_t staging_bytes = 256 << 10;  // reduce staging; stays in L2
};

// Takes ownership of `fd`, a connected TCP socket.
std::unique_ptr<Link> make_tcp_link(int peer, int fd, const TcpLinkOptions& options = {});

}  // namespace kizuna::transport
