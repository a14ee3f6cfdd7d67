// transport/tcp/listen_port.hpp: the port a rank's listener takes.
//
// Every rank listens twice (its links, transport/tcp/tcp_connect.hpp, and
// point to point's, comm/p2p.hpp). Without KIZUNA_PORT_RANGE the OS picks
// each port (port 0). With KIZUNA_PORT_RANGE=LOW-HIGH, for clusters whose
// firewalls open only a range, bind_listen() takes a free port of the range:
// it starts at a place this process draws, so that the ranks of one node
// do not all race for the first port, and skips the ports in use. When
// every port is taken it throws SystemError naming the range and how many
// ports a job needs (docs/launcher.md#ports).
#pragma once

#include <sys/socket.h>

#include <string>

namespace kizuna::transport {

// Binds `fd` (a fresh TCP socket of addr's family) to `addr` (its port
// ignored) at a port of KIZUNA_PORT_RANGE, or at port 0 without it, and
// listens. Returns the port. `host` names the address in errors.
int bind_listen(int fd, const sockaddr_storage& addr, socklen_t len, const std::string& host);

}  // namespace kizuna::transport
