#include "transport/tcp/congestion.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "core/check.hpp"
#include "core/log.hpp"

namespace kizuna::transport {
namespace {

constexpr const char* kLocalChoice = "reno";

std::string first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line.empty() ? "(unknown)" : line;
}

// The IPv4 address inside `a` (plain or IPv4-mapped IPv6), in network order.
bool ipv4_of(const sockaddr* a, in_addr& out) {
  if (a->sa_family == AF_INET) {
    out = reinterpret_cast<const sockaddr_in*>(a)->sin_addr;
    return true;
  }
  const in6_addr& v6 = reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr;
  if (a->sa_family == AF_INET6 && IN6_IS_ADDR_V4MAPPED(&v6)) {
    std::memcpy(&out, v6.s6_addr + 12, sizeof out);
    return true;
  }
  return false;
}

bool same_address(const sockaddr* a, const sockaddr* b) {
  in_addr a4{}, b4{};
  if (ipv4_of(a, a4) && ipv4_of(b, b4)) return a4.s_addr == b4.s_addr;
  if (a->sa_family != AF_INET6 || b->sa_family != AF_INET6) return false;
  return std::memcmp(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr,
                     &reinterpret_cast<const sockaddr_in6*>(b)->sin6_addr, sizeof(in6_addr)) == 0;
}

// The system's default, as a fresh socket gets it.
std::string system_congestion() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) KIZUNA_THROW(ErrorCode::SystemError, "socket failed: ", std::strerror(errno));
  std::string name;
  try {
    name = congestion_of(fd);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return name;
}

}  // namespace

CongestionPolicy::CongestionPolicy(std::string setting) : setting_(std::move(setting)) {}

std::string CongestionPolicy::wanted(const std::string& peer_host) const {
  if (setting_ == "system") return "";
  if (setting_ != "auto") return setting_;
  return host_is_local(peer_host) ? kLocalChoice : "";
}

void CongestionPolicy::prepare_listener(int fd) const {
  if (setting_ == "system") return;
  set(fd, setting_ == "auto" ? kLocalChoice : setting_);
}

void CongestionPolicy::prepare_connect(int fd, const std::string& peer_host) const {
  const std::string name = wanted(peer_host);
  if (!name.empty()) set(fd, name);
}

void CongestionPolicy::settle_accepted(int fd, const std::string& peer_host) const {
  if (setting_ != "auto") return;  // what it inherited is what is wanted
  std::string name = wanted(peer_host);
  if (name.empty()) name = system_congestion();
  if (congestion_of(fd) != name) set(fd, name);
}

void CongestionPolicy::set(int fd, const std::string& name) const {
  if (::setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name.c_str(), static_cast<socklen_t>(name.size())) == 0)
    return;
  const int err = errno;
  if (setting_ == "auto") {
    KIZUNA_LOG(Info) << "a TCP connection keeps congestion control '" << congestion_of(fd)
                     << "': the kernel refused '" << name << "' (" << std::strerror(err) << ")";
    return;
  }
  KIZUNA_THROW(ErrorCode::InvalidArgument, "KIZUNA_TCP_CONGESTION='", setting_,
               "': the kernel refused it (", std::strerror(err), "); this process may choose: ",
               first_line("/proc/sys/net/ipv4/tcp_allowed_congestion_control"),
               " (a privileged one also: ", first_line("/proc/sys/net/ipv4/tcp_available_congestion_control"),
               "); or auto, system");
}

std::string congestion_of(int fd) {
  char name[64] = {};
  socklen_t len = sizeof name - 1;
  if (::getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len) != 0)
    KIZUNA_THROW(ErrorCode::SystemError, "getsockopt(TCP_CONGESTION) failed: ", std::strerror(errno));
  return std::string(name, ::strnlen(name, len));
}

bool address_is_local(const sockaddr* address) {
  in_addr v4{};
  if (ipv4_of(address, v4) && (ntohl(v4.s_addr) >> 24) == 127) return true;
  if (address->sa_family == AF_INET6 &&
      IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr))
    return true;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return false;
  bool found = false;
  for (ifaddrs* a = list; a != nullptr && !found; a = a->ifa_next)
    if (a->ifa_addr != nullptr && (a->ifa_addr->sa_family == AF_INET || a->ifa_addr->sa_family == AF_INET6))
      found = same_address(a->ifa_addr, address);
  ::freeifaddrs(list);
  return found;
}

bool host_is_local(const std::string& host) {
  sockaddr_in a4{};
  a4.sin_family = AF_INET;
  if (::inet_pton(AF_INET, host.c_str(), &a4.sin_addr) == 1)
    return address_is_local(reinterpret_cast<const sockaddr*>(&a4));
  sockaddr_in6 a6{};
  a6.sin6_family = AF_INET6;
  if (::inet_pton(AF_INET6, host.c_str(), &a6.sin6_addr) == 1)
    return address_is_local(reinterpret_cast<const sockaddr*>(&a6));
  return false;
}

}  // namespace kizuna::transport
