#include "transport/tcp/listen_port.hpp"

#include <netinet/in.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "core/check.hpp"
#include "core/env.hpp"

namespace kizuna::transport {
namespace {

void set_port(sockaddr_storage& addr, int port) {
  if (addr.ss_family == AF_INET6) reinterpret_cast<sockaddr_in6&>(addr).sin6_port = htons(static_cast<std::uint16_t>(port));
  else reinterpret_cast<sockaddr_in&>(addr).sin_port = htons(static_cast<std::uint16_t>(port));
}

int port_of(int fd) {
  sockaddr_storage bound{};
  socklen_t length = sizeof bound;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length);
  return bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<const sockaddr_in6&>(bound).sin6_port)
                                     : ntohs(reinterpret_cast<const sockaddr_in&>(bound).sin_port);
}

// Where this process starts in the range: drawn once, so that its two
// listeners take neighbouring ports and other processes start elsewhere.
unsigned start_offset() {
  static const unsigned offset = std::random_device{}();
  return offset;
}

}  // namespace

int bind_listen(int fd, const sockaddr_storage& addr, socklen_t len, const std::string& host) {
  const core::Env& env = core::Env::get();
  sockaddr_storage at = addr;
  if (env.port_low == 0) {
    set_port(at, 0);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&at), len) != 0 || ::listen(fd, SOMAXCONN) != 0)
      KIZUNA_THROW(ErrorCode::SystemError, "cannot listen on ", host, ":0: ", std::strerror(errno));
    return port_of(fd);
  }
  const unsigned count = static_cast<unsigned>(env.port_high - env.port_low + 1);
  const unsigned first = start_offset() % count;
  for (unsigned i = 0; i < count; ++i) {
    const int port = env.port_low + static_cast<int>((first + i) % count);
    set_port(at, port);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&at), len) == 0) {
      if (::listen(fd, SOMAXCONN) == 0) return port;
      KIZUNA_THROW(ErrorCode::SystemError, "cannot listen on ", host, ":", port, ": ", std::strerror(errno));
    }
    if (errno != EADDRINUSE)
      KIZUNA_THROW(ErrorCode::SystemError, "cannot listen on ", host, ":", port, " (of KIZUNA_PORT_RANGE=",
                   env.port_low, "-", env.port_high, "): ", std::strerror(errno));
  }
  KIZUNA_THROW(ErrorCode::SystemError, "cannot listen on ", host, ": every port of KIZUNA_PORT_RANGE=", env.port_low,
               "-", env.port_high, " is taken (", count, " ports; each rank listens on 2 of them, ",
               "docs/launcher.md#ports): widen the range");
}

}  // namespace kizuna::transport
