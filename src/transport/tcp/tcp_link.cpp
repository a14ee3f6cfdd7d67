#include "transport/tcp/tcp_link.hpp"

#include <linux/sockios.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <optional>
#include <thread>
#include <vector>

#include "core/check.hpp"
#include "core/reduce.hpp"
#include "transport/frame.hpp"

namespace kizuna::transport {
namespace {

constexpr int kMaxIov = 64;
// Frames up to this size (header and payload) travel through a buffer of
// the link's own (see send_iov).
constexpr std::size_t kSmallFrame = 2048;

class TcpLink final : public Link {
 public:
  TcpLink(int peer, int fd, const TcpLinkOptions& options)
      : Link(peer), fd_(fd), staging_(options.staging_bytes) {}
  ~TcpLink() override {
    // An abort notice may still sit in the kernel's send queue behind data
    // the peer has not read yet, and closing with unread data on our side
    // resets the connection and drops it: the peer would see a reset from
    // this rank instead of the cause. So the close waits, until the notice's
    // grace ends, for the peer to have it all.
    if (notice_deadline_) wait_sent_until(*notice_deadline_);
    if (fd_ >= 0) ::close(fd_);
  }

  std::uint64_t post_send(const void* data, std::size_t bytes, const MessageTag& tag) override {
    check_open();
    Pending p;
    p.header = encode_header({FrameKind::Data, tag, bytes});
    p.data = static_cast<const unsigned char*>(data);
    p.bytes = bytes;
    sendq_.push_back(p);
    return ++posted_;
  }

  std::uint64_t sent_count() const override { return sent_; }

  void post_recv(const RecvSink& sink, const MessageTag& tag) override {
    check_open();
    KIZUNA_CHECK(!recv_active_ || recv_complete_, "a receive is already posted on the link to rank ", peer_);
    recv_active_ = true;
    recv_complete_ = false;
    sink_ = sink;
    expect_ = tag;
    header_got_ = 0;
    payload_got_ = 0;
    staged_ = 0;
    reduced_ = 0;
    elem_ = size_of(sink.dtype);
  }

  bool recv_done() const override { return recv_complete_; }

  bool progress() override {
    check_open();
    bool moved = progress_send();
    moved |= progress_recv();
    return moved;
  }

  int wait_fd() const override { return fd_; }

  bool peer_closed() override {
    if (fd_ < 0 || (recv_active_ && !recv_complete_)) return false;
    unsigned char byte;
    const ssize_t got = ::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  }

  short wait_events() const override {
    short events = 0;
    if (recv_active_ && !recv_complete_) events |= POLLIN;
    if (!sendq_.empty()) events |= POLLOUT;
    return events;
  }

  void send_abort(const AbortNotice& notice, std::chrono::milliseconds grace) override {
    if (closed_.load()) return;
    const auto deadline = std::chrono::steady_clock::now() + grace;
    try {
      // Drop a half-read receive: the abort ends this link anyway.
      recv_active_ = false;
      if (!flush_until(deadline)) return reset();
      abort_body_ = encode_abort(notice);
      Pending p;
      p.header = encode_header({FrameKind::Abort, {}, abort_body_.size()});
      p.data = abort_body_.data();
      p.bytes = abort_body_.size();
      sendq_.push_back(p);
      if (!flush_until(deadline)) return reset();
      // FIN after the notice; the read side stays open so that unread data
      // on our side cannot turn the close into a reset that loses the notice.
      closed_.store(true);
      ::shutdown(fd_, SHUT_WR);
      notice_deadline_ = deadline;
    } catch (const Error&) {
      reset();
    }
  }

  void interrupt() override {
    closed_.store(true);
    ::shutdown(fd_, SHUT_RDWR);
  }

 private:
  struct Pending {
    HeaderBytes header;
    const unsigned char* data = nullptr;
    std::size_t bytes = 0;
    std::size_t done = 0;  // of header + payload
  };

  // The descriptor stays allocated until destruction, so interrupt() from
  // another thread never races with its reuse; closed_ marks it dead.
  void close() {
    if (!closed_.exchange(true)) ::shutdown(fd_, SHUT_RDWR);
  }

