// transport/tcp/interface.hpp: which local address to listen on.
//
// With KIZUNA_SOCKET_IFNAME the named interface's IPv4 address (an unknown
// name is an InvalidArgument listing the interfaces that exist). Otherwise
// the address the kernel would use to reach the store's host: the route
// decides, as NCCL and Gloo do, so a job whose store is on 127.0.0.1 stays on
// loopback and one whose store is across a veth pair uses the veth.
#pragma once

#include <string>

namespace kizuna::transport {

std::string local_address_for(const std::string& remote_host, const std::string& ifname);

}  // namespace kizuna::transport
