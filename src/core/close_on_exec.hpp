// core/close_on_exec.hpp: marks a descriptor close-on-exec.
//
// Asio opens and accepts sockets without SOCK_CLOEXEC. A process that a
// rank starts (system(), a Python subprocess) would otherwise inherit the
// rank's connections and keep them open after the rank dies, and its peers
// would see a timeout instead of the connection's end. Called as soon as
// Asio hands a socket over.
#pragma once

#include <fcntl.h>

namespace kizuna::core {

inline void close_on_exec(int fd) {
  const int flags = ::fcntl(fd, F_GETFD);
  if (flags >= 0 && !(flags & FD_CLOEXEC)) ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
}

}  // namespace kizuna::core
