// kizuna-fault-proxy: a transparent TCP proxy that delays, jitters and
// stalls what it forwards, for the network-fault tests (tests/faults).
//
// The kernels these tests run on have no netem qdisc, so delay and stalls
// are made here. The test runs one proxy inside each network namespace and
// an nftables rule there that redirects every TCP connection leaving for
// the other namespace to the proxy's port:
//
//   meta mark != MARK ip daddr OTHER tcp dport != 0 redirect to :PORT
//
// The proxy reads the connection's original destination back
// (SO_ORIGINAL_DST), connects there itself with SO_MARK = MARK (so its own
// connection is not redirected again) and forwards both directions. Every
// chunk it reads is held until now + delay + a jitter drawn uniformly from
// [-jitter, +jitter], never before the chunk read before it (bytes stay in
// order); during a stall (the first STALL ms of every EVERY ms) nothing is
// written at all. End-of-file travels in order like data; a reset closes
// both sides at once.
//
//   kizuna-fault-proxy --port P --mark M [--delay-ms D] [--jitter-ms J]
//                      [--stall-every-ms EVERY --stall-ms STALL] [--seed S]
//                      [--lifetime-s SECONDS]
//
// Prints "proxy listening on port P", then runs until SIGTERM or SIGINT
// (or SECONDS, default 600, have passed), and prints what it forwarded.
// Single-threaded: one poll() loop.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <vector>

#ifndef SO_ORIGINAL_DST
#define SO_ORIGINAL_DST 80  // linux/netfilter_ipv4.h
#endif

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct Options {
  int port = 0;
  unsigned mark = 0;
  int delay_ms = 0;
  int jitter_ms = 0;
  int stall_every_ms = 0;
  int stall_ms = 0;
  unsigned seed = 1;
  int lifetime_s = 600;  // then it exits: a proxy whose test was killed does not linger
};

constexpr std::size_t kReadBytes = 64 * 1024;
constexpr std::size_t kQueueCap = 4 * 1024 * 1024;  // per direction: stop reading above this

struct Chunk {
  std::vector<char> data;  // empty: end-of-file
  std::size_t done = 0;
  Clock::time_point release;
};

// One direction of a connection: read from `from`, written to `to`.
struct Direction {
  int from = -1;
  int to = -1;
  std::deque<Chunk> queue;
  std::size_t queued = 0;
  bool read_eof = false;
  Clock::time_point last_release{};
};

struct Connection {
  int client = -1;
  int upstream = -1;
  Direction up;    // client -> upstream
  Direction down;  // upstream -> client
  bool dead = false;
};

volatile sig_atomic_t g_stop = 0;
struct Stats {
  long long connections = 0, bytes = 0, stalls = 0, resets = 0;
} g_stats;

void on_term(int) { g_stop = 1; }

void nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

class Proxy {
 public:
  explicit Proxy(const Options& o) : o_(o), rng_(o.seed), t0_(Clock::now()) {}

