#include "comm/p2p.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <list>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include <kizuna/error.hpp>

#include "comm/work_state.hpp"
#include "core/check.hpp"
#include "core/log.hpp"
#include "transport/tcp/listen_port.hpp"

namespace kizuna::comm {

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::uint64_t kMagic = 0x3170327a6bULL;  // "kz2p1", little-endian
constexpr std::size_t kHelloBytes = 24;              // magic, communicator id, rank, reserved
constexpr std::size_t kHeaderBytes = 16;             // tag, bytes
constexpr std::uint64_t kMaxMessageBytes = 1ull << 40;  // as the links' frames (transport/frame.hpp)

void put64(unsigned char* p, std::uint64_t v) { std::memcpy(p, &v, 8); }
std::uint64_t get64(const unsigned char* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// A numeric address and port as a sockaddr (IPv4 or IPv6).
bool to_sockaddr(const std::string& host, int port, sockaddr_storage& out, socklen_t& len) {
  std::memset(&out, 0, sizeof out);
  auto* v4 = reinterpret_cast<sockaddr_in*>(&out);
  if (::inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<std::uint16_t>(port));
    len = sizeof(sockaddr_in);
    return true;
  }
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&out);
  if (::inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<std::uint16_t>(port));
    len = sizeof(sockaddr_in6);
    return true;
  }
  return false;
}

std::string errno_text(int e) { return std::strerror(e); }

}  // namespace

std::pair<int, int> open_p2p_listener(const std::string& host) {
  sockaddr_storage addr;
  socklen_t len = 0;
  if (!to_sockaddr(host, 0, addr, len))
    KIZUNA_THROW(ErrorCode::InvalidArgument, "'", host, "' is not an IP address");
  const int fd = ::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) KIZUNA_THROW(ErrorCode::SystemError, "cannot open a socket for ", host, ": ", errno_text(errno));
  try {
    return {fd, transport::bind_listen(fd, addr, len, host)};  // the OS's port, or one of KIZUNA_PORT_RANGE
  } catch (...) {
    ::close(fd);
    throw;
  }
}

using OpPtr = std::shared_ptr<P2pOp>;

