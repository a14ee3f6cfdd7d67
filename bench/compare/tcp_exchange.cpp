// tcp-exchange: the floor under a 2-rank all-reduce of a small message over
// loopback TCP. Two processes share one connection (TCP_NODELAY); in each
// round both send `--bytes` bytes at once and then receive the other's,
// spinning on non-blocking receives, as the exchange step of any 2-rank
// all-reduce does, with no header, no reduction and no library around it.
// No all-reduce over this path can take less per call, so it is the
// yardstick for kizuna's and Open MPI's small-message times in the same run.
//
//   tcp-exchange --bytes 8 --rounds 20000 --reps 5
//
// Output: one line per repetition and a summary that scripts read:
//   rep 0 6.41 us
//   tcp-exchange bytes 8 median 6.38 us per exchange
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "tcp-exchange: %s: %s\n", what, std::strerror(errno));
  std::exit(1);
}

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr, "tcp-exchange: %s\nusage: tcp-exchange [--bytes N (1-65536)] [--rounds N] [--reps N]\n",
               why.c_str());
  std::exit(2);
}

void set_nodelay(int fd) {
  const int one = 1;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) die("TCP_NODELAY");
}

// A connected pair of loopback TCP sockets.
void connect_pair(int fds[2]) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  if (listener < 0) die("socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(listener, 1) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    die("listen");
  fds[0] = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fds[0] < 0 || ::connect(fds[0], reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) die("connect");
  fds[1] = ::accept(listener, nullptr, nullptr);
  if (fds[1] < 0) die("accept");
  ::close(listener);
  set_nodelay(fds[0]);
  set_nodelay(fds[1]);
}

void send_all(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) die("send");
    p += k;
    n -= static_cast<std::size_t>(k);
  }
}

void spin_recv_all(int fd, char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t k = ::recv(fd, p, n, MSG_DONTWAIT);
    if (k > 0) {
      p += k;
      n -= static_cast<std::size_t>(k);
    } else if (k == 0) {
      errno = ECONNRESET;
      die("recv");
    } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      die("recv");
    }
  }
}

// `rounds` exchanges on `fd`; seconds per exchange.
double exchange(int fd, std::size_t bytes, int rounds) {
  std::vector<char> out(bytes, 1), in(bytes);
  // Both ends start together: one exchange first.
  send_all(fd, out.data(), bytes);
  spin_recv_all(fd, in.data(), bytes);
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < rounds; ++r) {
    send_all(fd, out.data(), bytes);
    spin_recv_all(fd, in.data(), bytes);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / rounds;
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t bytes = 8;
  int rounds = 20000, reps = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) usage(a + " needs a value");
    const long v = std::strtol(argv[++i], nullptr, 10);
    if (a == "--bytes" && v >= 1 && v <= 65536)
      bytes = static_cast<std::size_t>(v);
    else if (a == "--rounds" && v >= 1)
      rounds = static_cast<int>(v);
    else if (a == "--reps" && v >= 1)
      reps = static_cast<int>(v);
    else
      usage("bad argument " + a + " " + argv[i]);
  }
  int fds[2];
  connect_pair(fds);
  const pid_t child = ::fork();
  if (child < 0) die("fork");
  const int fd = child == 0 ? fds[1] : fds[0];
  ::close(child == 0 ? fds[0] : fds[1]);
  std::vector<double> us;
  for (int rep = 0; rep < reps; ++rep) us.push_back(1e6 * exchange(fd, bytes, rounds));
  if (child == 0) std::_Exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "tcp-exchange: the other process failed\n");
    return 1;
  }
  for (int rep = 0; rep < reps; ++rep) std::printf("rep %d %.2f us\n", rep, us[rep]);
  std::vector<double> sorted = us;
  std::sort(sorted.begin(), sorted.end());
  std::printf("tcp-exchange bytes %zu median %.2f us per exchange\n", bytes, sorted[sorted.size() / 2]);
  return 0;
}
