#include "transport/tcp/tcp_connect.hpp"

#define ASIO_STANDALONE 1
#include <asio.hpp>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <sstream>

#include "core/check.hpp"
#include "core/close_on_exec.hpp"
#include "core/log.hpp"
#include "transport/tcp/congestion.hpp"
#include "transport/tcp/listen_port.hpp"

namespace kizuna::transport {

using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

struct TcpListener::Impl {
  asio::io_context io;
  tcp::acceptor acceptor{io};
  CongestionPolicy congestion;
  std::string host;
  int port = 0;
};

TcpListener::TcpListener(const std::string& host, const std::string& congestion)
    : impl_(std::make_unique<Impl>()) {
  impl_->congestion = CongestionPolicy(congestion);
  asio::error_code ec;
  const auto address = asio::ip::make_address(host, ec);
  if (ec) KIZUNA_THROW(ErrorCode::InvalidArgument, "'", host, "' is not an IP address: ", ec.message());
  const tcp::endpoint endpoint(address, 0);
  impl_->acceptor.open(endpoint.protocol(), ec);
  if (!ec) core::close_on_exec(impl_->acceptor.native_handle());
  if (!ec) impl_->congestion.prepare_listener(impl_->acceptor.native_handle());
  if (ec)
    KIZUNA_THROW(ErrorCode::SystemError, "cannot listen on ", host, ":0: ", ec.message());
  // The port: the OS's choice, or one of KIZUNA_PORT_RANGE.
  sockaddr_storage addr{};
  std::memcpy(&addr, endpoint.data(), endpoint.size());
  impl_->port = bind_listen(impl_->acceptor.native_handle(), addr, static_cast<socklen_t>(endpoint.size()), host);
  impl_->host = host;
}

TcpListener::~TcpListener() = default;
const std::string& TcpListener::host() const { return impl_->host; }
int TcpListener::port() const { return impl_->port; }

void tune_socket(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

namespace {

// One pass of connection set-up: all connects and accepts as asynchronous
// operations on the listener's io_context, run by the calling thread.
class Mesh {
 public:
  Mesh(TcpListener::Impl& listener, const Hello& self, Clock::time_point deadline,
       const std::function<std::string()>& give_up)
      : l_(listener), self_(self), deadline_(deadline), hello_(encode_hello(self)), give_up_(give_up) {}
  // A retry whose time comes once set-up is over (its timer may have
  // expired already, too late to cancel) does nothing, even after the Mesh
  // has gone.
  ~Mesh() { *setting_up_ = false; }

  std::vector<int> run(const std::vector<TcpPeer>& connect_to, const std::vector<TcpPeer>& accept_from) {
    fds_.assign(static_cast<std::size_t>(self_.world_size), -1);
    for (const TcpPeer& p : accept_from) accepting_[p.rank] = p.incarnation;
    remaining_ = static_cast<int>(connect_to.size() + accept_from.size());
    if (!accept_from.empty()) accept_next();
    for (const TcpPeer& p : connect_to) connect(p, std::chrono::milliseconds(10));
    std::string gave_up;
    auto next_look = Clock::now() + kGiveUpEvery;
    while (remaining_ > 0 && Clock::now() < deadline_) {
      l_.io.run_one_until(give_up_ ? std::min(deadline_, next_look) : deadline_);
      if (give_up_ && Clock::now() >= next_look) {
        next_look = Clock::now() + kGiveUpEvery;
        if (!(gave_up = give_up_()).empty()) break;
      }
    }
    *setting_up_ = false;
    l_.io.stop();
    if (!gave_up.empty() && remaining_ > 0) {
      for (int fd : fds_)
        if (fd >= 0) ::close(fd);
      throw Error(ErrorCode::Mismatch, gave_up);
    }
    if (remaining_ > 0) {
      for (int fd : fds_)
        if (fd >= 0) ::close(fd);
      std::ostringstream missing;
      for (const TcpPeer& p : connect_to)
        if (fds_[p.rank] < 0) missing << " " << p.rank << " (connecting to " << p.host << ":" << p.port << ")";
      for (const TcpPeer& p : accept_from)
        if (fds_[p.rank] < 0) missing << " " << p.rank << " (waiting for it to connect)";
      if (!accept_error_.empty()) missing << "; the last accept() failed: " << accept_error_;
      KIZUNA_THROW(ErrorCode::Timeout, "rank ", self_.rank, " timed out setting up connections; no connection with rank(s)", missing.str());
    }
    return fds_;
  }

 private:
  void done(int rank, tcp::socket& socket) {
    fds_[rank] = socket.release();
    tune_socket(fds_[rank]);
    --remaining_;
  }

  void accept_next() {
    auto socket = std::make_shared<tcp::socket>(l_.io);
    l_.acceptor.async_accept(*socket, [this, socket](const asio::error_code& ec) {
      if (ec == asio::error::operation_aborted || !l_.acceptor.is_open()) return;  // set-up is over
      if (ec) {
        // Out of descriptors, most likely: say so (once per cause), keep it
        // for the timeout's message, and accept again a little later
        // instead of never.
        if (accept_error_ != ec.message()) {
          KIZUNA_LOG(Warn) << "rank " << self_.rank << ": accepting a connection failed: " << ec.message()
                           << "; retrying";
        }
        accept_error_ = ec.message();
        after(std::chrono::milliseconds(10), [this] { accept_next(); });
        return;
      }
      core::close_on_exec(socket->native_handle());
      auto buf = std::make_shared<HelloBytes>();
      asio::async_read(*socket, asio::buffer(*buf), [this, socket, buf](const asio::error_code& ec2, std::size_t) {
        if (ec2) return;
        try {
          const Hello h = decode_hello(buf->data());
          std::string why = hello_refusal(self_, h, accepting_);
          if (why.empty() && fds_[h.rank] >= 0) why = "rank " + std::to_string(h.rank) + " is already connected";
          if (!why.empty()) return refuse(*socket, why);
          asio::error_code ep_ec;
          const auto remote = socket->remote_endpoint(ep_ec);
          if (!ep_ec) l_.congestion.settle_accepted(socket->native_handle(), remote.address().to_string());
          asio::async_write(*socket, asio::buffer(hello_), [this, socket, rank = h.rank](const asio::error_code& ec3, std::size_t) {
            if (!ec3 && fds_[rank] < 0) done(rank, *socket);
          });
        } catch (const Error& e) {
          refuse(*socket, e.what());
        }
      });
      if (remaining_ > 0) accept_next();
    });
  }

  void refuse(tcp::socket& socket, const std::string& why) {
    asio::error_code ec;
    const auto remote = socket.remote_endpoint(ec);
    KIZUNA_LOG(Warn) << "rank " << self_.rank << " refused a connection from "
                     << (ec ? std::string("an unknown address") : remote.address().to_string() + ":" + std::to_string(remote.port()))
                     << ": " << why;
    socket.close(ec);
  }

  void connect(const TcpPeer& peer, std::chrono::milliseconds backoff) {
    asio::error_code ec;
    const auto address = asio::ip::make_address(peer.host, ec);
    if (ec) KIZUNA_THROW(ErrorCode::InvalidArgument, "rank ", peer.rank, " published '", peer.host, "', not an IP address");
    auto socket = std::make_shared<tcp::socket>(l_.io);
    socket->open(address.is_v4() ? tcp::v4() : tcp::v6(), ec);
    if (ec) return retry(peer, backoff, "cannot open a socket: " + ec.message());
    core::close_on_exec(socket->native_handle());
    l_.congestion.prepare_connect(socket->native_handle(), peer.host);
    socket->async_connect(tcp::endpoint(address, static_cast<unsigned short>(peer.port)),
        [this, socket, peer, backoff](const asio::error_code& ec1) {
          if (ec1) return retry(peer, backoff, ec1.message());
          asio::async_write(*socket, asio::buffer(hello_), [this, socket, peer, backoff](const asio::error_code& ec2, std::size_t) {
            if (ec2) return retry(peer, backoff, ec2.message());
            auto buf = std::make_shared<HelloBytes>();
            asio::async_read(*socket, asio::buffer(*buf), [this, socket, peer, backoff, buf](const asio::error_code& ec3, std::size_t) {
              if (ec3) return retry(peer, backoff, "no handshake reply: " + ec3.message());
              try {
                const Hello h = decode_hello(buf->data());
                const std::string why = hello_refusal(self_, h, {{peer.rank, peer.incarnation}});
                if (!why.empty()) {
                  KIZUNA_LOG(Warn) << "rank " << self_.rank << ": " << peer.host << ":" << peer.port
                                   << " answered as rank " << h.rank << ", refused: " << why << "; retrying";
                  return retry(peer, backoff, "wrong peer: " + why);
                }
                done(peer.rank, *socket);
              } catch (const Error& e) {
                retry(peer, backoff, e.what());
              }
            });
          });
        });
  }

  void retry(const TcpPeer& peer, std::chrono::milliseconds backoff, const std::string& why) {
    KIZUNA_LOG(Debug) << "rank " << self_.rank << ": connecting to rank " << peer.rank << " at "
                      << peer.host << ":" << peer.port << " failed (" << why << "); retrying";
    after(backoff, [this, peer, backoff] { connect(peer, std::min(backoff * 2, std::chrono::milliseconds(1000))); });
  }

  // Runs `then` after `wait`, if set-up is still going on then.
  template <typename Then>
  void after(std::chrono::milliseconds wait, Then then) {
    auto timer = std::make_shared<asio::steady_timer>(l_.io, wait);
    timer->async_wait([timer, setting_up = setting_up_, then](const asio::error_code& ec) {
      if (!ec && *setting_up) then();
    });
  }

  TcpListener::Impl& l_;
  Hello self_;
  Clock::time_point deadline_;
  HelloBytes hello_;
  std::map<int, std::uint64_t> accepting_;
  std::vector<int> fds_;
  int remaining_ = 0;
  std::string accept_error_;  // the last accept() failure, for the timeout's message
  std::shared_ptr<bool> setting_up_ = std::make_shared<bool>(true);
  const std::function<std::string()>& give_up_;
  static constexpr std::chrono::milliseconds kGiveUpEvery{100};
};

}  // namespace

std::vector<int> connect_peers(TcpListener& listener, const Hello& self,
                               const std::vector<TcpPeer>& connect_to,
                               const std::vector<TcpPeer>& accept_from,
                               Clock::time_point deadline, const std::function<std::string()>& give_up) {
  listener.impl_->io.restart();
  Mesh mesh(*listener.impl_, self, deadline, give_up);
  std::vector<int> fds = mesh.run(connect_to, accept_from);
  // Drop whatever is still pending (strangers, the accept, retries) before
  // `mesh` goes.
  asio::error_code ec;
  listener.impl_->acceptor.cancel(ec);
  listener.impl_->io.restart();
  listener.impl_->io.poll();
  return fds;
}

}  // namespace kizuna::transport
