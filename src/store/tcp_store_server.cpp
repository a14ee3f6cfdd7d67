// The TcpStoreServer: an Asio acceptor and one Connection object per client,
// all on one io_context thread (the shape of Asio's chat_server example).
//
// A Connection has a reader (async_read_some into a FrameReader, which
// assembles frames), a writer (async_write of whatever replies are queued,
// gathered into one call) and at most one held request, with a steady_timer
// as its deadline. Frames are processed in order, one at a time: while a
// request is held, later frames of that connection wait in the reader (and
// reading pauses once 1 MiB is buffered), so replies keep request order.
// Reading goes on while a request is held, so a client that goes away is
// noticed at once and its held request released.
//
// Nothing here holds a mutex across a handler: the key-value state belongs
// to the I/O thread; other threads read counters (atomics) and wait for
// joins on a condition variable that the I/O thread only notifies.
#include <kizuna/tcp_store_server.hpp>

#include <asio/connect.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <asio/ip/v6_only.hpp>
#include <asio/steady_timer.hpp>
#include <asio/write.hpp>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_set>

#include "core/check.hpp"
#include "core/close_on_exec.hpp"
#include "core/env.hpp"
#include "core/log.hpp"
#include "store/auth.hpp"
#include "store/server_state.hpp"
#include "store/wire.hpp"

namespace kizuna {
namespace {

using asio::ip::tcp;
using store::wire::Bytes;
using store::wire::Header;
using store::wire::Op;
using store::wire::Status;
namespace wire = store::wire;

constexpr std::size_t kReadChunk = 64 << 10;
constexpr std::size_t kMaxReadChunk = 4 << 20;
// Stop processing a connection's requests while this many reply bytes wait
// to be written (a client that sends without reading), and stop reading
// while this much input waits to be processed.
constexpr std::size_t kMaxWriteBacklog = 1 << 20;
constexpr std::size_t kMaxReadBacklog = 1 << 20;
constexpr auto kAcceptRetry = std::chrono::milliseconds(100);

std::string endpoint_text(const tcp::endpoint& ep) {
  const auto addr = ep.address();
  if (addr.is_v6()) {
    const auto v6 = addr.to_v6();
    if (v6.is_v4_mapped())
      return asio::ip::make_address_v4(asio::ip::v4_mapped, v6).to_string() + ":" +
             std::to_string(ep.port());
    return "[" + addr.to_string() + "]:" + std::to_string(ep.port());
  }
  return addr.to_string() + ":" + std::to_string(ep.port());
}

class Connection;

// What TcpStoreServer::Impl holds, by a name the connections can use.
struct Server {
  explicit Server(const TcpStoreOptions& options);
  ~Server();

  void listen(const TcpStoreOptions& options);
  void accept();
  void publish();  // copy the state's counters to the atomics other threads read
  void remove(const std::shared_ptr<Connection>& connection);

  // Declared first, destroyed last: everything below belongs to it.
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  asio::steady_timer accept_retry{io};
  std::thread thread;

  std::string token;
  wire::Limits limits;
  std::chrono::milliseconds frame_timeout;
  store::ServerState state;
  std::unordered_set<std::shared_ptr<Connection>> connections;

  int port = 0;
  std::string address;
  std::atomic<std::int64_t> joined{0};
  std::atomic<std::int64_t> join_refusals{0};
  std::atomic<std::int64_t> open_connections{0};
  std::atomic<std::int64_t> waiters{0};
  std::atomic<std::int64_t> last_request_ns{0};  // steady clock
  mutable std::mutex join_mutex;
  mutable std::condition_variable join_changed;
};

class Connection : public std::enable_shared_from_this<Connection>, private store::Waiter {
 public:
  Connection(Server& server, tcp::socket socket)
      : server_(server),
        socket_(std::move(socket)),
        reader_(wire::kMaxHandshakeBodyBytes),
        deadline_(server.io),
        frame_timer_(server.io) {
    asio::error_code ec;
    const auto remote = socket_.remote_endpoint(ec);
    peer_ = ec ? std::string("(unknown peer)") : endpoint_text(remote);
  }

