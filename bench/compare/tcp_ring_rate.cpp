// tcp-ring-rate: what loopback TCP carries when every process sends and
// receives at once, the traffic pattern of a ring all-reduce. It is the
// ceiling a TCP ring can approach, measured on the same machine in the
// same run as the collectives it bounds.
//
//   tcp-ring-rate --procs 2 --seconds 2          full duplex between two processes
//   tcp-ring-rate --procs 4                      a ring of four: p -> p+1, each at once
//   tcp-ring-rate --congestion reno              under Reno, as kizuna's connections within
//                                                a host are (KIZUNA_TCP_CONGESTION=auto)
//
// The parent opens one loopback connection per ring edge (p -> p+1 mod n),
// forks n processes and lets them start together. Process p has a sender
// thread writing `--block` bytes at a time to p+1 and a receiver thread
// reading from p-1, both blocking, as long as the run lasts. Each receiver
// counts the bytes that arrive between the end of a warm-up (a quarter of
// the run) and the end; rate = bytes / that time, in GB/s (1e9 B/s). With
// two processes the two edges are the two directions of one full-duplex
// path.
//
// Output, one line per edge and a summary that scripts read:
//   edge 0->1 2.041 GB/s
//   edge 1->0 2.017 GB/s
//   tcp-ring-rate procs 2 min 2.017 mean 2.029 GB/s per direction
// (with --congestion, the summary line ends "congestion NAME").
// Exit status: 0 done, 1 a socket or process failure, 2 bad usage.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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
// kizuna does: a socket switched from BBR afterwards keeps its pacing).
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

// Process p: send to `out` and receive from `in` for `seconds`, starting at
// the shared `start` time; returns the receive rate in bytes per second.
double run_process(int out, int in, Clock::time_point start, double seconds, std::size_t block) {
  const auto warm = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds / 4));
  const auto end = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  std::this_thread::sleep_until(start);
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
  std::vector<char> buf(block);
  std::uint64_t counted = 0;
  Clock::time_point counting_from{}, counted_until{};
  bool counting = false, finished = false;
  for (;;) {
    const ssize_t n = ::recv(in, buf.data(), block, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      die("recv");
    }
    if (n == 0) break;
    const auto now = Clock::now();
    if (!counting && now >= warm) counting = true, counting_from = now;
    else if (counting && !finished) {
      counted += static_cast<std::uint64_t>(n);
      if (now >= end) finished = true, counted_until = now;
    }
  }
  sender.join();
  if (!finished) counted_until = Clock::now();
  const double elapsed = std::chrono::duration<double>(counted_until - counting_from).count();
  return elapsed > 0 ? static_cast<double>(counted) / elapsed : 0.0;
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

}  // namespace

int main(int argc, char** argv) {
  int procs = 2;
  double seconds = 2.0;
  std::size_t block = 1 << 20;
  std::string congestion;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf(
          "usage: tcp-ring-rate [--procs N] [--seconds S] [--block BYTES] [--congestion NAME]\n\n"
          "Loopback TCP rate with N processes in a ring, each sending to the next and receiving\n"
          "from the previous at once (N=2: full duplex). Defaults: 2 processes, 2 s, 1 MiB writes,\n"
          "the system's TCP congestion control (--congestion reno: what kizuna uses within a host).\n");
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "tcp-ring-rate: %s needs a value (or unknown option)\n", a.c_str());
      return 2;
    }
    if (a == "--procs") procs = static_cast<int>(parse("--procs", argv[++i], 2, 256));
    else if (a == "--seconds") seconds = static_cast<double>(parse("--seconds", argv[++i], 1, 3600));
    else if (a == "--block") block = static_cast<std::size_t>(parse("--block", argv[++i], 1, 1 << 30));
    else if (a == "--congestion") congestion = argv[++i];
    else {
      std::fprintf(stderr, "tcp-ring-rate: unknown option '%s'\n", a.c_str());
      return 2;
    }
  }

  // Edge p: p -> p+1; process p sends on edges[p].first, receives on edges[p-1].second.
  std::vector<std::pair<int, int>> edges;
  for (int p = 0; p < procs; ++p) edges.push_back(loopback_pair(congestion));
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
      const int out = edges[p].first;
      const int in = edges[(p + procs - 1) % procs].second;
      for (int q = 0; q < procs; ++q) {
        if (edges[q].first != out) ::close(edges[q].first);
        if (edges[q].second != in) ::close(edges[q].second);
      }
      const double rate = run_process(out, in, start, seconds, block);
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
  std::printf("tcp-ring-rate procs %d min %.3f mean %.3f GB/s per direction%s%s\n", procs,
              *std::min_element(rates.begin(), rates.end()) / 1e9, sum / procs / 1e9,
              congestion.empty() ? "" : " congestion ", congestion.c_str());
  return 0;
}