  void check_open() const {
    if (closed_.load(std::memory_order_relaxed))
      KIZUNA_THROW(ErrorCode::Aborted, "the connection to rank ", peer_, " is closed");
  }

  [[noreturn]] void lost(const char* what, int err) {
    close();
    KIZUNA_THROW(ErrorCode::PeerLost, "lost rank ", peer_, ": ", what,
                 err ? std::string(" (") + std::strerror(err) + ")" : std::string());
  }

  void reset() {
    if (closed_.load()) return;
    linger off{1, 0};  // RST instead of FIN: the peer fails at once
    ::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &off, sizeof off);
    close();
  }

  // Waits until the kernel's send queue (unsent and unacknowledged bytes)
  // is empty, or the deadline.
  void wait_sent_until(std::chrono::steady_clock::time_point deadline) const {
    int queued = 0;
    while (::ioctl(fd_, SIOCOUTQ, &queued) == 0 && queued > 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
  }

  // Sends until done or the deadline; true when the queue is empty.
  bool flush_until(std::chrono::steady_clock::time_point deadline) {
    while (!sendq_.empty()) {
      if (progress_send()) continue;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd_, POLLOUT, 0};
      ::poll(&p, 1, static_cast<int>(left.count()));
    }
    return true;
  }

  // A small frame goes by send() and recv() through a buffer of its own
  // instead of sendmsg() and recvmsg() on its parts: the kernel then skips
  // importing a message header and an iovec array, on every message of a
  // small all-reduce (docs/tuning.md#direct-calls).
  ssize_t send_iov(const iovec* iov, int n, std::size_t want) {
    constexpr int kFlags = MSG_NOSIGNAL | MSG_DONTWAIT;
    if (n == 1) return ::send(fd_, iov[0].iov_base, iov[0].iov_len, kFlags);
    if (want <= kSmallFrame) {
      unsigned char* out = small_out_.data();
      for (int i = 0; i < n; ++i) {
        std::memcpy(out, iov[i].iov_base, iov[i].iov_len);
        out += iov[i].iov_len;
      }
      return ::send(fd_, small_out_.data(), want, kFlags);
    }
    msghdr msg{};
    msg.msg_iov = const_cast<iovec*>(iov);
    msg.msg_iovlen = static_cast<std::size_t>(n);
    return ::sendmsg(fd_, &msg, kFlags);
  }