  void start() {
    asio::error_code ignored;
    socket_.set_option(tcp::no_delay(true), ignored);
    wire::Hello hello;
    hello.auth_required = !server_.token.empty();
    if (hello.auth_required) {
      server_nonce_ = store::auth::random_nonce();
      hello.server_nonce = server_nonce_;
    } else {
      authenticated_ = true;
      reader_.set_max_body_bytes(server_.limits.max_body_bytes());
    }
    Bytes& frame = next_out();
    wire::encode(hello, frame);
    queue(frame);
    KIZUNA_LOG(Debug) << "store server: connection from " << peer_;
    read();
    watch_frame(false);  // the handshake's deadline, when there is one
  }

  // Ends the connection: releases a held request, closes the socket. Safe
  // to call more than once; pending handlers then see operation_aborted.
  void close(std::string_view reason, core::LogLevel level) {
    if (closed_) return;
    closed_ = true;
    if (core::log_enabled(level))
      core::LogLine(level) << "store server at " << server_.address << ": closing connection from "
                           << peer_ << ": " << reason;
    server_.state.release(*this);
    asio::error_code ignored;
    deadline_.cancel();
    frame_timer_.cancel();
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
    server_.remove(shared_from_this());
  }

 private:
  // ---- reading ---------------------------------------------------------------

  bool can_process() const { return !held() && out_bytes_ <= kMaxWriteBacklog && !closing_; }

  void read() {
    if (reading_ || closed_) return;
    if (!can_process() && reader_.buffered() >= kMaxReadBacklog) return;  // resumed by process()
    reading_ = true;
    const std::size_t want = std::max(kReadChunk, std::min(reader_.wanted(), kMaxReadChunk));
    const auto space = reader_.prepare(want);
    socket_.async_read_some(asio::buffer(space.data(), space.size()),
                            [self = shared_from_this()](const asio::error_code& ec, std::size_t n) {
                              self->on_read(ec, n);
                            });
  }

  void on_read(const asio::error_code& ec, std::size_t n) {
    reading_ = false;
    if (closed_) return;
    if (ec) {
      if (ec == asio::error::eof || ec == asio::error::connection_reset) {
        if (reader_.buffered() > 0 && !held())
          close(core::concat("the client closed it mid-frame: a truncated frame (",
                             reader_.buffered(), " bytes received, ", reader_.wanted(),
                             " more expected)"),
                core::LogLevel::Warn);
        else
          close("the client disconnected", core::LogLevel::Debug);
      } else {
        close("read failed: " + ec.message(), core::LogLevel::Warn);
      }
      return;
    }
    reader_.commit(n);
    process();
  }

  // Handles every complete frame, in order, until one is held; then arms the
  // partial-frame timer if a frame is half there, and reads on.
  void process() {
    bool progressed = false;
    while (!closed_ && can_process()) {
      Header header;
      std::span<const std::uint8_t> body;
      std::string error;
      const auto result = reader_.next(header, body, error);
      if (result == wire::FrameReader::Result::NeedMore) break;
      if (result == wire::FrameReader::Result::Error) {
        close("malformed frame: " + error, core::LogLevel::Warn);
        return;
      }
      if (!authenticated_)
        handle_auth(header, body);
      else
        handle_request(header, body);
      progressed = true;
    }
    if (closed_) return;
    watch_frame(progressed);
    server_.publish();
    read();
  }

