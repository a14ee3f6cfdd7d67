// The congestion control of data connections (KIZUNA_TCP_CONGESTION): Reno
// within this host under auto, set before the connection exists; the
// system's under system and on connections from other hosts; a named
// algorithm when asked, and a clear error when the kernel refuses the name.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <thread>
#include <utility>

#include "kizuna/error.hpp"
#include "transport/tcp/congestion.hpp"
#include "transport/tcp/tcp_connect.hpp"

using namespace kizuna;
using namespace kizuna::transport;
using namespace std::chrono_literals;

namespace {

// A connected loopback pair {client, accepted}; closed by the destructor.
struct Pair {
  int client = -1, server = -1;
  Pair() {
    const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(listener, 1) == 0);
    socklen_t len = sizeof a;
    REQUIRE(::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    client = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(::connect(client, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    server = ::accept(listener, nullptr, nullptr);
    REQUIRE(server >= 0);
    ::close(listener);
  }
  ~Pair() {
    ::close(client);
    ::close(server);
  }
};

sockaddr_in ipv4(const char* text) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  REQUIRE(::inet_pton(AF_INET, text, &a.sin_addr) == 1);
  return a;
}

sockaddr_in6 ipv6(const char* text) {
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  REQUIRE(::inet_pton(AF_INET6, text, &a.sin6_addr) == 1);
  return a;
}

// The first IPv4 address of a non-loopback interface, or "" when there is none.
std::string interface_address() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return "";
  std::string out;
  for (ifaddrs* a = list; a != nullptr && out.empty(); a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    const in_addr addr = reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr;
    if ((ntohl(addr.s_addr) >> 24) == 127) continue;
    char text[INET_ADDRSTRLEN];
    ::inet_ntop(AF_INET, &addr, text, sizeof text);
    out = text;
  }
  ::freeifaddrs(list);
  return out;
}

// Whether this process may choose Reno: always on Linux, unless a sandbox
// (seccomp, another TCP stack) refuses TCP_CONGESTION altogether.
bool reno_allowed() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  const bool ok = ::setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, "reno", 4) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

TEST_CASE("loopback and this host's interface addresses are local, others are not", "[congestion]") {
  const sockaddr_in lo = ipv4("127.0.0.1"), lo_other = ipv4("127.5.6.7"), doc = ipv4("192.0.2.1");
  const sockaddr_in6 lo6 = ipv6("::1"), doc6 = ipv6("2001:db8::1"), mapped = ipv6("::ffff:127.0.0.1");
  CHECK(address_is_local(reinterpret_cast<const sockaddr*>(&lo)));
  CHECK(address_is_local(reinterpret_cast<const sockaddr*>(&lo_other)));
  CHECK(address_is_local(reinterpret_cast<const sockaddr*>(&lo6)));
  CHECK(address_is_local(reinterpret_cast<const sockaddr*>(&mapped)));
  // Documentation ranges (RFC 5737, RFC 3849): never assigned to a real interface.
  CHECK_FALSE(address_is_local(reinterpret_cast<const sockaddr*>(&doc)));
  CHECK_FALSE(address_is_local(reinterpret_cast<const sockaddr*>(&doc6)));
  const std::string own = interface_address();
  if (own.empty()) {
    WARN("no non-loopback IPv4 interface here; the interface case is not checked");
    return;
  }
  CAPTURE(own);
  const sockaddr_in a = ipv4(own.c_str());
  const sockaddr_in6 a6 = ipv6(("::ffff:" + own).c_str());
  CHECK(address_is_local(reinterpret_cast<const sockaddr*>(&a)));
  CHECK(address_is_local(reinterpret_cast<const sockaddr*>(&a6)));
}

TEST_CASE("what each setting wants on a connection", "[congestion]") {
  CHECK(CongestionPolicy("auto").wanted("127.0.0.1") == "reno");
  CHECK(CongestionPolicy("auto").wanted("::1") == "reno");
  CHECK(CongestionPolicy("auto").wanted("192.0.2.1") == "");
  CHECK(CongestionPolicy("auto").wanted("not-an-address") == "");
  CHECK(CongestionPolicy("system").wanted("127.0.0.1") == "");
  CHECK(CongestionPolicy("cubic").wanted("127.0.0.1") == "cubic");
  CHECK(CongestionPolicy("cubic").wanted("192.0.2.1") == "cubic");
  CHECK(host_is_local("127.0.0.1"));
  CHECK_FALSE(host_is_local("192.0.2.1"));
  CHECK_FALSE(host_is_local("localhost"));  // a name, not an address
}

TEST_CASE("a communicator's connections within this host run Reno from the start under auto, "
          "the system's under system", "[congestion]") {
  Pair fresh;
  const std::string system_choice = congestion_of(fresh.client);
  CAPTURE(system_choice);
  REQUIRE_FALSE(system_choice.empty());
  const bool reno = reno_allowed();
  if (!reno) WARN("this process may not choose Reno here: auto must keep the system's choice");
  for (const std::string setting : {"auto", "system", "reno"}) {
    CAPTURE(setting);
    if (setting == "reno" && !reno) continue;  // a refused name is an error, tested below
    TcpListener l0("127.0.0.1", setting), l1("127.0.0.1", setting);
    const TcpPeer p0{0, "127.0.0.1", l0.port(), 1}, p1{1, "127.0.0.1", l1.port(), 2};
    std::vector<int> fds1;
    std::thread rank1([&] { fds1 = connect_peers(l1, {9, 1, 2, 2}, {}, {p0}, std::chrono::steady_clock::now() + 20s); });
    const std::vector<int> fds0 = connect_peers(l0, {9, 0, 2, 1}, {p1}, {}, std::chrono::steady_clock::now() + 20s);
    rank1.join();
    REQUIRE(fds0[1] >= 0);
    REQUIRE(fds1[0] >= 0);
    const std::string expected = setting == "system" || !reno ? system_choice : "reno";
    CHECK(congestion_of(fds0[1]) == expected);  // connected
    CHECK(congestion_of(fds1[0]) == expected);  // accepted
    REQUIRE(::write(fds0[1], "ping", 4) == 4);
    char got[4] = {};
    REQUIRE(::read(fds1[0], got, 4) == 4);
    CHECK(std::memcmp(got, "ping", 4) == 0);
    ::close(fds0[1]);
    ::close(fds1[0]);
  }
}

TEST_CASE("under auto, an accepted connection from another host goes back to the system's choice",
          "[congestion]") {
  if (!reno_allowed()) {
    WARN("this process may not choose Reno here; nothing to put back");
    return;
  }
  Pair fresh;
  const std::string system_choice = congestion_of(fresh.client);
  Pair p;
  const CongestionPolicy policy("auto");
  policy.prepare_listener(p.server);  // as if inherited from the listener
  CHECK(congestion_of(p.server) == "reno");
  policy.settle_accepted(p.server, "192.0.2.1");
  CHECK(congestion_of(p.server) == system_choice);
  policy.settle_accepted(p.client, "127.0.0.1");
  CHECK(congestion_of(p.client) == "reno");
}

TEST_CASE("a congestion control the kernel refuses is an error naming the variable and the choices",
          "[congestion]") {
  try {
    TcpListener l("127.0.0.1", "nosuchcc");
    FAIL("a listener accepted an unknown congestion control");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::InvalidArgument);
    const std::string what = e.what();
    CAPTURE(what);
    CHECK(what.find("KIZUNA_TCP_CONGESTION='nosuchcc'") != std::string::npos);
    CHECK(what.find("may choose: ") != std::string::npos);
    CHECK(what.find("reno") != std::string::npos);
  }
}