  int listen_on() {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int one = 1;
    ::setsockopt(listener_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(static_cast<std::uint16_t>(o_.port));
    if (::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(listener_, 128) != 0) {
      std::fprintf(stderr, "kizuna-fault-proxy: cannot listen on port %d: %s\n", o_.port, std::strerror(errno));
      return 1;
    }
    nonblocking(listener_);
    std::printf("proxy listening on port %d\n", o_.port);
    std::fflush(stdout);
    return 0;
  }

  void run() {
    std::vector<pollfd> fds;
    const auto end = t0_ + std::chrono::seconds(o_.lifetime_s);
    while (!g_stop) {
      const auto now = Clock::now();
      if (now >= end) break;
      fds.clear();
      fds.push_back({listener_, POLLIN, 0});
      auto wake = now + milliseconds(50);
      for (auto& c : conns_) {
        if (c->dead) continue;
        short ce = 0, ue = 0;
        want(c->up, now, ce, ue, wake);
        want(c->down, now, ue, ce, wake);
        fds.push_back({c->client, ce, 0});
        fds.push_back({c->upstream, ue, 0});
      }
      const int timeout =
          static_cast<int>(std::max<long long>(0, std::chrono::duration_cast<milliseconds>(wake - now).count()));
      if (::poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) break;
      const auto after = Clock::now();
      std::size_t at = 1;
      for (auto& c : conns_) {
        if (c->dead) continue;
        const bool error = ((fds[at].revents | fds[at + 1].revents) & (POLLERR | POLLNVAL)) != 0;
        at += 2;
        pump(*c, c->up, after);
        if (!c->dead) pump(*c, c->down, after);
        // An error the reads and writes did not meet (nothing left to read
        // or due to write) would wake poll() at once forever: end it here.
        if (!c->dead && error && (pending_error(c->client) || pending_error(c->upstream))) kill(*c);
      }
      if (fds[0].revents & POLLIN) accept_all();
      std::erase_if(conns_, [](const std::unique_ptr<Connection>& c) { return c->dead; });
    }
    std::printf("proxy: %lld connections, %lld bytes forwarded, %lld stalls, %lld resets\n", g_stats.connections,
                g_stats.bytes, g_stats.stalls, g_stats.resets);
  }

 private:
  bool stalled(Clock::time_point now) {
    if (o_.stall_every_ms <= 0 || o_.stall_ms <= 0) return false;
    const auto in_period = std::chrono::duration_cast<milliseconds>(now - t0_).count() % o_.stall_every_ms;
    const long long period = std::chrono::duration_cast<milliseconds>(now - t0_).count() / o_.stall_every_ms;
    if (in_period < o_.stall_ms) {
      if (period != last_stall_) ++g_stats.stalls, last_stall_ = period;
      return true;
    }
    return false;
  }

  Clock::time_point stall_end(Clock::time_point now) const {
    const auto in_period = std::chrono::duration_cast<milliseconds>(now - t0_).count() % o_.stall_every_ms;
    return now + milliseconds(o_.stall_ms - in_period);
  }

  // The events a direction needs on its two sockets, and when to look again.
  void want(const Direction& d, Clock::time_point now, short& from_events, short& to_events,
            Clock::time_point& wake) {
    if (!d.read_eof && d.queued < kQueueCap) from_events |= POLLIN;
    if (d.queue.empty()) return;
    const Chunk& head = d.queue.front();
    if (stalled(now)) {
      wake = std::min(wake, stall_end(now));
    } else if (head.release <= now) {
      to_events |= POLLOUT;
    } else {
      wake = std::min(wake, head.release);
    }
  }

  void accept_all() {
    for (;;) {
      const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) return;
      sockaddr_in dst{};
      socklen_t len = sizeof dst;
      if (::getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, &dst, &len) != 0) {
        std::fprintf(stderr, "kizuna-fault-proxy: no original destination: %s\n", std::strerror(errno));
        ::close(fd);
        continue;
      }
      const int up = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      ::setsockopt(up, SOL_SOCKET, SO_MARK, &o_.mark, sizeof o_.mark);
      timeval limit{2, 0};  // a local veth peer answers at once; this only stops a hang
      ::setsockopt(up, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
      if (::connect(up, reinterpret_cast<sockaddr*>(&dst), sizeof dst) != 0) {
        reset_close(fd);
        ::close(up);
        continue;
      }
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      ::setsockopt(up, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      nonblocking(fd);
      nonblocking(up);
      auto c = std::make_unique<Connection>();
      c->client = fd;
      c->upstream = up;
      c->up.from = fd, c->up.to = up;
      c->down.from = up, c->down.to = fd;
      conns_.push_back(std::move(c));
      ++g_stats.connections;
    }
  }

  Clock::time_point release_time(Direction& d, Clock::time_point now) {
    long long ms = o_.delay_ms;
    if (o_.jitter_ms > 0) ms += std::uniform_int_distribution<int>(-o_.jitter_ms, o_.jitter_ms)(rng_);
    const auto t = std::max(now + milliseconds(std::max(0LL, ms)), d.last_release);
    d.last_release = t;
    return t;
  }

  // Reads what is there, writes what is due; a socket error resets both sides.
  void pump(Connection& c, Direction& d, Clock::time_point now) {
    while (!d.read_eof && d.queued < kQueueCap) {
      Chunk chunk;
      chunk.data.resize(kReadBytes);
      const ssize_t n = ::read(d.from, chunk.data.data(), chunk.data.size());
      if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) break;
        return kill(c);
      }
      chunk.data.resize(static_cast<std::size_t>(n));
      if (n == 0) d.read_eof = true;
      chunk.release = release_time(d, now);
      d.queued += chunk.data.size();
      d.queue.push_back(std::move(chunk));
    }
    if (stalled(now)) return;
    while (!d.queue.empty() && d.queue.front().release <= now) {
      Chunk& head = d.queue.front();
      if (head.data.empty()) {  // end-of-file, in order
        ::shutdown(d.to, SHUT_WR);
        d.queue.pop_front();
        if (c.up.read_eof && c.down.read_eof && c.up.queue.empty() && c.down.queue.empty()) close(c);
        return;
      }
      const ssize_t n = ::send(d.to, head.data.data() + head.done, head.data.size() - head.done, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) return;
        return kill(c);
      }
      head.done += static_cast<std::size_t>(n);
      g_stats.bytes += n;
      if (head.done < head.data.size()) return;
      d.queued -= head.data.size();
      d.queue.pop_front();
    }
  }

  static bool pending_error(int fd) {
    int err = 0;
    socklen_t len = sizeof err;
    return ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err != 0;
  }

  static void reset_close(int fd) {
    linger off{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &off, sizeof off);
    ::close(fd);
  }

  void kill(Connection& c) {
    ++g_stats.resets;
    reset_close(c.client);
    reset_close(c.upstream);
    c.dead = true;
  }

  void close(Connection& c) {
    ::close(c.client);
    ::close(c.upstream);
    c.dead = true;
  }

  Options o_;
  std::mt19937 rng_;
  Clock::time_point t0_;
  long long last_stall_ = -1;
  int listener_ = -1;
  std::vector<std::unique_ptr<Connection>> conns_;
};

