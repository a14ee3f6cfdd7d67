// Helpers shared by the store tests: a raw TCP socket for speaking (or
// mangling) the wire protocol by hand, running ranks as threads, and a
// higher file-descriptor limit for tests with hundreds of connections.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace kizuna::test {

using namespace std::chrono_literals;

// A blocking client socket to 127.0.0.1:port, with deadlines on reads.
class RawSocket {
 public:
  explicit RawSocket(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw std::runtime_error("socket() failed");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      ::close(fd_);
      throw std::runtime_error("connect() to the store failed: " +
                               std::string(std::strerror(errno)));
    }
    const int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~RawSocket() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawSocket(const RawSocket&) = delete;
  RawSocket& operator=(const RawSocket&) = delete;

  // False when the peer has already closed (EPIPE / ECONNRESET).
  bool send(const std::vector<std::uint8_t>& bytes) {
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (n <= 0) return false;
      done += static_cast<std::size_t>(n);
    }
    return true;
  }
  bool send(const std::string& text) {
    return send(std::vector<std::uint8_t>(text.begin(), text.end()));
  }

  void shutdown_write() { ::shutdown(fd_, SHUT_WR); }

  // Reads exactly n bytes; throws if they do not come within the deadline.
  std::vector<std::uint8_t> read_exactly(std::size_t n, std::chrono::milliseconds deadline = 30s) {
    std::vector<std::uint8_t> out;
    const auto until = std::chrono::steady_clock::now() + deadline;
    while (out.size() < n) {
      if (!wait_readable(until))
        throw std::runtime_error("no data from the store before the deadline");
      std::uint8_t buf[4096];
      const ssize_t got = ::recv(fd_, buf, std::min(sizeof buf, n - out.size()), 0);
      if (got <= 0) throw std::runtime_error("the store closed the connection");
      out.insert(out.end(), buf, buf + got);
    }
    return out;
  }

  // Reads until the peer closes; returns what arrived. `closed` says whether
  // it did close before the deadline (a test's "did not hang" bound).
  std::vector<std::uint8_t> read_until_closed(bool& closed,
                                              std::chrono::milliseconds deadline = 30s) {
    std::vector<std::uint8_t> out;
    const auto until = std::chrono::steady_clock::now() + deadline;
    closed = false;
    for (;;) {
      if (!wait_readable(until)) return out;
      std::uint8_t buf[4096];
      const ssize_t got = ::recv(fd_, buf, sizeof buf, 0);
      if (got == 0 || (got < 0 && errno == ECONNRESET)) {
        closed = true;
        return out;
      }
      if (got < 0) return out;
      out.insert(out.end(), buf, buf + got);
    }
  }

 private:
  bool wait_readable(std::chrono::steady_clock::time_point until) {
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      const int r = ::poll(&p, 1, static_cast<int>(left.count()));
      if (r > 0) return true;
      if (r < 0 && errno != EINTR) return false;
    }
  }

  int fd_ = -1;
};

// Catch2's CHECK is not thread-safe: threads report with this, and
// run_ranks rethrows the first failure on the test's thread.
inline void expect(bool condition, const std::string& what) {
  if (!condition) throw std::runtime_error("expectation failed: " + what);
}

// Runs fn(rank) on n threads and rethrows the first exception.
inline void run_ranks(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  std::exception_ptr first;
  std::mutex mutex;
  threads.reserve(static_cast<std::size_t>(n));
  for (int rank = 0; rank < n; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        fn(rank);
      } catch (...) {
        std::lock_guard lock(mutex);
        if (!first) first = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

// Raises the soft limit on open files to at least `want` (or the hard limit).
inline void raise_fd_limit(rlim_t want) {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return;
  if (lim.rlim_cur >= want) return;
  lim.rlim_cur = std::min(want, lim.rlim_max);
  ::setrlimit(RLIMIT_NOFILE, &lim);
}

// Polls `condition` until it holds or the deadline passes (a bound against
// hangs, not a measurement); returns whether it held.
inline bool eventually(const std::function<bool()>& condition,
                       std::chrono::milliseconds deadline = 30s) {
  const auto until = std::chrono::steady_clock::now() + deadline;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

}  // namespace kizuna::test
