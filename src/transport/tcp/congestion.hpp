// transport/tcp/congestion.hpp: the TCP congestion control of each data
// connection (KIZUNA_TCP_CONGESTION).
//
// A connection between two ranks of one host never leaves it: the kernel
// routes it over loopback, where nothing is lost and nobody else shares the
// path. The system's congestion control still runs on it, and some cost a
// great deal there. BBR (the default of some distributions and clouds)
// paces every segment by its bandwidth estimate, which on loopback held a
// full-duplex pair near 2 GB/s per direction here and added microseconds to
// each small message, where Reno or CUBIC carry 8-9 GB/s
// (docs/tuning.md#large-all-reduce-over-tcp).
//
// Settings:
//   "auto"    (default) Reno on connections whose peer address belongs to
//             this host (a loopback address or one of the addresses of this
//             network namespace's interfaces); the system's choice on the
//             others, which share a network with other traffic. Reno is
//             built into every Linux kernel and always allowed to
//             unprivileged processes; if the kernel refuses it anyway
//             (seccomp, another TCP stack), the connection keeps the
//             system's choice and an info line says so.
//   "system"  every connection keeps the system's choice.
//   a name    (e.g. "cubic") every connection uses it; the kernel refusing
//             it is an InvalidArgument naming the variable and the
//             algorithms this process may choose.
//
// The choice is made before a connection exists, never switched away from
// the system's afterwards: a socket switched from BBR to Reno once
// established kept much of BBR's loopback rate (most likely because BBR
// turns on the kernel's own pacing of the socket and the switch does not
// turn it off). So a connecting socket is set before
// connect(), and a listening one before listen(), since accepted
// connections inherit the listener's choice; under auto, an accepted
// connection from another host is then put back to the system's choice.
#pragma once

#include <string>

#include <sys/socket.h>

namespace kizuna::transport {

class CongestionPolicy {
 public:
  // `setting` is already validated by core::Env: auto, system or a name.
  explicit CongestionPolicy(std::string setting = "auto");

  // Before listen(): what accepted connections start with.
  void prepare_listener(int fd) const;
  // Before connect() to `peer_host` (an IP address).
  void prepare_connect(int fd, const std::string& peer_host) const;
  // Once an accepted connection's peer is known: puts a connection from
  // another host back to the system's choice under auto.
  void settle_accepted(int fd, const std::string& peer_host) const;

  // The name wanted on a connection to `peer_host`; "" keeps the system's.
  std::string wanted(const std::string& peer_host) const;

 private:
  void set(int fd, const std::string& name) const;

  std::string setting_;
};

// The congestion control of TCP socket `fd`, as the kernel reports it (an
// unconnected socket reports the system's default).
std::string congestion_of(int fd);

// True when `address` (an AF_INET or AF_INET6 socket address) is a loopback
// address or is assigned to an interface of this network namespace.
bool address_is_local(const sockaddr* address);
// The same for an IP address in text; false when it is not one.
bool host_is_local(const std::string& host);

}  // namespace kizuna::transport