// Where a message that arrived before its receive waits. From 64 KiB its
// own pages (mmap), given back to the system when it is taken: held in the
// engine thread's malloc arena, one large message after another raised
// the process's resident memory for good (glibc's rising mmap threshold
// keeps freed chunks of that size in the arena).
class Payload {
 public:
  static constexpr std::size_t kOwnPagesFrom = 64 << 10;
  Payload() = default;
  explicit Payload(std::size_t bytes) : bytes_(bytes) {
    if (bytes == 0) return;
    if (bytes < kOwnPagesFrom) {
      data_ = new unsigned char[bytes];
      return;
    }
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
      KIZUNA_THROW(ErrorCode::SystemError, "cannot map ", bytes, " bytes for a message that arrived before its "
                                           "receive: ", std::strerror(errno));
    data_ = static_cast<unsigned char*>(p);
  }
  Payload(Payload&& o) noexcept : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  Payload& operator=(Payload&& o) noexcept {
    if (this != &o) {
      release();
      data_ = std::exchange(o.data_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  Payload(const Payload&) = delete;
  Payload& operator=(const Payload&) = delete;
  ~Payload() { release(); }
  unsigned char* data() { return data_; }
  std::size_t size() const { return bytes_; }

 private:
  void release() {
    if (!data_) return;
    if (bytes_ < kOwnPagesFrom) delete[] data_;
    else ::munmap(data_, bytes_);
    data_ = nullptr;
  }
  unsigned char* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// A message that arrived before its receive, whole or still arriving.
struct Arrived {
  int source = -1;
  std::int64_t tag = 0;
  Payload data;
  bool complete = false;
  OpPtr taker;           // a receive that took it while it arrives
  bool dropped = false;  // taken by a receive of another size, which failed
};

// This rank's connection to one peer: its sends, in order.
struct Outbound {
  int fd = -1;
  bool connected = false;
  std::deque<OpPtr> queue;
  std::size_t offset = 0;  // into the hello (first), then into the front's header and bytes
  bool hello_sent = false;
  unsigned char hello[kHelloBytes] = {};
  unsigned char header[kHeaderBytes] = {};
};

// A peer's connection to this rank: its messages, one at a time.
struct Inbound {
  int fd = -1;
  int peer = -1;  // known once its hello is in
  unsigned char head[kHelloBytes] = {};
  std::size_t head_got = 0;
  bool in_payload = false;
  std::int64_t tag = 0;
  std::uint64_t bytes = 0, got = 0;
  // Where the bytes go: a matched receive's buffer, an arrived message's,
  // or nowhere.
  OpPtr into_op;
  std::list<Arrived>::iterator into_arrived;
  bool into_list = false;
};

struct P2pEngine::State {
  int rank;
  std::string name;
  std::uint64_t comm_id;
  int listen_fd;
  std::vector<Peer> peers;
  int wake_fd = -1;
  ~State();

  std::mutex mutex;  // guards the fields up to `thread`
  std::vector<OpPtr> inbox;
  std::exception_ptr failure;
  bool stopping = false;
  std::thread thread;

  // The thread's own.
  std::list<OpPtr> posted;  // receives, in posting order
  std::list<Arrived> arrived;  // in arrival order
  std::map<int, Outbound> out;
  std::list<Inbound> in;
  std::vector<bool> closed_from;  // peers whose connection ended cleanly

  std::string where() const { return " on rank " + std::to_string(rank) + " of " + name; }
  std::string describe(const P2pOp& op) const {
    std::string s = op.send ? "send to rank " + std::to_string(op.peer)
                    : op.peer < 0 ? std::string("recv from any rank")
                                  : "recv from rank " + std::to_string(op.peer);
    return s + " (tag " + std::to_string(op.tag) + ", " + std::to_string(op.bytes) + " bytes)" + where();
  }

  static void finish(const OpPtr& op, std::exception_ptr error) {
    if (op->work) op->work->finish(std::move(error));
  }
  static void fail(const OpPtr& op, ErrorCode code, const std::string& message) {
    finish(op, std::make_exception_ptr(Error(code, message)));
  }
  void complete_recv(const OpPtr& op, int source) {
    op->work->source.store(source, std::memory_order_relaxed);
    finish(op, nullptr);
  }

  void run();
  void take_inbox(std::vector<OpPtr>& ops);
  void start_send(const OpPtr& op);
  void start_recv(const OpPtr& op);
  void connect_to(int peer, Outbound& o);
  void fail_sends(int peer, Outbound& o, ErrorCode code, const std::string& why);
  bool write_some(int peer, Outbound& o);
  void accept_all();
  // False once the connection is gone.
  bool read_some(Inbound& c);
  void message_starts(Inbound& c);
  void message_ends(Inbound& c);
  void connection_ends(Inbound& c, const std::string& why);
  Clock::time_point expire(Clock::time_point now);
  void fail_everything(const std::exception_ptr& error);
  void fail_receives(const std::exception_ptr& error);
  bool sends_pending() const;
};

P2pEngine::P2pEngine(int rank, std::string name, std::uint64_t comm_id, int listen_fd, std::vector<Peer> peers)
    : state_(std::make_shared<State>()) {
  State& s = *state_;
  s.rank = rank;
  s.name = std::move(name);
  s.comm_id = comm_id;
  s.listen_fd = listen_fd;
  s.peers = std::move(peers);
  s.closed_from.assign(s.peers.size(), false);
  s.wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (s.wake_fd < 0) {
    KIZUNA_THROW(ErrorCode::SystemError, "eventfd: ", errno_text(errno));
  }
}

P2pEngine::~P2pEngine() { shutdown(); }

P2pEngine::State::~State() {
  if (listen_fd >= 0) ::close(listen_fd);
  if (wake_fd >= 0) ::close(wake_fd);
}

void P2pEngine::post(P2pOp op) {
  State& s = *state_;
  auto p = std::make_shared<P2pOp>(std::move(op));
  std::exception_ptr refused;
  {
    std::lock_guard lock(s.mutex);
    if (s.failure) {
      refused = s.failure;
    } else if (s.stopping) {
      refused = std::make_exception_ptr(
          Error(ErrorCode::Aborted, s.describe(*p) + ": the communicator is being destroyed"));
    } else {
      s.inbox.push_back(p);
      // The thread holds the state: it may outlive the engine (shutdown()).
      if (!s.thread.joinable()) s.thread = std::thread([self = state_] { self->run(); });
    }
  }
  if (refused) {
    State::finish(p, refused);
    return;
  }
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto n = ::write(s.wake_fd, &one, sizeof one);
}

void P2pEngine::fail_all(std::exception_ptr error) {
  State& s = *state_;
  {
    std::lock_guard lock(s.mutex);
    if (s.failure) return;
    s.failure = std::move(error);
  }
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto n = ::write(s.wake_fd, &one, sizeof one);
}

void P2pEngine::shutdown() {
  State& s = *state_;
  std::thread thread;
  {
    std::lock_guard lock(s.mutex);
    s.stopping = true;
    thread = std::move(s.thread);
  }
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto n = ::write(s.wake_fd, &one, sizeof one);
  // A Work callback on the engine's own thread may hold the last
  // reference to the communicator: that thread is let go and ends by itself.
  if (thread.joinable()) {
    if (thread.get_id() == std::this_thread::get_id())
      thread.detach();
    else
      thread.join();
  }
}

void P2pEngine::State::take_inbox(std::vector<OpPtr>& ops) {
  for (const OpPtr& op : ops) {
    if (op->send) start_send(op);
    else start_recv(op);
  }
  ops.clear();
}

void P2pEngine::State::start_send(const OpPtr& op) {
  Outbound& o = out[op->peer];
  o.queue.push_back(op);
  if (o.fd < 0) connect_to(op->peer, o);
}

void P2pEngine::State::connect_to(int peer, Outbound& o) {
  const Peer& p = peers.at(static_cast<std::size_t>(peer));
  sockaddr_storage addr;
  socklen_t len = 0;
  if (p.port <= 0 || !to_sockaddr(p.address, p.port, addr, len)) {
    fail_sends(peer, o, ErrorCode::PeerLost, "rank " + std::to_string(peer) + " published no point-to-point port");
    return;
  }
  o.fd = ::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (o.fd < 0) {
    fail_sends(peer, o, ErrorCode::SystemError, "socket: " + errno_text(errno));
    return;
  }
  const int one = 1;
  ::setsockopt(o.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  put64(o.hello, kMagic);
  put64(o.hello + 8, comm_id);
  put64(o.hello + 16, static_cast<std::uint64_t>(rank));
  if (::connect(o.fd, reinterpret_cast<sockaddr*>(&addr), len) == 0) {
    o.connected = true;
  } else if (errno != EINPROGRESS) {
    fail_sends(peer, o, ErrorCode::PeerLost,
               "cannot connect to rank " + std::to_string(peer) + " at " + p.address + ":" +
                   std::to_string(p.port) + ": " + errno_text(errno));
  }
}

// Fails every queued send to `peer`; the connection is closed, and the
// next send opens another.
void P2pEngine::State::fail_sends(int peer, Outbound& o, ErrorCode code, const std::string& why) {
  for (const OpPtr& op : o.queue) fail(op, code, describe(*op) + ": " + why);
  o.queue.clear();
  if (o.fd >= 0) ::close(o.fd);
  o = Outbound{};
  (void)peer;
}

bool P2pEngine::State::write_some(int peer, Outbound& o) {
  bool moved = false;
  while (!o.queue.empty() || !o.hello_sent) {
    iovec iov[2];
    int n = 0;
    std::size_t total = 0;
    if (!o.hello_sent) {
      iov[n++] = {o.hello + o.offset, kHelloBytes - o.offset};
      total = kHelloBytes;
    } else {
      const P2pOp& op = *o.queue.front();
      if (o.offset == 0) {
        put64(o.header, static_cast<std::uint64_t>(op.tag));
        put64(o.header + 8, op.bytes);
      }
      if (o.offset < kHeaderBytes) iov[n++] = {o.header + o.offset, kHeaderBytes - o.offset};
      const std::size_t in_data = o.offset > kHeaderBytes ? o.offset - kHeaderBytes : 0;
      if (op.bytes > in_data) iov[n++] = {op.data + in_data, op.bytes - in_data};
      total = kHeaderBytes + op.bytes;
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<std::size_t>(n);
    const ssize_t w = n == 0 ? 0 : ::sendmsg(o.fd, &msg, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return moved;
      if (errno == EINTR) continue;
      fail_sends(peer, o, ErrorCode::PeerLost,
                 "the connection to rank " + std::to_string(peer) + " broke: " + errno_text(errno));
      return true;
    }
    moved = moved || w > 0;
    o.offset += static_cast<std::size_t>(w);
    if (o.offset < total) continue;
    o.offset = 0;
    if (!o.hello_sent) {
      o.hello_sent = true;
    } else {
      const OpPtr done = o.queue.front();
      o.queue.pop_front();
      finish(done, nullptr);
    }
  }
  return moved;
}

void P2pEngine::State::start_recv(const OpPtr& op) {
  // The earliest arrived message it matches, if any.
  for (auto it = arrived.begin(); it != arrived.end(); ++it) {
    if (it->taker || it->dropped || it->tag != op->tag || (op->peer >= 0 && it->source != op->peer)) continue;
    if (it->data.size() != op->bytes) {
      fail(op, ErrorCode::Mismatch,
           describe(*op) + ": rank " + std::to_string(it->source) + " sent " + std::to_string(it->data.size()) +
               " bytes with this tag");
      if (it->complete) arrived.erase(it);
      else it->dropped = true;
      return;
    }
    if (!it->complete) {
      it->taker = op;
      return;
    }
    if (op->bytes) std::memcpy(op->data, it->data.data(), op->bytes);
    const int source = it->source;
    arrived.erase(it);
    complete_recv(op, source);
    return;
  }
  if (op->peer >= 0 && closed_from[static_cast<std::size_t>(op->peer)]) {
    fail(op, ErrorCode::PeerLost,
         describe(*op) + ": rank " + std::to_string(op->peer) +
             " closed its point-to-point connection (its communicator ended)");
    return;
  }
  posted.push_back(op);
}

void P2pEngine::State::accept_all() {
  for (;;) {
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;  // EAGAIN, or out of descriptors until one closes
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    Inbound c;
    c.fd = fd;
    in.push_back(c);
  }
}

// A header is in: the receive it matches, else memory of its own.
void P2pEngine::State::message_starts(Inbound& c) {
  c.tag = static_cast<std::int64_t>(get64(c.head));
  c.bytes = get64(c.head + 8);
  c.got = 0;
  c.in_payload = true;
  c.into_op.reset();
  c.into_list = false;
  for (auto it = posted.begin(); it != posted.end(); ++it) {
    const OpPtr& op = *it;
    if (op->tag != c.tag || (op->peer >= 0 && op->peer != c.peer)) continue;
    const OpPtr taken = op;
    posted.erase(it);
    if (taken->bytes != c.bytes) {
      fail(taken, ErrorCode::Mismatch,
           describe(*taken) + ": rank " + std::to_string(c.peer) + " sent " + std::to_string(c.bytes) +
               " bytes with this tag");
      return;  // the bytes go nowhere
    }
    c.into_op = taken;
    return;
  }
  Arrived a;
  a.source = c.peer;
  a.tag = c.tag;
  a.data = Payload(c.bytes);  // bounded by the caller
  c.into_arrived = arrived.insert(arrived.end(), std::move(a));
  c.into_list = true;
}

void P2pEngine::State::message_ends(Inbound& c) {
  c.in_payload = false;
  c.head_got = 0;
  if (c.into_op) {
    complete_recv(c.into_op, c.peer);
    c.into_op.reset();
  } else if (c.into_list) {
    c.into_list = false;
    Arrived& a = *c.into_arrived;
    if (a.dropped) {
      arrived.erase(c.into_arrived);
    } else if (a.taker) {
      const OpPtr op = a.taker;
      if (op->bytes) std::memcpy(op->data, a.data.data(), op->bytes);
      arrived.erase(c.into_arrived);
      complete_recv(op, c.peer);
    } else {
      a.complete = true;
    }
  }
}

void P2pEngine::State::connection_ends(Inbound& c, const std::string& why) {
  const std::string who = c.peer >= 0 ? "rank " + std::to_string(c.peer) : std::string("a peer");
  if (c.into_op) fail(c.into_op, ErrorCode::PeerLost, describe(*c.into_op) + ": " + who + "'s connection " + why);
  if (c.into_list) {
    if (c.into_arrived->taker)
      fail(c.into_arrived->taker, ErrorCode::PeerLost,
           describe(*c.into_arrived->taker) + ": " + who + "'s connection " + why);
    arrived.erase(c.into_arrived);
  }
  ::close(c.fd);
  c.fd = -1;
  if (c.peer < 0) return;
  // Receives that wait for this peer wait in vain: it sends nothing more.
  closed_from[static_cast<std::size_t>(c.peer)] = true;
  for (auto it = posted.begin(); it != posted.end();) {
    if ((*it)->peer == c.peer) {
      fail(*it, ErrorCode::PeerLost, describe(**it) + ": " + who + "'s connection " + why);
      it = posted.erase(it);
    } else {
      ++it;
    }
  }
}

bool P2pEngine::State::read_some(Inbound& c) {
  for (;;) {
    unsigned char* dst;
    std::size_t want;
    static thread_local unsigned char sink[1 << 16];
    const bool hello = c.peer < 0;
    if (!c.in_payload) {
      const std::size_t need = hello ? kHelloBytes : kHeaderBytes;
      dst = c.head + c.head_got;
      want = need - c.head_got;
    } else {
      const std::uint64_t left = c.bytes - c.got;
      if (c.into_op) dst = c.into_op->data + c.got;
      else if (c.into_list) dst = c.into_arrived->data.data() + c.got;
      else dst = sink;
      want = c.into_op || c.into_list ? left : std::min<std::uint64_t>(left, sizeof sink);
    }
    const ssize_t r = ::recv(c.fd, dst, want, 0);
    if (r == 0) {
      const bool clean = !c.in_payload && c.head_got == 0;
      connection_ends(c, clean ? "closed (its communicator ended)" : "closed in the middle of a message");
      return false;
    }
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      connection_ends(c, "broke: " + errno_text(errno));
      return false;
    }
    if (!c.in_payload) {
      c.head_got += static_cast<std::size_t>(r);
      if (hello && c.head_got == kHelloBytes) {
        const std::uint64_t peer = get64(c.head + 16);
        if (get64(c.head) != kMagic || get64(c.head + 8) != comm_id || peer >= peers.size() ||
            static_cast<int>(peer) == rank) {
          KIZUNA_LOG(Warn) << "point-to-point: refused a connection that is not from this communicator" << where();
          connection_ends(c, "refused");
          return false;
        }
        c.peer = static_cast<int>(peer);
        c.head_got = 0;
        closed_from[peer] = false;  // it reconnected after a failed send
      } else if (!hello && c.head_got == kHeaderBytes) {
        // A size no receive could hold is not a message of kizuna's:
        // the connection is dropped rather than memory reserved for it.
        if (get64(c.head + 8) > kMaxMessageBytes) {
          KIZUNA_LOG(Error) << "point-to-point: rank " << c.peer << " sent a header of "
                            << get64(c.head + 8) << " bytes, more than any message" << where();
          connection_ends(c, "sent a malformed header");
          return false;
        }
        message_starts(c);
        if (c.bytes == 0) message_ends(c);
      }
    } else {
      c.got += static_cast<std::uint64_t>(r);
      if (c.got == c.bytes) message_ends(c);
    }
  }
}

// Fails what is past its deadline; returns the nearest deadline left.
Clock::time_point P2pEngine::State::expire(Clock::time_point now) {
  Clock::time_point next = Clock::time_point::max();
  auto timed_out = [&](const OpPtr& op) {
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - op->deadline);
    fail(op, ErrorCode::Timeout,
         describe(*op) + ": timed out at its deadline (KIZUNA_TIMEOUT)" +
             (waited.count() > 0 ? ", " + std::to_string(waited.count()) + " ms late" : std::string()));
  };
  for (auto it = posted.begin(); it != posted.end();) {
    if ((*it)->deadline <= now) {
      timed_out(*it);
      it = posted.erase(it);
    } else {
      next = std::min(next, (*it)->deadline);
      ++it;
    }
  }
  for (Arrived& a : arrived) {
    if (!a.taker) continue;
    if (a.taker->deadline <= now) {
      timed_out(a.taker);
      a.taker.reset();
    } else {
      next = std::min(next, a.taker->deadline);
    }
  }
  for (Inbound& c : in) {
    if (!c.into_op) continue;
    if (c.into_op->deadline <= now) {
      timed_out(c.into_op);
      c.into_op.reset();  // the rest of its bytes go nowhere
    } else {
      next = std::min(next, c.into_op->deadline);
    }
  }
  for (auto& [peer, o] : out) {
    if (o.queue.empty()) continue;
    // Sends leave in order: the first one past its deadline holds up the
    // rest, which fail with it (the connection is closed mid-message).
    if (o.queue.front()->deadline <= now) {
      const std::string why = o.connected || o.hello_sent ? "rank " + std::to_string(peer) + " took none of it"
                                                         : "no connection to rank " + std::to_string(peer);
      for (const OpPtr& op : o.queue)
        fail(op, ErrorCode::Timeout, describe(*op) + ": timed out at its deadline (KIZUNA_TIMEOUT): " + why);
      o.queue.clear();
      ::close(o.fd);
      o = Outbound{};
    } else {
      next = std::min(next, o.queue.front()->deadline);
    }
  }
  return next;
}

void P2pEngine::State::fail_receives(const std::exception_ptr& error) {
  for (const OpPtr& op : posted) finish(op, error);
  posted.clear();
  for (Arrived& a : arrived)
    if (a.taker) {
      finish(a.taker, error);
      a.taker.reset();
    }
  for (Inbound& c : in)
    if (c.into_op) {
      finish(c.into_op, error);
      c.into_op.reset();
    }
}

void P2pEngine::State::fail_everything(const std::exception_ptr& error) {
  fail_receives(error);
  for (auto& [peer, o] : out) {
    for (const OpPtr& op : o.queue) finish(op, error);
    o.queue.clear();
    if (o.fd >= 0) ::close(o.fd);
    o = Outbound{};
  }
}

bool P2pEngine::State::sends_pending() const {
  for (const auto& [peer, o] : out)
    if (!o.queue.empty()) return true;
  return false;
}

void P2pEngine::State::run() {
  std::vector<OpPtr> ops;
  std::vector<pollfd> fds;
  std::vector<int> out_peer;
  bool failed = false;
  for (;;) {
    bool stopping_now;
    std::exception_ptr failure;
    {
      std::lock_guard lock(mutex);
      ops.swap(inbox);
      stopping_now = stopping;
      failure = this->failure;
    }
    if (failure) {
      for (const OpPtr& op : ops) finish(op, failure);
      ops.clear();
      if (!failed) fail_everything(failure);
      failed = true;
    }
    take_inbox(ops);
    if (stopping_now) {
      if (!posted.empty() || std::any_of(arrived.begin(), arrived.end(), [](const Arrived& a) { return a.taker; }))
        fail_receives(std::make_exception_ptr(
            Error(ErrorCode::Aborted, "a receive" + where() + " was pending when its communicator was destroyed")));
      if (!sends_pending()) break;
    }
    const Clock::time_point next = expire(Clock::now());

    fds.clear();
    out_peer.clear();
    fds.push_back({wake_fd, POLLIN, 0});
    fds.push_back({listen_fd, POLLIN, 0});
    for (const Inbound& c : in) fds.push_back({c.fd, POLLIN, 0});
    for (auto& [peer, o] : out) {
      if (o.fd < 0 || (o.queue.empty() && o.hello_sent)) continue;
      fds.push_back({o.fd, POLLOUT, 0});
      out_peer.push_back(peer);
    }
    int timeout = -1;
    if (next != Clock::time_point::max()) {
      const auto ms = std::chrono::ceil<std::chrono::milliseconds>(next - Clock::now()).count();
      timeout = static_cast<int>(std::clamp<long long>(ms, 0, 60'000));
    }
    const int n = ::poll(fds.data(), fds.size(), timeout);
    if (n < 0 && errno != EINTR) {
      KIZUNA_LOG(Error) << "point-to-point: poll failed: " << errno_text(errno) << where();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (n <= 0) continue;
    if (fds[0].revents) {
      std::uint64_t v;
      [[maybe_unused]] const auto r = ::read(wake_fd, &v, sizeof v);
    }
    std::size_t i = 2;
    for (auto it = in.begin(); it != in.end(); ++i) {
      if (fds[i].revents && !read_some(*it)) it = in.erase(it);
      else ++it;
    }
    for (std::size_t k = 0; k < out_peer.size(); ++k, ++i) {
      if (!fds[i].revents) continue;
      Outbound& o = out[out_peer[k]];
      if (!o.connected) {
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(o.fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0) {
          const Peer& p = peers.at(static_cast<std::size_t>(out_peer[k]));
          fail_sends(out_peer[k], o, ErrorCode::PeerLost,
                     "cannot connect to rank " + std::to_string(out_peer[k]) + " at " + p.address + ":" +
                         std::to_string(p.port) + ": " + errno_text(err));
          continue;
        }
        o.connected = true;
      }
      write_some(out_peer[k], o);
    }
    if (fds[1].revents) accept_all();
  }
  for (Inbound& c : in) ::close(c.fd);
  in.clear();
  for (auto& [peer, o] : out)
    if (o.fd >= 0) ::close(o.fd);
  out.clear();
}

}  // namespace kizuna::comm