  // A frame that starts and never finishes would hold its buffer forever,
  // and a connection that never authenticates its descriptor: each gets the
  // store timeout, from the frame's first byte (or the end of the frame
  // before it, `progressed`), or from the connection's start for the
  // handshake. An authenticated connection may stay idle between frames.
  void watch_frame(bool progressed) {
    const bool waiting = can_process() && (reader_.buffered() > 0 || !authenticated_);
    if (frame_timer_armed_ && (!waiting || progressed)) {
      frame_timer_armed_ = false;
      ++frame_generation_;  // a handler already on its way finds it stale
      frame_timer_.cancel();
    }
    if (!waiting || frame_timer_armed_) return;
    frame_timer_armed_ = true;
    frame_timer_.expires_after(server_.frame_timeout);
    frame_timer_.async_wait([self = shared_from_this(), generation = ++frame_generation_](const asio::error_code& ec) {
      if (ec || self->closed_ || generation != self->frame_generation_) return;
      self->frame_timer_armed_ = false;
      if (!self->can_process()) return;
      if (!self->authenticated_)
        self->close(core::concat("it did not authenticate within ", self->server_.frame_timeout.count(),
                                 " ms (this store requires a token)"),
                    core::LogLevel::Warn);
      else if (self->reader_.buffered() > 0)
        self->close(core::concat("a frame stayed incomplete for ", self->server_.frame_timeout.count(),
                                 " ms (", self->reader_.buffered(), " bytes received)"),
                    core::LogLevel::Warn);
    });
  }

  // ---- handshake -------------------------------------------------------------

  void handle_auth(const Header& header, std::span<const std::uint8_t> body) {
    wire::AuthRequest auth;
    std::string error;
    if (!wire::decode(header, body, auth, error)) {
      close("it did not authenticate: " + error + " (this store requires a token)",
            core::LogLevel::Warn);
      return;
    }
    if (!auth.has_token) {
      refuse(Status::AuthRequired,
             "this store requires a token: set KIZUNA_STORE_TOKEN to the server's token",
             "refused: the client has no token (set KIZUNA_STORE_TOKEN on the client)");
      return;
    }
    const wire::Mac expected =
        store::auth::client_proof(server_.token, server_nonce_, auth.client_nonce);
    if (!store::auth::equal(expected, auth.proof)) {
      refuse(Status::AuthFailed,
             "this client's token does not match the store's (KIZUNA_STORE_TOKEN differs)",
             "refused: authentication failed (a wrong token, or a replayed handshake)");
      return;
    }
    wire::AuthOk ok;
    ok.proof = store::auth::server_proof(server_.token, server_nonce_, auth.client_nonce);
    Bytes& frame = next_out();
    wire::encode(ok, frame);
    queue(frame);
    authenticated_ = true;
    reader_.set_max_body_bytes(server_.limits.max_body_bytes());
    KIZUNA_LOG(Debug) << "store server: " << peer_ << " authenticated";
  }

  // Answers the handshake with an error, then closes once it is written.
  void refuse(Status status, std::string to_client, std::string to_log) {
    KIZUNA_LOG(Warn) << "store server at " << server_.address << ": connection from " << peer_
                     << " " << to_log;
    wire::Reply reply;
    reply.op = Op::Auth;
    reply.status = status;
    reply.message = std::move(to_client);
    send(reply);
    closing_ = true;
    if (!writing_) close("refused", core::LogLevel::Debug);
  }

  // ---- requests --------------------------------------------------------------

