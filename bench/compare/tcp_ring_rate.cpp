// tcp-ring-rate: what loopback TCP carries when every process sends and
// receives at once, the traffic pattern of a ring all-reduce. It is the
// ceiling a TCP ring can approach, measured on the same machine in the
// same run as the collectives it bounds.
//
//   tcp-ring-rate --procs 2 --seconds 2          full duplex between two processes
//   tcp-ring-rate --procs 4                      a ring of four: p -> p+1, each at once
//   tcp-ring-rate --congestion reno              under Reno, as kizuna's connections within
//                                                a host are (KIZUNA_TCP_CONGESTION=auto)
//   tcp-ring-rate --io single                    one thread per process, non-blocking
//                                                calls interleaved, as a kizuna rank
//   tcp-ring-rate --duplex one                   2 processes, both directions on one
//                                                connection, as on a kizuna link
//   tcp-ring-rate --block 67108864 --recv-block 1048576
//                                                send from memory, receive into the caches
//                                                (the other way round with the sizes swapped)
//   tcp-ring-rate --recv spin --recv-bytes 262144
//                                                the receiver thread retries non-blocking
//                                                receives of 256 KiB at once (poll: sleeps
//                                                in poll() when the socket is empty)
//
// The parent opens one loopback connection per ring edge (p -> p+1 mod n),
// forks n processes and lets them start together. Process p has a sender
// thread writing `--block` bytes at a time to p+1 and a receiver thread
// reading from p-1 into a buffer of `--recv-block` bytes (default: the
// block), one receive after the other through it, both blocking, as long
// as the run lasts. So with a block larger than the caches (64 MiB) what is
// sent comes from memory and what is received goes to memory, as a large
// all-reduce's data does; with the default of 1 MiB both stay in the
// caches. Each receiver
// counts the bytes that arrive between the end of a warm-up (a quarter of
// the run) and the end; rate = bytes / that time, in GB/s (1e9 B/s). With
// two processes the two edges are the two directions of one full-duplex
// path. --io single and --duplex one change those two choices, to measure
// what each costs; --recv and --recv-bytes change how the receiver thread
// waits and how much it asks for per call; --recv-block where it writes.
//
// Output, one line per edge and a summary that scripts read:
//   edge 0->1 2.041 GB/s
//   edge 1->0 2.017 GB/s
//   tcp-ring-rate procs 2 min 2.017 mean 2.029 GB/s per direction
// (with --congestion, the summary line ends "congestion NAME", then
// "io single", "duplex one", "recv spin|poll BYTES" and "recv-block BYTES"
// when asked for).
// Exit status: 0 done, 1 a socket or process failure, 2 bad usage.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "tcp-ring-rate: %s: %s\n", what, std::strerror(errno));
  std::exit(1);
}

// Sets TCP congestion control `name` on `fd` ("" leaves the system's).
void set_congestion(int fd, const std::string& name) {
  if (name.empty()) return;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name.c_str(), static_cast<socklen_t>(name.size())) != 0) {
    std::fprintf(stderr, "tcp-ring-rate: congestion control '%s': %s\n", name.c_str(), std::strerror(errno));
    std::exit(2);
  }
}

// A connected loopback pair: {client end, accepted end}, both under
// congestion control `congestion`, set before the connection exists (as
// kizuna does: a socket switched from BBR once established kept much of
// BBR's slowness on loopback).
std::pair<int, int> loopback_pair(const std::string& congestion) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  if (listener < 0) die("socket");
  set_congestion(listener, congestion);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) die("bind");
  if (::listen(listener, 1) != 0) die("listen");
  socklen_t len = sizeof a;
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len);
  const int client = ::socket(AF_INET, SOCK_STREAM, 0);
  set_congestion(client, congestion);
  if (::connect(client, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) die("connect");
  const int server = ::accept(listener, nullptr, nullptr);
  if (server < 0) die("accept");
  ::close(listener);
  return {client, server};
}