  // The same for receiving: what came is scattered over `iov` as recvmsg()
  // would have put it.
  ssize_t recv_iov(iovec* iov, int n) {
    if (n == 1) return ::recv(fd_, iov[0].iov_base, iov[0].iov_len, MSG_DONTWAIT);
    const std::size_t want = iov[0].iov_len + iov[1].iov_len;
    if (want <= kSmallFrame) {
      const ssize_t got = ::recv(fd_, small_in_.data(), want, MSG_DONTWAIT);
      if (got > 0) {
        const std::size_t first = std::min(static_cast<std::size_t>(got), iov[0].iov_len);
        std::memcpy(iov[0].iov_base, small_in_.data(), first);
        if (static_cast<std::size_t>(got) > first) std::memcpy(iov[1].iov_base, small_in_.data() + first, got - first);
      }
      return got;
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<std::size_t>(n);
    return ::recvmsg(fd_, &msg, MSG_DONTWAIT);
  }

  bool progress_send() {
    bool moved = false;
    while (!sendq_.empty()) {
      iovec iov[kMaxIov];
      int n = 0;
      std::size_t want = 0;
      for (auto it = sendq_.begin(); it != sendq_.end() && n + 2 <= kMaxIov; ++it) {
        if (it->done < kFrameHeaderBytes) {
          iov[n++] = {it->header.data() + it->done, kFrameHeaderBytes - it->done};
          want += kFrameHeaderBytes - it->done;
        }
        const std::size_t payload_done = it->done > kFrameHeaderBytes ? it->done - kFrameHeaderBytes : 0;
        if (it->bytes > payload_done) {
          iov[n++] = {const_cast<unsigned char*>(it->data) + payload_done, it->bytes - payload_done};
          want += it->bytes - payload_done;
        }
      }
      const ssize_t sent = send_iov(iov, n, want);
      if (sent < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        if (errno == EINTR) continue;
        if (errno == EPIPE || errno == ECONNRESET || errno == ENOTCONN) {
          const int err = errno;
          raise_abort_behind_close();
          lost("connection closed while sending", err);
        }
        KIZUNA_THROW(ErrorCode::SystemError, "send to rank ", peer_, " failed: ", std::strerror(errno));
      }
      moved = true;
      std::size_t left = static_cast<std::size_t>(sent);
      while (left > 0) {
        Pending& p = sendq_.front();
        const std::size_t rest = kFrameHeaderBytes + p.bytes - p.done;
        const std::size_t take = left < rest ? left : rest;
        p.done += take;
        left -= take;
        if (p.done == kFrameHeaderBytes + p.bytes) {
          sendq_.pop_front();
          ++sent_;
        }
      }
      // Completed frames of size 0 bytes left in front are done too.
      while (!sendq_.empty() && sendq_.front().done == kFrameHeaderBytes + sendq_.front().bytes) {
        sendq_.pop_front();
        ++sent_;
      }
      if (static_cast<std::size_t>(sent) < want) break;  // the socket is full
    }
    return moved;
  }

  // Where the next payload bytes go, and how many fit there.
  std::pair<unsigned char*, std::size_t> payload_target() {
    const std::size_t remaining = sink_.bytes - payload_got_;
    if (sink_.src == nullptr) return {static_cast<unsigned char*>(sink_.dst) + payload_got_, remaining};
    const std::size_t room = staging_.size() - staged_;
    return {staging_.data() + staged_, remaining < room ? remaining : room};
  }

  // Folds the complete elements in staging into dst, keeping a partial one.
  void reduce_staged() {
    const std::size_t whole = staged_ / elem_ * elem_;
    if (whole == 0) return;
    auto* dst = static_cast<unsigned char*>(sink_.dst) + reduced_;
    const auto* src = static_cast<const unsigned char*>(sink_.src) + reduced_;
    core::reduce_into(dst, src, staging_.data(), whole / elem_, sink_.dtype, sink_.op);
    reduced_ += whole;
    staged_ -= whole;
    if (staged_) std::memmove(staging_.data(), staging_.data() + whole, staged_);
  }

  // Accounts `n` payload bytes just read into payload_target().
  void take_payload(std::size_t n) {
    payload_got_ += n;
    if (sink_.src != nullptr) {
      staged_ += n;
      if (staged_ == staging_.size() || payload_got_ == sink_.bytes) reduce_staged();
    }
  }

  bool progress_recv() {
    if (!recv_active_ || recv_complete_) return false;
    bool moved = false;
    for (;;) {
      iovec iov[2];
      int n = 0;
      const bool in_header = header_got_ < kFrameHeaderBytes;
      if (in_header) iov[n++] = {header_.data() + header_got_, kFrameHeaderBytes - header_got_};
      std::pair<unsigned char*, std::size_t> target{nullptr, 0};
      if (!aborting_) {
        target = payload_target();
        if (target.second) iov[n++] = {target.first, target.second};
      } else {
        iov[n++] = {abort_in_.data() + abort_got_, abort_in_.size() - abort_got_};
      }
      if (n == 0) break;
      const ssize_t got = recv_iov(iov, n);
      if (got == 0) lost("connection closed by the peer", 0);
      if (got < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        if (errno == EINTR) continue;
        if (errno == ECONNRESET || errno == ENOTCONN) lost("connection reset", errno);
        KIZUNA_THROW(ErrorCode::SystemError, "receive from rank ", peer_, " failed: ", std::strerror(errno));
      }
      moved = true;
      std::size_t left = static_cast<std::size_t>(got);
      if (in_header) {
        const std::size_t h = std::min(left, kFrameHeaderBytes - header_got_);
        header_got_ += h;
        left -= h;
        if (header_got_ == kFrameHeaderBytes) on_header(target.first, left);
        else continue;
        if (aborting_) {
          if (abort_got_ == abort_in_.size()) fail_with_abort();
          continue;
        }
      } else if (aborting_) {
        abort_got_ += left;
        if (abort_got_ == abort_in_.size()) fail_with_abort();
        continue;
      }
      if (left) take_payload(left);
      if (payload_got_ == sink_.bytes) {
        recv_complete_ = true;
        break;
      }
    }
    return moved;
  }

  // The header is complete; `extra` payload bytes were read after it into
  // `target`.
  void on_header(unsigned char* target, std::size_t extra) {
    const FrameHeader h = decode_header(header_.data());
    if (h.kind == FrameKind::Abort) {
      aborting_ = true;
      abort_in_.resize(h.bytes);
      abort_got_ = std::min<std::size_t>(extra, h.bytes);
      if (abort_got_) std::memcpy(abort_in_.data(), target, abort_got_);
      return;
    }
    check_message(h.tag, h.bytes, expect_, sink_.bytes);
  }

  // The peer closed while we were sending to it. If it failed first, it
  // sent an abort notice before closing, and the notice waits in our
  // receive buffer (data before a reset stays readable), behind any data
  // frames no receive has asked for yet: read up to it, dropping the data
  // (this link ends here either way), and raise it instead of blaming the
  // peer. Returns when there is none.
  void raise_abort_behind_close() {
    std::vector<unsigned char> sink(64 * 1024);
    HeaderBytes header{};
    std::size_t header_got = 0;
    std::size_t skip = 0;  // payload bytes of the current data frame still unread
    if (recv_active_ && !recv_complete_) {
      if (aborting_) {
        header_got = kFrameHeaderBytes;  // the notice's body is what remains
      } else if (header_got_ < kFrameHeaderBytes) {
        header = header_;
        header_got = header_got_;
      } else {
        skip = sink_.bytes - payload_got_;
        header_got = 0;
      }
    }
    for (;;) {
      unsigned char* target;
      std::size_t want;
      if (aborting_) {
        target = abort_in_.data() + abort_got_;
        want = abort_in_.size() - abort_got_;
      } else if (skip > 0) {
        target = sink.data();
        want = std::min(skip, sink.size());
      } else {
        target = header.data() + header_got;
        want = kFrameHeaderBytes - header_got;
      }
      ssize_t got = 0;
      if (want > 0) {
        got = ::recv(fd_, target, want, MSG_DONTWAIT);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return;  // end of stream, reset or nothing more: no notice
      }
      const auto n = static_cast<std::size_t>(got);
      if (aborting_) {
        abort_got_ += n;
        if (abort_got_ == abort_in_.size()) fail_with_abort();
      } else if (skip > 0) {
        skip -= n;
      } else if ((header_got += n) == kFrameHeaderBytes) {
        FrameHeader h;
        try {
          h = decode_header(header.data());
        } catch (const Error&) {
          return;  // not a stream we can follow
        }
        header_got = 0;
        if (h.kind == FrameKind::Abort) {
          aborting_ = true;
          abort_in_.resize(h.bytes);
          abort_got_ = 0;
          if (h.bytes == 0) fail_with_abort();
        } else {
          skip = h.bytes;
        }
      }
    }
  }

  [[noreturn]] void fail_with_abort() {
    received_abort_ = decode_abort(abort_in_.data(), abort_in_.size());
    close();
    throw notice_error(*received_abort_);
  }

  int fd_;
  std::atomic<bool> closed_{false};
  std::array<unsigned char, kSmallFrame> small_out_{};
  std::array<unsigned char, kSmallFrame> small_in_{};
  std::deque<Pending> sendq_;
  std::uint64_t sent_ = 0;
  std::vector<unsigned char> abort_body_;
  std::optional<std::chrono::steady_clock::time_point> notice_deadline_;  // set once a notice is sent

  bool recv_active_ = false;
  bool recv_complete_ = false;
  RecvSink sink_;
  MessageTag expect_;
  std::size_t elem_ = 1;
  HeaderBytes header_{};
  std::size_t header_got_ = 0;
  std::size_t payload_got_ = 0;
  std::vector<unsigned char> staging_;
  std::size_t staged_ = 0;
  std::size_t reduced_ = 0;
  bool aborting_ = false;
  std::vector<unsigned char> abort_in_;
  std::size_t abort_got_ = 0;
};

}  // namespace

std::unique_ptr<Link> make_tcp_link(int peer, int fd, const TcpLinkOptions& options) {
  return std::make_unique<TcpLink>(peer, fd, options);
}

}  // namespace kizuna::transport
