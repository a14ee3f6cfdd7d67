// The TcpStore client: blocking calls with deadlines on a private Asio
// io_context (the shape of Asio's blocking_tcp_client / timeout.cpp).
//
// Each call starts its asynchronous operations (the request's write and the
// reply's reads, together) and runs the io_context until they finish or the
// deadline passes; on the deadline the socket is closed, which cancels them.
// The io_context has no thread of its own: the calling thread drives it,
// under the store's mutex, so calls are serialised.
#include <kizuna/tcp_store.hpp>
#include <kizuna/tcp_store_server.hpp>

#include <asio/connect.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/write.hpp>

#include <algorithm>
#include <limits>
#include <mutex>
#include <random>
#include <thread>

#include "core/check.hpp"
#include "core/close_on_exec.hpp"
#include "core/env.hpp"
#include "core/log.hpp"
#include "store/auth.hpp"
#include "store/keys.hpp"
#include "store/wire.hpp"

namespace kizuna {
namespace {

using asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using store::wire::Op;
using store::wire::Status;
namespace wire = store::wire;

constexpr std::size_t kReadChunk = 64 << 10;
constexpr std::size_t kMaxReadChunk = 4 << 20;
// How long past a held request's own timeout the client waits for the
// server's Timeout reply before it calls the server unresponsive.
constexpr milliseconds kReplyGrace{5000};
constexpr milliseconds kFirstBackoff{10};
constexpr milliseconds kMaxBackoff{1000};
// How long a hosted server outlives its host's client while others still
// use it: until they have been quiet this long, and at most the cap.
constexpr milliseconds kServerLinger{2000};
constexpr milliseconds kServerLingerCap{60'000};

std::uint32_t timeout_field(milliseconds timeout) {
  const auto ms = std::max<std::int64_t>(timeout.count(), 0);
  return static_cast<std::uint32_t>(
      std::min<std::int64_t>(ms, std::numeric_limits<std::uint32_t>::max()));
}

bool is_any_address(const std::string& host) {
  return host.empty() || host == "*" || host == "0.0.0.0" || host == "::" || host == "[::]";
}

// How long a client waits for a server's greeting after connecting.
constexpr std::chrono::milliseconds kHelloPatience{5'000};

// How long a process that hosts the store keeps it after a refused join,
// for the ranks still to come to be refused too.
constexpr std::chrono::milliseconds kRefusalLinger{10'000};

// Above this, a request's lost connection may be the server refusing its
// size.
constexpr std::uint64_t kLargeRequestBytes = 64 << 10;

// Errors worth another connection attempt: the server is not up yet, or
// is busy accepting, or the network is still coming up. A name that does
// not resolve (host_not_found: the name server says it does not exist) is
// final at once; a name server that did not answer (try_again) is not.
bool retryable(const asio::error_code& ec) {
  return ec == asio::error::connection_refused || ec == asio::error::connection_reset ||
         ec == asio::error::connection_aborted || ec == asio::error::eof ||
         ec == asio::error::timed_out || ec == asio::error::host_unreachable ||
         ec == asio::error::network_unreachable || ec == asio::error::host_not_found_try_again ||
         ec == asio::error::try_again;
}

}  // namespace

struct TcpStore::Impl {
  explicit Impl(TcpStoreOptions opts);
  ~Impl();

  // ---- connection ----
  void connect();
  // One attempt: resolve, connect, handshake. Returns false with `ec` set on
  // a retryable failure; throws on a final one.
  bool try_connect(Clock::time_point deadline, asio::error_code& ec);
  void handshake(Clock::time_point deadline);
  void join();

  // ---- one exchange ----
  enum class Outcome { Frame, Deadline, IoError, Malformed };
  // Writes `out` (when `send`) and reads one frame, until `deadline`.
  Outcome exchange(bool send, Clock::time_point deadline);
  void start_read();
  bool run_until(Clock::time_point deadline);

  // Sends `request` and returns the server's reply with status Ok; any other
  // status becomes a kizuna::Error naming the request. `reply_timeout`
  // bounds the wait for the reply.
  wire::Reply call(wire::Request& request, milliseconds reply_timeout);
  [[noreturn]] void throw_status(const wire::Reply& reply, const wire::Request& request);
  // Marks the connection unusable and throws.
  [[noreturn]] void fail(ErrorCode code, const std::string& message);

  // "get of key 'x'", for messages (built only when one is needed).
  static std::string describe(const wire::Request& r) {
    switch (r.op) {
      case Op::NumKeys:
      case Op::Ping: return std::string(wire::name(r.op));
      case Op::ListKeys: return "list_keys of '" + wire::printable(r.prefix) + "'";
      case Op::Join: return core::concat("join of ", r.number, " clients");
      default: return core::concat(wire::name(r.op), " of ", store::describe_keys(r.keys));
    }
  }

  // Declared first, destroyed last: a hosted server outlives its own client.
  std::unique_ptr<TcpStoreServer> server;

  TcpStoreOptions options;
  std::string token;
  milliseconds timeout;
  wire::Limits limits;
  std::string host;  // as given
  int port = 0;
  std::string address;       // "host:port" for messages
  std::string connect_host;  // where the socket connects (loopback for a hosted "any" server)

  std::mutex mutex;
  asio::io_context io{1};
  tcp::socket socket{io};
  wire::FrameReader reader{wire::kMaxHandshakeBodyBytes};
  wire::Bytes out;
  std::uint32_t next_id = 1;
  std::string broken;  // why the connection is unusable; "" while it is fine

  // State of the exchange in progress, written by its handlers.
  asio::error_code write_ec, read_ec;
  bool write_done = false, frame_done = false, malformed = false;
  std::string malformed_reason;
  wire::Header header;
  std::span<const std::uint8_t> body;
};

TcpStore::Impl::Impl(TcpStoreOptions opts)
    : options(std::move(opts)),
      token(options.token ? *options.token : core::Env::get().store_token),
      timeout(options.timeout ? *options.timeout : core::Env::get().store_timeout),
      limits{options.max_value_bytes},
      host(options.host) {
  KIZUNA_CHECK_ARG(options.port >= 0 && options.port <= 65535, "store port ", options.port,
                   " is out of range (0..65535)");
  KIZUNA_CHECK_ARG(options.is_server || options.port != 0,
                   "a TcpStore client needs the server's port; port 0 is only for servers");
  KIZUNA_CHECK_ARG(options.is_server || !is_any_address(options.host),
                   "a TcpStore client needs the server's host; '", options.host,
                   "' means every interface, which only a server can listen on");
  KIZUNA_CHECK_ARG(!options.world_size || *options.world_size >= 1, "store world_size ",
                   options.world_size.value_or(0), " must be at least 1");
  KIZUNA_CHECK_ARG(timeout.count() > 0, "store timeout must be positive, not ", timeout.count(),
                   " ms");
  port = options.port;
  connect_host = host;
  if (options.is_server) {
    TcpStoreOptions server_options = options;
    server_options.token = token;
    server_options.timeout = timeout;
    server = std::make_unique<TcpStoreServer>(server_options);
    port = server->port();
    if (is_any_address(host)) connect_host = "127.0.0.1";
  }
  const bool v6 = connect_host.find(':') != std::string::npos;
  address = (v6 ? "[" + connect_host + "]" : connect_host) + ":" + std::to_string(port);
  connect();
  join();
}

TcpStore::Impl::~Impl() {
  asio::error_code ignored;
  socket.close(ignored);
  // A hosted server serves on while other clients still use it: ranks that
  // finish early (rank 0's half of a split) must not cut off ranks still
  // setting up. It stops once they have all gone, or been quiet for
  // kServerLinger (done with it, or stopped), or after the store timeout.
  if (server && !server->wait_clients_gone(kServerLinger, std::min(timeout, kServerLingerCap))) {
    KIZUNA_LOG(Debug) << "store at " << server->address() << " shuts down with " << server->num_connections()
                      << " clients still connected (quiet for " << kServerLinger.count() << " ms)";
  }
}

void TcpStore::Impl::connect() {
  const auto start = Clock::now();
  const auto deadline = start + timeout;
  std::minstd_rand jitter(static_cast<unsigned>(
      std::hash<std::thread::id>()(std::this_thread::get_id()) ^ start.time_since_epoch().count()));
  milliseconds backoff = kFirstBackoff;
  int attempts = 0;
  for (;;) {
    ++attempts;
    asio::error_code ec;
    if (try_connect(deadline, ec)) {
      if (attempts > 1) {
        KIZUNA_LOG(Info) << "connected to store at " << address << " after " << attempts
                         << " attempts";
      }
      return;
    }
    const auto now = Clock::now();
    if (now + backoff >= deadline) {
      const auto waited = std::chrono::duration_cast<milliseconds>(now - start).count();
      KIZUNA_THROW(ErrorCode::Timeout, "timed out after ", waited, " ms (", attempts,
                   " attempts) connecting to store at ", address, ": ", ec.message(),
                   " (is the server running? with Store::from_env, rank 0 hosts it)");
    }
    KIZUNA_LOG(Debug) << "store at " << address << ": " << ec.message() << "; retrying in "
                      << backoff.count() << " ms";
    // Backoff between attempts, with jitter so that many ranks spread out.
    std::this_thread::sleep_for(backoff + milliseconds(jitter() % (backoff.count() / 2 + 1)));
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
}

bool TcpStore::Impl::try_connect(Clock::time_point deadline, asio::error_code& ec) {
  asio::error_code ignored;
  socket.close(ignored);
  reader = wire::FrameReader(wire::kMaxHandshakeBodyBytes);

  tcp::resolver resolver(io);
  const auto endpoints =
      resolver.resolve(connect_host, std::to_string(port), tcp::resolver::numeric_service, ec);
  if (ec) {
    if (retryable(ec)) return false;
    KIZUNA_THROW(ErrorCode::SystemError, "cannot resolve store host '", connect_host, "': ", ec.message(),
                 " (check MASTER_ADDR, KIZUNA_STORE or the store URL)");
  }

  bool connected = false;
  asio::async_connect(socket, endpoints, [&](const asio::error_code& e, const tcp::endpoint&) {
    ec = e;
    connected = !e;
  });
  if (!run_until(deadline)) {
    ec = asio::error::timed_out;
    return false;
  }
  if (!connected) {
    if (retryable(ec)) return false;
    KIZUNA_THROW(ErrorCode::SystemError, "cannot connect to store at ", address, ": ",
                 ec.message());
  }
  socket.set_option(tcp::no_delay(true), ignored);
  core::close_on_exec(socket.native_handle());

  // The server speaks first. A connection it drops before its hello (a full
  // accept queue, a restart) is worth another try; anything after is final.
  // A kizuna server greets at once: one silent for kHelloPatience is
  // something else listening there, and that is final too.
  const auto patience = std::min(deadline, Clock::now() + kHelloPatience);
  switch (exchange(false, patience)) {
    case Outcome::Frame: break;
    case Outcome::Deadline:
      if (patience < deadline)
        KIZUNA_THROW(ErrorCode::SystemError, "store at ", address, " accepted the connection but sent no greeting in ",
                     kHelloPatience.count(), " ms: is another program listening on that port? (is it a kizuna store?)");
      ec = asio::error::timed_out;
      return false;
    case Outcome::IoError:
      ec = read_ec;
      if (retryable(ec)) return false;
      break;
    case Outcome::Malformed: break;
  }
  if (!frame_done)
    KIZUNA_THROW(ErrorCode::SystemError, "store at ", address, ": ",
                 malformed ? malformed_reason : read_ec.message(), " (is it a kizuna store?)");
  handshake(deadline);
  reader.set_max_body_bytes(limits.max_body_bytes());
  return true;
}

void TcpStore::Impl::handshake(Clock::time_point deadline) {
  wire::Hello hello;
  std::string error;
  if (!wire::decode(header, body, hello, error))
    KIZUNA_THROW(ErrorCode::SystemError, "store at ", address, " sent a bad hello: ", error,
                 " (is it a kizuna store of the same version?)");
  if (!hello.auth_required) {
    if (!token.empty())
      KIZUNA_THROW(
          ErrorCode::Mismatch, "store at ", address,
          " does not authenticate, but this client has a token (KIZUNA_STORE_TOKEN): "
          "refusing an unauthenticated store; give the server the same token, or unset it here");
    return;
  }
  wire::AuthRequest auth;
  auth.has_token = !token.empty();
  if (auth.has_token) {
    auth.client_nonce = store::auth::random_nonce();
    auth.proof = store::auth::client_proof(token, hello.server_nonce, auth.client_nonce);
  }
  out.clear();
  wire::encode(auth, out);
  const Outcome outcome = exchange(true, deadline);
  if (!auth.has_token)  // the server was told, so that it logs the refusal; its answer is known
    KIZUNA_THROW(
        ErrorCode::InvalidArgument, "store at ", address,
        " requires a token: set KIZUNA_STORE_TOKEN (or TcpStoreOptions::token) to the server's");
  if (outcome == Outcome::Deadline)
    KIZUNA_THROW(ErrorCode::Timeout, "timed out authenticating with store at ", address);
  if (outcome != Outcome::Frame)
    KIZUNA_THROW(ErrorCode::PeerLost, "store at ", address,
                 " closed the connection while authenticating: ",
                 malformed ? malformed_reason : read_ec.message());
  if (header.op == Op::Auth && header.status != Status::Ok) {
    wire::Reply refusal;
    if (!wire::decode(header, body, limits, refusal, error)) refusal.message = error;
    KIZUNA_THROW(ErrorCode::Mismatch, "authentication failed at store ", address, ": ",
                 refusal.message);
  }
  wire::AuthOk ok;
  if (!wire::decode(header, body, ok, error))
    KIZUNA_THROW(ErrorCode::SystemError, "store at ", address,
                 " answered authentication with: ", error);
  const wire::Mac expected =
      store::auth::server_proof(token, hello.server_nonce, auth.client_nonce);
  if (!store::auth::equal(expected, ok.proof))
    KIZUNA_THROW(
        ErrorCode::Mismatch, "authentication failed: store at ", address,
        " could not prove it knows the token (a different token, or not the store you meant)");
}

void TcpStore::Impl::join() {
  if (!options.world_size) return;
  wire::Request request;
  request.op = Op::Join;
  request.number = *options.world_size;
  request.timeout_ms = timeout_field(timeout);
  std::lock_guard lock(mutex);
  try {
    call(request, timeout + kReplyGrace);
  } catch (const Error& e) {
    // A refused join (another world size) refuses every later one; the
    // process that hosts the store keeps it a while, so that ranks still
    // starting learn why instead of finding no store at all.
    if (server && e.code() == ErrorCode::Mismatch) {
      const auto until = Clock::now() + std::min(timeout, kRefusalLinger);
      while (server->num_join_refusals() < *options.world_size && Clock::now() < until)
        std::this_thread::sleep_for(milliseconds(10));
    }
    throw;
  }
}

// ---- one exchange ------------------------------------------------------------

bool TcpStore::Impl::run_until(Clock::time_point deadline) {
  io.restart();
  io.run_until(deadline);
  if (io.stopped()) return true;  // every operation finished
  // The deadline passed: closing the socket cancels what is pending, and the
  // handlers run once more, with operation_aborted.
  asio::error_code ignored;
  socket.close(ignored);
  io.restart();
  io.run();
  return false;
}

void TcpStore::Impl::start_read() {
  const std::size_t want = std::max(kReadChunk, std::min(reader.wanted(), kMaxReadChunk));
  const auto space = reader.prepare(want);
  socket.async_read_some(asio::buffer(space.data(), space.size()),
                         [this](const asio::error_code& ec, std::size_t n) {
                           if (ec) {
                             read_ec = ec;
                             return;
                           }
                           reader.commit(n);
                           const auto r = reader.next(header, body, malformed_reason);
                           if (r == wire::FrameReader::Result::Frame)
                             frame_done = true;
                           else if (r == wire::FrameReader::Result::Error)
                             malformed = true;
                           else
                             start_read();
                         });
}

TcpStore::Impl::Outcome TcpStore::Impl::exchange(bool send, Clock::time_point deadline) {
  write_ec.clear();
  read_ec.clear();
  write_done = !send;
  frame_done = false;
  malformed = false;
  malformed_reason.clear();
  // A frame may already be buffered (the server never sends unasked, but a
  // refusal can arrive together with the frame before it).
  const auto r = reader.next(header, body, malformed_reason);
  if (r == wire::FrameReader::Result::Error) return Outcome::Malformed;
  if (send)
    asio::async_write(socket, asio::buffer(out), [this](const asio::error_code& ec, std::size_t) {
      write_ec = ec;
      write_done = true;
    });
  if (r == wire::FrameReader::Result::Frame)
    frame_done = true;
  else
    start_read();
  const bool finished = run_until(deadline);
  if (frame_done) return Outcome::Frame;  // even if the write then failed: the server answered
  if (malformed) return Outcome::Malformed;
  if (!finished) return Outcome::Deadline;
  if (!read_ec && write_ec) read_ec = write_ec;
  return Outcome::IoError;
}

void TcpStore::Impl::fail(ErrorCode code, const std::string& message) {
  broken = message;
  asio::error_code ignored;
  socket.close(ignored);
  throw Error(code, message);
}

wire::Reply TcpStore::Impl::call(wire::Request& request, milliseconds reply_timeout) {
  if (!broken.empty())
    KIZUNA_THROW(ErrorCode::PeerLost, "cannot ", describe(request), ": the connection to store at ",
                 address, " is unusable after an earlier error (", broken,
                 "); create a new TcpStore");
  request.id = next_id++;
  out.clear();
  wire::encode(request, out);
  const std::uint64_t body_bytes = out.size() - wire::kHeaderBytes;
  KIZUNA_CHECK_ARG(
      body_bytes <= limits.max_body_bytes(), describe(request), ": the request is ", body_bytes,
      " bytes, over the limit of ", limits.max_body_bytes(),
      " bytes (TcpStoreOptions::max_value_bytes plus 4 MiB); send fewer or smaller values");

  const auto start = Clock::now();
  switch (exchange(true, start + reply_timeout)) {
    case Outcome::Frame: break;
    case Outcome::Deadline:
      fail(ErrorCode::Timeout,
           core::concat("timed out after ", reply_timeout.count(), " ms waiting for store at ",
                        address, " to answer ", describe(request),
                        " (is the server stuck or overloaded?)"));
    case Outcome::Malformed:
      fail(ErrorCode::PeerLost, core::concat("store at ", address, " sent a malformed reply to ",
                                             describe(request), ": ", malformed_reason));
    case Outcome::IoError: {
      const bool closed = read_ec == asio::error::eof || read_ec == asio::error::connection_reset ||
                          read_ec == asio::error::broken_pipe ||
                          read_ec == asio::error::connection_aborted;
      // A server closes the connection on a frame over its limit (kizuna-store
      // serve --max-value-bytes may be below this client's): say so for a
      // large request rather than only suspect the server's exit.
      const std::uint64_t sent = out.size() - wire::kHeaderBytes;
      if (closed && sent > kLargeRequestBytes)
        fail(ErrorCode::PeerLost,
             core::concat("lost the connection to store at ", address, " during ", describe(request), " (",
                          sent, " bytes): ", read_ec.message(),
                          " (the server closes the connection on a value over its limit, kizuna-store serve "
                          "--max-value-bytes, 64 MiB by default; or it exited)"));
      if (closed)
        fail(ErrorCode::PeerLost,
             core::concat("lost the connection to store at ", address, " during ",
                          describe(request), ": ", read_ec.message(), " (did the server exit?)"));
      fail(ErrorCode::SystemError, core::concat("I/O error with store at ", address, " during ",
                                                describe(request), ": ", read_ec.message()));
    }
  }
  wire::Reply reply;
  std::string error;
  if (!wire::decode(header, body, limits, reply, error))
    fail(ErrorCode::PeerLost, core::concat("store at ", address, " sent a malformed reply to ",
                                           describe(request), ": ", error));
  if (reply.id != request.id || reply.op != request.op)
    fail(ErrorCode::PeerLost, core::concat("store at ", address, " answered ", describe(request),
                                           " with ", wire::name(reply.op), " #", reply.id,
                                           " instead of #", request.id, " (protocol error)"));
  if (reply.status != Status::Ok) throw_status(reply, request);
  return reply;
}

void TcpStore::Impl::throw_status(const wire::Reply& reply, const wire::Request& request) {
  switch (reply.status) {
    case Status::Timeout:
      if (request.op == Op::Join)
        KIZUNA_THROW(ErrorCode::Timeout, "timed out after ", request.timeout_ms, " ms waiting for ",
                     request.number, " clients to join store at ", address, " (", reply.message,
                     ")");
      throw Error(ErrorCode::Timeout,
                  store::timeout_message(milliseconds(request.timeout_ms), request.keys, reply.keys,
                                         " at store " + address));
    case Status::Mismatch:
      KIZUNA_THROW(ErrorCode::Mismatch, "store at ", address, " refused ", describe(request), ": ",
                   reply.message);
    case Status::Internal:
      fail(ErrorCode::Internal,
           core::concat("store at ", address, " failed ", describe(request), ": ", reply.message));
    default:
      KIZUNA_THROW(ErrorCode::InvalidArgument, "store at ", address, " refused ", describe(request),
                   ": ", reply.message);
  }
}

// ---- the Store interface -------------------------------------------------------

TcpStore::TcpStore(TcpStoreOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {
  timeout_ = impl_->timeout;
}

TcpStore::~TcpStore() = default;

namespace {

void check_value(const std::string& key, const Bytes& value, const wire::Limits& limits) {
  KIZUNA_CHECK_ARG(value.size() <= limits.max_value_bytes, "the value of key '",
                   wire::printable(key), "' is ", value.size(), " bytes, over the limit of ",
                   limits.max_value_bytes, " bytes (TcpStoreOptions::max_value_bytes)");
}

}  // namespace

void TcpStore::set(const std::string& key, const Bytes& value) {
  store::check_key(key);
  check_value(key, value, impl_->limits);
  wire::Request r;
  r.op = Op::Set;
  r.keys = {key};
  r.values = {value};
  std::lock_guard lock(impl_->mutex);
  impl_->call(r, timeout());
}

Bytes TcpStore::get(const std::string& key, std::chrono::milliseconds wait_timeout) {
  store::check_key(key);
  wire::Request r;
  r.op = Op::Get;
  r.keys = {key};
  r.timeout_ms = timeout_field(wait_timeout);
  std::lock_guard lock(impl_->mutex);
  auto reply = impl_->call(r, milliseconds(r.timeout_ms) + kReplyGrace);
  return std::move(reply.values.at(0));
}

std::int64_t TcpStore::add(const std::string& key, std::int64_t delta) {
  store::check_key(key);
  wire::Request r;
  r.op = Op::Add;
  r.keys = {key};
  r.number = delta;
  std::lock_guard lock(impl_->mutex);
  return impl_->call(r, timeout()).number;
}

Bytes TcpStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  store::check_key(key);
  check_value(key, expected, impl_->limits);
  check_value(key, desired, impl_->limits);
  wire::Request r;
  r.op = Op::CompareSet;
  r.keys = {key};
  r.values = {expected, desired};
  std::lock_guard lock(impl_->mutex);
  auto reply = impl_->call(r, timeout());
  return std::move(reply.values.at(0));
}

void TcpStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds wait_timeout) {
  store::check_keys(keys);
  wire::Request r;
  r.op = Op::Wait;
  r.keys = keys;
  r.timeout_ms = timeout_field(wait_timeout);
  std::lock_guard lock(impl_->mutex);
  impl_->call(r, milliseconds(r.timeout_ms) + kReplyGrace);
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  store::check_keys(keys);
  wire::Request r;
  r.op = Op::Check;
  r.keys = keys;
  std::lock_guard lock(impl_->mutex);
  return impl_->call(r, timeout()).number != 0;
}

bool TcpStore::delete_key(const std::string& key) {
  store::check_key(key);
  wire::Request r;
  r.op = Op::Delete;
  r.keys = {key};
  std::lock_guard lock(impl_->mutex);
  return impl_->call(r, timeout()).number != 0;
}

std::int64_t TcpStore::num_keys() {
  wire::Request r;
  r.op = Op::NumKeys;
  std::lock_guard lock(impl_->mutex);
  return impl_->call(r, timeout()).number;
}

std::vector<Bytes> TcpStore::multi_get(const std::vector<std::string>& keys,
                                       std::chrono::milliseconds wait_timeout) {
  store::check_keys(keys);
  wire::Request r;
  r.op = Op::MultiGet;
  r.keys = keys;
  r.timeout_ms = timeout_field(wait_timeout);
  std::lock_guard lock(impl_->mutex);
  auto reply = impl_->call(r, milliseconds(r.timeout_ms) + kReplyGrace);
  if (reply.values.size() != keys.size())
    impl_->fail(ErrorCode::PeerLost,
                core::concat("store at ", impl_->address, " answered multi_get of ", keys.size(),
                             " keys with ", reply.values.size(), " values (protocol error)"));
  return std::move(reply.values);
}

void TcpStore::multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) {
  KIZUNA_CHECK_ARG(keys.size() == values.size(), "multi_set: ", keys.size(), " keys but ",
                   values.size(), " values");
  store::check_keys(keys);
  for (std::size_t i = 0; i < keys.size(); ++i) check_value(keys[i], values[i], impl_->limits);
  wire::Request r;
  r.op = Op::MultiSet;
  r.keys = keys;
  r.values = values;
  std::lock_guard lock(impl_->mutex);
  impl_->call(r, timeout());
}

void TcpStore::append(const std::string& key, const Bytes& value) {
  store::check_key(key);
  check_value(key, value, impl_->limits);
  wire::Request r;
  r.op = Op::Append;
  r.keys = {key};
  r.values = {value};
  std::lock_guard lock(impl_->mutex);
  impl_->call(r, timeout());
}

std::vector<std::string> TcpStore::list_keys(const std::string& prefix, std::size_t max_keys) {
  KIZUNA_CHECK_ARG(prefix.size() <= wire::kMaxKeyBytes, "list_keys: the prefix is ", prefix.size(),
                   " bytes; keys are at most ", wire::kMaxKeyBytes);
  wire::Request r;
  r.op = Op::ListKeys;
  r.prefix = prefix;
  std::lock_guard lock(impl_->mutex);
  auto reply = impl_->call(r, timeout());
  if (reply.keys.size() > max_keys) reply.keys.resize(max_keys);
  return std::move(reply.keys);
}

void TcpStore::ping() {
  wire::Request r;
  r.op = Op::Ping;
  std::lock_guard lock(impl_->mutex);
  impl_->call(r, timeout());
}

const std::string& TcpStore::host() const { return impl_->host; }
int TcpStore::port() const { return impl_->port; }
const std::string& TcpStore::address() const { return impl_->address; }

}  // namespace kizuna