// Counts the bytes received between the end of the warm-up and the end of
// the run; rate() is bytes per second over that time.
class Counter {
 public:
  Counter(Clock::time_point warm, Clock::time_point end) : warm_(warm), end_(end) {}
  void add(std::size_t n) {
    const auto now = Clock::now();
    if (!counting_ && now >= warm_) counting_ = true, from_ = now;
    else if (counting_ && !finished_) {
      counted_ += n;
      if (now >= end_) finished_ = true, until_ = now;
    }
  }
  double rate() {
    if (!finished_) until_ = Clock::now();
    const double elapsed = std::chrono::duration<double>(until_ - from_).count();
    return elapsed > 0 ? static_cast<double>(counted_) / elapsed : 0.0;
  }

 private:
  Clock::time_point warm_, end_, from_{}, until_{};
  std::uint64_t counted_ = 0;
  bool counting_ = false, finished_ = false;
};

// How the receiver thread of --io threads waits for data (in the order of
// --recv's names, kRecvWaitNames).
enum class RecvWait { Block, Spin, Poll };
constexpr const char* kRecvWaitNames[] = {"block", "spin", "poll"};

// A thread per direction: `block` bytes per blocking send; receives of up
// to `recv_bytes`, blocking, or non-blocking and retried at once (Spin) or
// after poll() says the socket is readable (Poll).
double run_threads(int out, int in, Clock::time_point end, Counter& counter, std::size_t block,
                   std::size_t recv_block, RecvWait wait, std::size_t recv_bytes) {
  std::thread sender([&] {
    std::vector<char> buf(block, 1);
    while (Clock::now() < end) {
      std::size_t done = 0;
      while (done < block) {
        const ssize_t n = ::send(out, buf.data() + done, block - done, MSG_NOSIGNAL);
        if (n < 0) {
          if (errno == EINTR) continue;
          die("send");
        }
        done += static_cast<std::size_t>(n);
      }
    }
    ::shutdown(out, SHUT_WR);
  });
  std::vector<char> buf(recv_block);
  std::size_t at = 0;  // where in `buf` the next receive writes
  for (;;) {
    const ssize_t n = ::recv(in, buf.data() + at, std::min(recv_bytes, recv_block - at),
                             wait == RecvWait::Block ? 0 : MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (wait == RecvWait::Poll) {
          pollfd p{in, POLLIN, 0};
          ::poll(&p, 1, 10);
        }
        continue;
      }
      die("recv");
    }
    if (n == 0) break;
    at = (at + static_cast<std::size_t>(n)) % recv_block;
    counter.add(static_cast<std::size_t>(n));
  }
  sender.join();
  return counter.rate();
}

// One thread, non-blocking calls interleaved, as a kizuna rank's executor
// drives its links: up to 512 KiB per send and 256 KiB per receive (its
// reduce staging), poll() when neither moves.
double run_single(int out, int in, Clock::time_point end, Counter& counter, std::size_t block,
                  std::size_t recv_block) {
  ::fcntl(out, F_SETFL, ::fcntl(out, F_GETFL) | O_NONBLOCK);
  ::fcntl(in, F_SETFL, ::fcntl(in, F_GETFL) | O_NONBLOCK);
  std::vector<char> send_buf(block, 1), recv_buf(recv_block);
  std::size_t sent = 0;      // of the current block
  std::size_t received = 0;  // of the receive buffer
  bool sending = true;
  for (;;) {
    bool moved = false;
    if (sending && Clock::now() >= end) sending = false, ::shutdown(out, SHUT_WR);
    if (sending) {
      const ssize_t n = ::send(out, send_buf.data() + sent, std::min<std::size_t>(block - sent, 512 << 10), MSG_NOSIGNAL);
      if (n > 0) sent = (sent + static_cast<std::size_t>(n)) % block, moved = true;
      else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) die("send");
    }
    const ssize_t n = ::recv(in, recv_buf.data() + received, std::min<std::size_t>(recv_block - received, 256 << 10), 0);
    if (n == 0) break;
    if (n > 0) {
      received = (received + static_cast<std::size_t>(n)) % recv_block;
      counter.add(static_cast<std::size_t>(n));
      moved = true;
    }
    else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) die("recv");
    if (!moved) {
      pollfd fds[2] = {{in, POLLIN, 0}, {out, static_cast<short>(sending ? POLLOUT : 0), 0}};
      ::poll(fds, 2, 10);
    }
  }
  return counter.rate();
}