  void handle_request(const Header& header, std::span<const std::uint8_t> body) {
    server_.last_request_ns.store(std::chrono::steady_clock::now().time_since_epoch().count(),
                                  std::memory_order_relaxed);
    std::string error;
    if (!wire::decode(header, body, server_.limits, request_, error)) {
      close(core::concat("malformed ", wire::name(header.op), " request: ", error),
            core::LogLevel::Warn);
      return;
    }
    try {
      if (server_.state.execute(request_, reply_, peer_)) {
        server_.publish();  // before the reply: a client that reads a counter sees it current
        send(reply_);
        return;
      }
      server_.state.hold(*this, request_);
      if (request_.timeout_ms == 0) {
        server_.state.timed_out(request_, reply_);
        server_.state.release(*this);
        server_.publish();
        send(reply_);
        return;
      }
      const std::uint64_t generation = ++hold_generation_;
      deadline_.expires_after(std::chrono::milliseconds(request_.timeout_ms));
      deadline_.async_wait([self = shared_from_this(), generation](const asio::error_code& ec) {
        self->on_deadline(ec, generation);
      });
    } catch (const std::exception& e) {
      // Only resource exhaustion gets here (bad_alloc on a huge value);
      // this client is told, the others are unaffected.
      KIZUNA_LOG(Error) << "store server at " << server_.address << ": " << wire::name(request_.op)
                        << " from " << peer_ << " failed: " << e.what();
      server_.state.release(*this);
      wire::Reply reply;
      reply.op = request_.op;
      reply.id = request_.id;
      reply.status = Status::Internal;
      reply.message = std::string("the store failed: ") + e.what();
      send(reply);
      closing_ = true;
      if (!writing_) close("failed", core::LogLevel::Debug);
    }
  }

  // store::Waiter: the held request can be answered now. Called from inside
  // another connection's request; the rest of this connection's input is
  // processed from a fresh handler.
  void ready() override {
    server_.state.answer(request_, reply_);
    server_.publish();
    send(reply_);
    deadline_.cancel();
    asio::post(server_.io, [self = shared_from_this()] {
      if (!self->closed_) self->process();
    });
  }

  void on_deadline(const asio::error_code& ec, std::uint64_t generation) {
    if (ec || closed_ || generation != hold_generation_ || !held()) return;
    server_.state.timed_out(request_, reply_);  // counts this join, if it is one, as it was
    server_.state.release(*this);
    server_.publish();
    send(reply_);
    process();
  }

  // ---- writing ---------------------------------------------------------------

  // A frame buffer to encode into, reusing a written one's capacity.
  Bytes& next_out() {
    out_.emplace_back();
    if (!spare_.empty()) {
      out_.back().swap(spare_.back());
      spare_.pop_back();
    }
    return out_.back();
  }

  void queue(const Bytes& frame) {
    out_bytes_ += frame.size();
    if (!writing_) write();
  }

  void send(const wire::Reply& reply) {
    Bytes& frame = next_out();
    wire::encode(reply, frame);
    queue(frame);
  }

  void write() {
    if (closed_ || out_.empty()) return;
    writing_ = true;
    in_flight_ = out_.size();
    gather_.clear();
    for (std::size_t i = 0; i < in_flight_; ++i) gather_.push_back(asio::buffer(out_[i]));
    asio::async_write(socket_, gather_,
                      [self = shared_from_this()](const asio::error_code& ec, std::size_t) {
                        self->on_write(ec);
                      });
  }

  void on_write(const asio::error_code& ec) {
    writing_ = false;
    if (closed_) return;
    if (ec) {
      close("write failed: " + ec.message(), core::LogLevel::Debug);
      return;
    }
    const bool was_backlogged = out_bytes_ > kMaxWriteBacklog;
    for (std::size_t i = 0; i < in_flight_; ++i) {
      out_bytes_ -= out_.front().size();
      if (out_.front().capacity() <= kReadChunk && spare_.size() < 4) {
        out_.front().clear();
        spare_.push_back(std::move(out_.front()));
      }
      out_.pop_front();
    }
    if (!out_.empty()) {
      write();
    } else if (closing_) {
      close("refused", core::LogLevel::Debug);
      return;
    }
    // Requests left unhandled while the replies backed up: handle them as
    // soon as the backlog is under the limit, whether or not replies are
    // still being written (waiting for the queue to empty would miss the
    // moment when the last write began under the limit).
    if (was_backlogged && out_bytes_ <= kMaxWriteBacklog) process();
  }

  Server& server_;
  tcp::socket socket_;
  std::string peer_;
  wire::FrameReader reader_;
  bool reading_ = false;
  bool closed_ = false;
  bool closing_ = false;  // close once the queued frames are written
  bool authenticated_ = false;
  wire::Nonce server_nonce_{};