[[noreturn]] void usage(const std::string& problem) {
  std::fprintf(stderr,
               "kizuna-fault-proxy: %s\n"
               "usage: kizuna-fault-proxy --port P --mark M [--delay-ms D] [--jitter-ms J]\n"
               "                          [--stall-every-ms EVERY --stall-ms STALL] [--seed S]\n"
               "                          [--lifetime-s SECONDS]\n",
               problem.c_str());
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) usage(arg + " needs a value");
    const long v = std::strtol(argv[++i], nullptr, 0);
    if (v < 0) usage(arg + " must not be negative");
    if (arg == "--port") o.port = static_cast<int>(v);
    else if (arg == "--mark") o.mark = static_cast<unsigned>(v);
    else if (arg == "--delay-ms") o.delay_ms = static_cast<int>(v);
    else if (arg == "--jitter-ms") o.jitter_ms = static_cast<int>(v);
    else if (arg == "--stall-every-ms") o.stall_every_ms = static_cast<int>(v);
    else if (arg == "--stall-ms") o.stall_ms = static_cast<int>(v);
    else if (arg == "--seed") o.seed = static_cast<unsigned>(v);
    else if (arg == "--lifetime-s") o.lifetime_s = static_cast<int>(v);
    else usage("unknown option '" + arg + "'");
  }
  if (o.port <= 0 || o.mark == 0) usage("--port and --mark are required");
  if (o.stall_ms > 0 && o.stall_ms >= o.stall_every_ms) usage("--stall-ms must be below --stall-every-ms");
  struct sigaction sa{};
  sa.sa_handler = on_term;
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
  Proxy proxy(o);
  if (proxy.listen_on() != 0) return 1;
  proxy.run();
  return 0;
}