// Process p: send to `out` and receive from `in` for `seconds`, starting at
// the shared `start` time; returns the receive rate in bytes per second.
double run_process(int out, int in, Clock::time_point start, double seconds, std::size_t block,
                   std::size_t recv_block, bool single, RecvWait wait, std::size_t recv_bytes) {
  const auto warm = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds / 4));
  const auto end = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  std::this_thread::sleep_until(start);
  Counter counter(warm, end);
  return single ? run_single(out, in, end, counter, block, recv_block)
                : run_threads(out, in, end, counter, block, recv_block, wait, recv_bytes);
}

long parse(const char* flag, const char* text, long min, long max) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (!*text || *end || v < min || v > max) {
    std::fprintf(stderr, "tcp-ring-rate: %s='%s' is not an integer in [%ld, %ld]\n", flag, text, min, max);
    std::exit(2);
  }
  return v;
}

// The position of `text` among `names` (exits 2, saying what is accepted,
// when it is none of them).
template <std::size_t N>
int choose(const char* flag, const std::string& text, const char* const (&names)[N]) {
  std::string accepted;
  for (std::size_t i = 0; i < N; ++i) {
    if (text == names[i]) return static_cast<int>(i);
    accepted += (i ? ", " : "") + std::string(names[i]);
  }
  std::fprintf(stderr, "tcp-ring-rate: %s='%s' is not one of %s\n", flag, text.c_str(), accepted.c_str());
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  int procs = 2;
  double seconds = 2.0;
  std::size_t block = 1 << 20;
  std::size_t recv_block = 0;  // --recv-block (0: --block)
  std::string congestion;
  bool single = false;      // --io single
  bool one_socket = false;  // --duplex one
  RecvWait wait = RecvWait::Block;  // --recv
  std::size_t recv_bytes = 0;       // --recv-bytes (0: --block)
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf(
          "usage: tcp-ring-rate [--procs N] [--seconds S] [--block BYTES] [--recv-block BYTES]\n"
          "                     [--congestion NAME]\n"
          "                     [--io threads|single] [--duplex two|one]\n"
          "                     [--recv block|spin|poll] [--recv-bytes BYTES]\n\n"
          "Loopback TCP rate with N processes in a ring, each sending to the next and receiving\n"
          "from the previous at once (N=2: full duplex). Defaults: 2 processes, 2 s, 1 MiB writes,\n"
          "the system's TCP congestion control (--congestion reno: what kizuna uses within a host).\n"
          "Each receiver writes one receive after the other through a buffer of --recv-block bytes\n"
          "(default --block): 64 MiB blocks come from and go to memory, 1 MiB ones stay in cache.\n"
          "--io threads (default): a sender and a receiver thread per process, blocking calls;\n"
          "--io single: one thread, non-blocking calls interleaved (a kizuna rank's executor).\n"
          "--duplex one (2 processes only): both directions on one connection, as kizuna's links\n"
          "are, instead of a connection per direction.\n"
          "--recv (with --io threads): block (default), spin (non-blocking, retried at once) or poll\n"
          "(non-blocking, poll() when empty); --recv-bytes: bytes asked per receive (default --block;\n"
          "never more than what is left of the receive buffer before it wraps).\n");
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "tcp-ring-rate: %s needs a value (or unknown option)\n", a.c_str());
      return 2;
    }
    if (a == "--procs") procs = static_cast<int>(parse("--procs", argv[++i], 2, 256));
    else if (a == "--seconds") seconds = static_cast<double>(parse("--seconds", argv[++i], 1, 3600));
    else if (a == "--block") block = static_cast<std::size_t>(parse("--block", argv[++i], 1, 1 << 30));
    else if (a == "--recv-block") recv_block = static_cast<std::size_t>(parse("--recv-block", argv[++i], 1, 1 << 30));
    else if (a == "--congestion") congestion = argv[++i];
    else if (a == "--io") single = choose("--io", argv[++i], {"threads", "single"}) == 1;
    else if (a == "--recv") wait = static_cast<RecvWait>(choose("--recv", argv[++i], kRecvWaitNames));
    else if (a == "--recv-bytes") recv_bytes = static_cast<std::size_t>(parse("--recv-bytes", argv[++i], 1, 1 << 30));
    else if (a == "--duplex") one_socket = choose("--duplex", argv[++i], {"two", "one"}) == 1;
    else {
      std::fprintf(stderr, "tcp-ring-rate: unknown option '%s'\n", a.c_str());
      return 2;
    }
  }

  if (single && (wait != RecvWait::Block || recv_bytes != 0)) {
    std::fprintf(stderr, "tcp-ring-rate: --recv and --recv-bytes apply to --io threads\n");
    return 2;
  }
  const bool recv_default = wait == RecvWait::Block && recv_bytes == 0;
  if (recv_bytes == 0) recv_bytes = block;
  const bool recv_block_default = recv_block == 0;
  if (recv_block == 0) recv_block = block;
  // Edge p: p -> p+1; process p sends on edges[p].first, receives on edges[p-1].second.
  std::vector<std::pair<int, int>> edges;
  if (one_socket && procs != 2) {
    std::fprintf(stderr, "tcp-ring-rate: --duplex one needs --procs 2\n");
    return 2;
  }
  for (int p = 0; p < (one_socket ? 1 : procs); ++p) edges.push_back(loopback_pair(congestion));
  std::vector<int> results(procs);
  std::vector<pid_t> pids;
  const auto start = Clock::now() + std::chrono::milliseconds(200);
  for (int p = 0; p < procs; ++p) {
    int fds[2];
    if (::pipe(fds) != 0) die("pipe");
    const pid_t pid = ::fork();
    if (pid < 0) die("fork");
    if (pid == 0) {
      ::close(fds[0]);
      const int out = one_socket ? (p == 0 ? edges[0].first : edges[0].second) : edges[p].first;
      const int in = one_socket ? out : edges[(p + procs - 1) % procs].second;
      for (int q = 0; q < procs; ++q) {
        if (edges[q].first != out) ::close(edges[q].first);
        if (edges[q].second != in) ::close(edges[q].second);
      }
      const double rate = run_process(out, in, start, seconds, block, recv_block, single, wait, recv_bytes);
      if (::write(fds[1], &rate, sizeof rate) != sizeof rate) ::_exit(1);
      ::_exit(0);
    }
    ::close(fds[1]);
    results[p] = fds[0];
    pids.push_back(pid);
  }
  for (auto& [a, b] : edges) ::close(a), ::close(b);

  std::vector<double> rates(procs, 0.0);
  bool ok = true;
  for (int p = 0; p < procs; ++p) {
    double rate = 0;
    ok = ::read(results[p], &rate, sizeof rate) == sizeof rate && ok;
    rates[p] = rate;
    ::close(results[p]);
  }
  for (const pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  if (!ok) {
    std::fprintf(stderr, "tcp-ring-rate: a process failed\n");
    return 1;
  }
  double sum = 0;
  for (int p = 0; p < procs; ++p) {
    // Process p received edge p-1 -> p.
    const int from = (p + procs - 1) % procs;
    std::printf("edge %d->%d %.3f GB/s\n", from, p, rates[p] / 1e9);
    sum += rates[p];
  }
  std::string recv_words;
  if (!recv_default)
    recv_words = std::string(" recv ") + kRecvWaitNames[static_cast<int>(wait)] + " " + std::to_string(recv_bytes);
  if (!recv_block_default) recv_words += " recv-block " + std::to_string(recv_block);
  std::printf("tcp-ring-rate procs %d min %.3f mean %.3f GB/s per direction%s%s%s%s%s\n", procs,
              *std::min_element(rates.begin(), rates.end()) / 1e9, sum / procs / 1e9,
              congestion.empty() ? "" : " congestion ", congestion.c_str(), single ? " io single" : "",
              one_socket ? " duplex one" : "", recv_words.c_str());
  return 0;
}