  // The request being handled (and held), and its reply.
  wire::Request request_;
  wire::Reply reply_;
  asio::steady_timer deadline_;
  std::uint64_t hold_generation_ = 0;
  asio::steady_timer frame_timer_;
  bool frame_timer_armed_ = false;
  std::uint64_t frame_generation_ = 0;

  std::deque<Bytes> out_;  // queued frames; the first in_flight_ are being written
  std::vector<Bytes> spare_;
  std::vector<asio::const_buffer> gather_;
  std::size_t in_flight_ = 0;
  std::size_t out_bytes_ = 0;
  bool writing_ = false;
};

// ---- the server ---------------------------------------------------------------

Server::Server(const TcpStoreOptions& options)
    : token(options.token ? *options.token : core::Env::get().store_token),
      limits{options.max_value_bytes},
      frame_timeout(options.timeout ? *options.timeout : core::Env::get().store_timeout),
      state(limits, options.world_size) {
  KIZUNA_CHECK_ARG(options.port >= 0 && options.port <= 65535, "store port ", options.port,
                   " is out of range (0..65535; 0 picks a free port)");
  KIZUNA_CHECK_ARG(!options.world_size || *options.world_size >= 1, "store world_size ",
                   options.world_size.value_or(0), " must be at least 1");
  KIZUNA_CHECK_ARG(options.max_value_bytes >= 1 && options.max_value_bytes <= (1ull << 31),
                   "max_value_bytes ", options.max_value_bytes, " must be between 1 and 2 GiB");
  listen(options);
  accept();
  thread = std::thread([this] {
    for (;;) {
      try {
        io.run();
        return;
      } catch (const std::exception& e) {
        KIZUNA_LOG(Error) << "store server at " << address
                          << ": unexpected error on the I/O thread: " << e.what();
      }
    }
  });
  KIZUNA_LOG(Info) << "store server listening on " << address
                   << (token.empty() ? "" : " (token required)");
}

void Server::listen(const TcpStoreOptions& options) {
  const bool any = options.host.empty() || options.host == "*";
  tcp::endpoint endpoint;
  asio::error_code ec;
  if (any) {
    // Dual-stack when the machine has IPv6, else IPv4 only.
    endpoint = tcp::endpoint(tcp::v6(), static_cast<std::uint16_t>(options.port));
    acceptor.open(endpoint.protocol(), ec);
    if (!ec) acceptor.set_option(asio::ip::v6_only(false), ec);
    if (ec) {
      asio::error_code ignored;
      acceptor.close(ignored);
      endpoint = tcp::endpoint(tcp::v4(), static_cast<std::uint16_t>(options.port));
      ec.clear();
      acceptor.open(endpoint.protocol(), ec);
    }
  } else {
    tcp::resolver resolver(io);
    const auto results =
        resolver.resolve(options.host, std::to_string(options.port),
                         tcp::resolver::passive | tcp::resolver::numeric_service, ec);
    if (ec || results.empty())
      KIZUNA_THROW(ErrorCode::SystemError, "store server cannot listen on ", options.host, ":",
                   options.port, ": cannot resolve '", options.host, "': ", ec.message());
    endpoint = results.begin()->endpoint();
    acceptor.open(endpoint.protocol(), ec);
  }
  const std::string where =
      (any ? std::string("*") : options.host) + ":" + std::to_string(options.port);
  if (ec)
    KIZUNA_THROW(ErrorCode::SystemError, "store server cannot open a socket for ", where, ": ",
                 ec.message());
  core::close_on_exec(acceptor.native_handle());
  acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  acceptor.bind(endpoint, ec);
  if (ec == asio::error::address_in_use)
    KIZUNA_THROW(ErrorCode::SystemError, "store server cannot listen on ", where,
                 ": address already in use (another store or program has port ", options.port,
                 "); choose a free port, or port 0 to let the OS pick one");
  if (ec)
    KIZUNA_THROW(ErrorCode::SystemError, "store server cannot listen on ", where, ": ",
                 ec.message());
  acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    KIZUNA_THROW(ErrorCode::SystemError, "store server cannot listen on ", where, ": ",
                 ec.message());
  const auto local = acceptor.local_endpoint(ec);
  if (ec) KIZUNA_THROW(ErrorCode::SystemError, "store server at ", where, ": ", ec.message());
  port = local.port();
  address = endpoint_text(local);
}

void Server::accept() {
  acceptor.async_accept([this](const asio::error_code& ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
    if (ec) {
      // Out of file descriptors, most likely: wait a little instead of spinning.
      KIZUNA_LOG(Warn) << "store server at " << address << ": accept failed: " << ec.message();
      accept_retry.expires_after(kAcceptRetry);
      accept_retry.async_wait([this](const asio::error_code& wait_ec) {
        if (!wait_ec) accept();
      });
      return;
    }
    core::close_on_exec(socket.native_handle());
    auto connection = std::make_shared<Connection>(*this, std::move(socket));
    connections.insert(connection);
    connection->start();
    publish();
    accept();
  });
}

void Server::remove(const std::shared_ptr<Connection>& connection) {
  connections.erase(connection);
  publish();
}

void Server::publish() {
  open_connections.store(static_cast<std::int64_t>(connections.size()), std::memory_order_relaxed);
  waiters.store(state.num_waiters(), std::memory_order_relaxed);
  join_refusals.store(state.num_join_refusals(), std::memory_order_relaxed);
  const std::int64_t now_joined = state.num_joined();
  if (joined.load(std::memory_order_relaxed) != now_joined) {
    {
      std::lock_guard lock(join_mutex);
      joined.store(now_joined);
    }
    join_changed.notify_all();
  }
}

Server::~Server() {
  asio::post(io, [this] {
    asio::error_code ignored;
    acceptor.close(ignored);
    accept_retry.cancel();
    const auto open = connections;  // close() removes from the set
    for (const auto& c : open) c->close("the server is shutting down", core::LogLevel::Debug);
  });
  if (thread.joinable()) thread.join();
}

}  // namespace

struct TcpStoreServer::Impl {
  explicit Impl(const TcpStoreOptions& options) : server(options) {}
  Server server;
};

TcpStoreServer::TcpStoreServer(TcpStoreOptions options) : impl_(std::make_unique<Impl>(options)) {}
TcpStoreServer::~TcpStoreServer() = default;

int TcpStoreServer::port() const { return impl_->server.port; }
std::string TcpStoreServer::address() const { return impl_->server.address; }
std::int64_t TcpStoreServer::num_joined() const { return impl_->server.joined.load(); }
std::int64_t TcpStoreServer::num_join_refusals() const { return impl_->server.join_refusals.load(); }
std::int64_t TcpStoreServer::num_connections() const {
  return impl_->server.open_connections.load();
}
std::int64_t TcpStoreServer::num_waiters() const { return impl_->server.waiters.load(); }

bool TcpStoreServer::wait_joined(std::int64_t count, std::chrono::milliseconds timeout) const {
  const Server& s = impl_->server;
  std::unique_lock lock(s.join_mutex);
  return s.join_changed.wait_for(lock, timeout, [&] { return s.joined.load() >= count; });
}

bool TcpStoreServer::wait_clients_gone(std::chrono::milliseconds idle, std::chrono::milliseconds cap) const {
  using Clock = std::chrono::steady_clock;
  const Server& s = impl_->server;
  const auto end = Clock::now() + cap;
  for (;;) {
    if (s.open_connections.load() == 0) return true;
    const auto now = Clock::now();
    const Clock::time_point last{Clock::duration(s.last_request_ns.load(std::memory_order_relaxed))};
    if (now >= end || now - last >= idle) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace kizuna
