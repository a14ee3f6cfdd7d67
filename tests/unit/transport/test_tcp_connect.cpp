// Connection set-up: the handshake admits the expected peers and refuses
// strangers, other communicators and stale processes, without disturbing
// the real connections.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <iterator>
#include <thread>

#include "transport/tcp/tcp_connect.hpp"

using namespace kizuna;
using namespace kizuna::transport;
using namespace std::chrono_literals;

namespace {

int raw_connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  return fd;
}

// True when the server closed the connection (read returns 0 or an error).
bool closed_by_server(int fd) {
  char c;
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return ::read(fd, &c, 1) <= 0;
}

}  // namespace

TEST_CASE("strangers, other communicators and stale peers are refused, real peers connect",
          "[tcp_connect]") {
  TcpListener l0("127.0.0.1"), l1("127.0.0.1");
  const std::uint64_t comm = 77, inc0 = 1000, inc1 = 1001;
  const TcpPeer p0{0, "127.0.0.1", l0.port(), inc0}, p1{1, "127.0.0.1", l1.port(), inc1};

  // Intruders connect to rank 1's listener before rank 0 does.
  const int garbage = raw_connect(l1.port());
  REQUIRE(::write(garbage, "GET / HTTP/1.0\r\n\r\n......................", 40) == 40);
  const int other_comm = raw_connect(l1.port());
  const HelloBytes h1 = encode_hello({comm + 1, 0, 2, inc0});
  REQUIRE(::write(other_comm, h1.data(), h1.size()) == 32);
  const int stale = raw_connect(l1.port());
  const HelloBytes h2 = encode_hello({comm, 0, 2, inc0 + 99});
  REQUIRE(::write(stale, h2.data(), h2.size()) == 32);

  std::vector<int> fds0, fds1;
  std::thread rank1([&] { fds1 = connect_peers(l1, {comm, 1, 2, inc1}, {}, {p0}, std::chrono::steady_clock::now() + 20s); });
  fds0 = connect_peers(l0, {comm, 0, 2, inc0}, {p1}, {}, std::chrono::steady_clock::now() + 20s);
  rank1.join();
  CHECK(fds0[1] >= 0);
  CHECK(fds1[0] >= 0);
  CHECK(closed_by_server(garbage));
  CHECK(closed_by_server(other_comm));
  CHECK(closed_by_server(stale));
  for (int fd : {garbage, other_comm, stale, fds0[1], fds1[0]}) ::close(fd);
}

TEST_CASE("a peer that never comes is a Timeout naming it", "[tcp_connect]") {
  TcpListener l0("127.0.0.1");
  const TcpPeer absent{1, "127.0.0.1", 1, 5};  // port 1: nobody listens
  try {
    connect_peers(l0, {9, 0, 3, 4}, {absent}, {TcpPeer{2, "127.0.0.1", 0, 6}},
                  std::chrono::steady_clock::now() + 500ms);
    FAIL("no timeout");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::Timeout);
    const std::string what = e.what();
    CHECK(what.find("1 (connecting to 127.0.0.1:1)") != std::string::npos);
    CHECK(what.find("2 (waiting for it to connect)") != std::string::npos);
  }
}

TEST_CASE("listening on an address that is not ours is a clear error", "[tcp_connect]") {
  CHECK_THROWS_WITH(TcpListener("192.0.2.123"), Catch::Contains("cannot listen on 192.0.2.123:0"));
  CHECK_THROWS_WITH(TcpListener("not-an-ip"), Catch::Contains("is not an IP address"));
}

TEST_CASE("connections are closed on exec, so a child process cannot keep a dead rank's links open",
          "[tcp_connect]") {
  TcpListener l0("127.0.0.1"), l1("127.0.0.1");
  const TcpPeer p0{0, "127.0.0.1", l0.port(), 1}, p1{1, "127.0.0.1", l1.port(), 2};
  std::vector<int> fds1;
  std::thread rank1([&] { fds1 = connect_peers(l1, {5, 1, 2, 2}, {}, {p0}, std::chrono::steady_clock::now() + 20s); });
  const std::vector<int> fds0 = connect_peers(l0, {5, 0, 2, 1}, {p1}, {}, std::chrono::steady_clock::now() + 20s);
  rank1.join();
  CHECK((::fcntl(fds0[1], F_GETFD) & FD_CLOEXEC) != 0);
  CHECK((::fcntl(fds1[0], F_GETFD) & FD_CLOEXEC) != 0);
  ::close(fds0[1]);
  ::close(fds1[0]);
}

TEST_CASE("an accept that fails (out of descriptors) is retried, not the end of accepting", "[tcp_connect]") {
  TcpListener l0("127.0.0.1"), l1("127.0.0.1");
  const TcpPeer p0{0, "127.0.0.1", l0.port(), 1}, p1{1, "127.0.0.1", l1.port(), 2};
  // Rank 1 connects; rank 0 accepts while this process has no descriptor
  // left, until a moment later.
  std::vector<int> fds1;
  std::thread rank1([&] { fds1 = connect_peers(l1, {6, 1, 2, 2}, {p0}, {}, std::chrono::steady_clock::now() + 20s); });
  std::this_thread::sleep_for(300ms);  // its connection waits in rank 0's backlog
  // Few descriptors to use up: the limit lowered to what is open now, plus a few.
  rlimit saved{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &saved) == 0);
  rlimit low = saved;
  low.rlim_cur = std::min<rlim_t>(saved.rlim_cur, static_cast<rlim_t>(std::distance(
                                                      std::filesystem::directory_iterator("/proc/self/fd"),
                                                      std::filesystem::directory_iterator{})) + 16);
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &low) == 0);
  std::vector<int> filler;
  for (int fd; (fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) filler.push_back(fd);
  REQUIRE(errno == EMFILE);
  const auto start = std::chrono::steady_clock::now();
  std::thread release([&] {
    std::this_thread::sleep_for(300ms);
    for (int fd : filler) ::close(fd);
  });
  const std::vector<int> fds0 = connect_peers(l0, {6, 0, 2, 1}, {}, {p1}, start + 10s);
  release.join();
  rank1.join();
  ::setrlimit(RLIMIT_NOFILE, &saved);
  CHECK(fds0[1] >= 0);
  CHECK(fds1[0] >= 0);
  CHECK(std::chrono::steady_clock::now() - start >= 250ms);  // it waited for descriptors
  ::close(fds0[1]);
  ::close(fds1[0]);
}
