#include "transport/tcp/interface.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>

#include "core/check.hpp"

namespace kizuna::transport {
namespace {

std::string address_of_interface(const std::string& ifname) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0)
    KIZUNA_THROW(ErrorCode::SystemError, "getifaddrs failed: ", std::strerror(errno));
  std::string found;
  std::set<std::string> names;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    names.insert(a->ifa_name);
    if (found.empty() && ifname == a->ifa_name) {
      char text[INET_ADDRSTRLEN];
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, text, sizeof text);
      found = text;
    }
  }
  ::freeifaddrs(list);
  if (found.empty()) {
    std::string available;
    for (const auto& n : names) available += (available.empty() ? "" : ", ") + n;
    KIZUNA_THROW(ErrorCode::InvalidArgument, "KIZUNA_SOCKET_IFNAME='", ifname,
                 "': no such interface with an IPv4 address; available: ", available);
  }
  return found;
}

}  // namespace

std::string local_address_for(const std::string& remote_host, const std::string& ifname) {
  if (!ifname.empty()) return address_of_interface(ifname);
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(remote_host.c_str(), "9", &hints, &res);
  if (rc != 0)
    KIZUNA_THROW(ErrorCode::SystemError, "cannot resolve the store host '", remote_host,
                 "': ", ::gai_strerror(rc));
  // A UDP "connect" sends nothing; it only asks the kernel for the route.
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  std::string out;
  if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_in local{};
    socklen_t len = sizeof local;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char text[INET_ADDRSTRLEN];
      ::inet_ntop(AF_INET, &local.sin_addr, text, sizeof text);
      out = text;
    }
  }
  const int err = errno;
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(res);
  if (out.empty())
    KIZUNA_THROW(ErrorCode::SystemError, "no route to the store host '", remote_host,
                 "': ", std::strerror(err), "; set KIZUNA_SOCKET_IFNAME");
  return out;
}

}  // namespace kizuna::transport
