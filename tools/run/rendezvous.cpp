// run/rendezvous.cpp: hosting or joining the job's store; the launchers'
// agreement, failures, restarts and exit barrier through it.
#include "rendezvous.hpp"

#include <kizuna/error.hpp>
#include <kizuna/tcp_store.hpp>
#include <kizuna/tcp_store_server.hpp>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <sstream>

namespace kizuna::run {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kConnectAttempt{2'000};

std::string key(const std::string& name) { return "kizuna-run/" + name; }
std::string round_key(int round, const std::string& name) {
  return key("round" + std::to_string(round) + "/" + name);
}

Bytes bytes(const std::string& text) { return Bytes(text.begin(), text.end()); }
std::string text(const Bytes& value) { return std::string(value.begin(), value.end()); }

// "nnodes=2 nproc-per-node=4" -> {nnodes: 2, nproc-per-node: 4}
std::map<std::string, std::string> parse_config(const std::string& config) {
  std::map<std::string, std::string> out;
  std::istringstream in(config);
  std::string item;
  while (in >> item)
    if (const auto eq = item.find('='); eq != std::string::npos) out[item.substr(0, eq)] = item.substr(eq + 1);
  return out;
}

// Every field where node `other` differs from node `self`, as sentences.
std::string compare_config(int self, const std::string& mine, int other, const std::string& theirs) {
  const auto a = parse_config(mine);
  const auto b = parse_config(theirs);
  std::string out;
  for (const auto& [name, value] : a) {
    const auto it = b.find(name);
    const std::string other_value = it == b.end() ? "(none)" : it->second;
    if (other_value == value) continue;
    if (!out.empty()) out += "; ";
    out += "node " + std::to_string(other) + " has --" + name + " " + other_value + " but node " +
           std::to_string(self) + " has --" + name + " " + value;
  }
  return out;
}

std::string seconds(milliseconds d) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.3g s", static_cast<double>(d.count()) / 1000.0);
  return buffer;
}

// A free TCP port on every interface, held by a socket bound with
// SO_REUSEADDR that never listens; the socket is left in `fd`. While it is
// held, the kernel gives the port to no other bind to port 0 and refuses a
// plain bind to it, so no other job takes it before rank 0 starts; yet a
// server that sets SO_REUSEADDR too may bind it and listen, since Linux sees
// no conflict between two such sockets while neither listens. torch's
// TCPStore sets it (1.x's socket code and 2.x's libuv daemon alike).
// Dual-stack IPv6 first, where the TCPStore listens too; else IPv4.
int reserve_port(int& fd) {
  const int yes = 1;
  const int no = 0;
  fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    sockaddr_in6 any{};
    any.sin6_family = AF_INET6;
    any.sin6_addr = in6addr_any;
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &no, sizeof no);
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(fd, reinterpret_cast<const sockaddr*>(&any), sizeof any) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  if (fd < 0) {  // no IPv6 on this host
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in any{};
    any.sin_family = AF_INET;
    any.sin_addr.s_addr = htonl(INADDR_ANY);
    if (fd >= 0) ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (fd < 0 || ::bind(fd, reinterpret_cast<const sockaddr*>(&any), sizeof any) != 0) {
      const int error = errno;
      if (fd >= 0) ::close(fd);
      fd = -1;
      throw Error(ErrorCode::SystemError,
                  std::string("cannot reserve a port for MASTER_PORT: ") + std::strerror(error));
    }
  }
  sockaddr_storage bound{};
  socklen_t length = sizeof bound;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length);
  return bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<const sockaddr_in6&>(bound).sin6_port)
                                     : ntohs(reinterpret_cast<const sockaddr_in&>(bound).sin_port);
}

}  // namespace

Rendezvous::Rendezvous(const RunOptions& options, Idle idle) : options_(options), idle_(std::move(idle)) {
  if (options_.node_rank == 0) {
    TcpStoreOptions s;
    // One node and no address: loopback only. Otherwise every interface,
    // as torch's agent store does, so other nodes reach it.
    s.host = options_.nnodes == 1 && options_.master_addr.empty() ? "127.0.0.1" : "";
    s.port = options_.master_port < 0 ? 0 : options_.master_port;
    server_ = std::make_unique<TcpStoreServer>(s);
    port_ = server_->port();
    std::random_device entropy;
    char id[17];
    std::snprintf(id, sizeof id, "%08x", static_cast<unsigned>(entropy()));
    run_id_ = id;
  } else {
    port_ = options_.master_port;
  }
  if (!multi_node()) return;

  // Connect in short attempts, so that a signal stops the wait for node 0.
  const auto started = Clock::now();
  const auto deadline = started + options_.timeout;
  for (int tries = 1;; ++tries) {
    TcpStoreOptions c;
    c.host = options_.node_rank == 0 ? "127.0.0.1" : options_.master_addr;
    c.port = port_;
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    c.timeout = std::max(milliseconds(1), std::min(kConnectAttempt, left));
    try {
      client_ = std::make_unique<TcpStore>(c);
      break;
    } catch (const Error& e) {
      if (e.code() != ErrorCode::Timeout || Clock::now() >= deadline) {
        const auto waited = std::chrono::duration_cast<milliseconds>(Clock::now() - started);
        throw Error(e.code(), "node " + std::to_string(options_.node_rank) + " cannot reach node 0's store at " +
                                  store_address() + ": tried for " + seconds(waited) + " (" + std::to_string(tries) +
                                  (tries == 1 ? " try" : " tries") + "; --timeout " + seconds(options_.timeout) +
                                  "), the last: " + e.what());
      }
      idle_(kPollInterval);
    }
  }
  client_->set_timeout(options_.timeout);
  if (options_.node_rank == 0) {
    client_->set(key("run"), bytes(run_id_));
  } else {
    poll_until([&] { return client_->check({key("run")}); }, deadline, [] { return "node 0's run id"; });
    run_id_ = text(client_->get(key("run")));
  }
}

Rendezvous::~Rendezvous() {
  if (reservation_fd_ >= 0) ::close(reservation_fd_);
}

std::string Rendezvous::store_address() const {
  const std::string host = options_.store_host();
  const std::string port = std::to_string(port_);
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + port;
  return host + ":" + port;
}

std::string Rendezvous::round_prefix(int round) const {
  return "run" + run_id_ + "/round" + std::to_string(round);
}

std::string Rendezvous::config_text() const {
  return "nnodes=" + std::to_string(options_.nnodes) +
         " nproc-per-node=" + std::to_string(options_.nproc_per_node) +
         " max-restarts=" + std::to_string(options_.max_restarts);
}

void Rendezvous::poll_until(const std::function<bool()>& done, Clock::time_point deadline,
                            const std::function<std::string()>& what) {
  while (!done()) {
    if (Clock::now() >= deadline)
      throw Error(ErrorCode::Timeout, "node " + std::to_string(options_.node_rank) + " timed out after " +
                                          seconds(options_.timeout) + " (--timeout) waiting for " + what());
    idle_(kPollInterval);
  }
}

void Rendezvous::agree() {
  if (!multi_node()) return;
  const int self = options_.node_rank;
  const auto deadline = Clock::now() + options_.timeout;
  if (client_->add(key("claim/" + std::to_string(self)), 1) != 1)
    throw Error(ErrorCode::Mismatch, "node rank " + std::to_string(self) +
                                         " is taken twice: two kizuna-run share --node-rank " +
                                         std::to_string(self));
  const std::string mine = config_text();
  client_->set(key("config/" + std::to_string(self)), bytes(mine));

  if (self != 0) {
    // Node 0's settings are the job's; then node 0's verdict on everyone's.
    const std::string config0 = key("config/0");
    poll_until([&] { return client_->check({config0}); }, deadline, [] { return "node 0's settings"; });
    const std::string theirs = text(client_->get(config0));
    // Said once this node knows the outcome, so that node 0, on a
    // disagreement, keeps the store up until every node has read it.
    const std::string checked = key("checked/" + std::to_string(self));
    if (const std::string problem = compare_config(self, mine, 0, theirs); !problem.empty()) {
      client_->set(checked, bytes("1"));
      throw Error(ErrorCode::Mismatch, "nodes disagree: " + problem);
    }
    poll_until([&] { return client_->check({key("verdict")}); }, deadline,
               [] { return "node 0's check of every node's settings"; });
    const std::string verdict = text(client_->get(key("verdict")));
    client_->set(checked, bytes("1"));
    if (verdict != "ok") throw Error(ErrorCode::Mismatch, verdict);
    return;
  }

  std::vector<std::string> keys;
  for (int k = 1; k < options_.nnodes; ++k) keys.push_back(key("config/" + std::to_string(k)));
  try {
    poll_until([&] { return client_->check(keys); }, deadline, [&] {
      std::string missing;
      for (int k = 1; k < options_.nnodes; ++k)
        if (!client_->check({keys[k - 1]})) missing += (missing.empty() ? "" : ", ") + std::to_string(k);
      return "nodes " + missing + " to join";
    });
  } catch (const Error& e) {
    client_->set(key("verdict"), bytes(std::string("node 0 gave up: ") + e.what()));
    throw;
  }
  std::string problems;
  for (int k = 1; k < options_.nnodes; ++k) {
    const std::string problem = compare_config(0, mine, k, text(client_->get(keys[k - 1])));
    if (!problem.empty()) problems += (problems.empty() ? "" : "; ") + problem;
  }
  const std::string verdict = problems.empty() ? "ok" : "nodes disagree: " + problems;
  client_->set(key("verdict"), bytes(verdict));
  if (verdict == "ok") return;
  std::vector<std::string> checked;
  for (int k = 1; k < options_.nnodes; ++k) checked.push_back(key("checked/" + std::to_string(k)));
  const auto told = Clock::now() + kLeaveTimeout;
  while (!client_->check(checked) && Clock::now() < told) idle_(kPollInterval);
  throw Error(ErrorCode::Mismatch, verdict);
}

int Rendezvous::master_port(int round) {
  if (round == master_port_round_) return master_port_;
  const std::string k = round_key(round, "master-port");
  if (options_.node_rank == 0) {
    // The new port is reserved before the old one is let go, so the two differ.
    int fd = -1;
    const int port = reserve_port(fd);
    if (reservation_fd_ >= 0) ::close(reservation_fd_);
    reservation_fd_ = fd;
    master_port_ = port;
    if (client_) client_->set(k, bytes(std::to_string(port)));
  } else {
    const auto deadline = Clock::now() + options_.timeout;
    poll_until([&] { return client_->check({k}) || client_->check({key("over")}); }, deadline,
               [&] { return "node 0's MASTER_PORT for round " + std::to_string(round); });
    if (auto why = over()) throw Error(ErrorCode::Aborted, "the job is over: " + *why);
    const std::string value = text(client_->get(k));
    char* end = nullptr;
    const long port = std::strtol(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || port < 1 || port > 65535)
      throw Error(ErrorCode::InvalidArgument, "node 0 published MASTER_PORT '" + value + "' for round " +
                                                  std::to_string(round) + ", not a port");
    master_port_ = static_cast<int>(port);
  }
  master_port_round_ = round;
  return master_port_;
}

void Rendezvous::report_failure(int round, const std::string& what) {
  if (client_) client_->compare_set(round_key(round, "failed"), {}, bytes(what));
}

std::optional<std::string> Rendezvous::failure(int round) {
  if (!client_) return std::nullopt;
  const std::string k = round_key(round, "failed");
  if (!client_->check({k})) return std::nullopt;
  return text(client_->get(k));
}

void Rendezvous::announce_over(const std::string& why) {
  if (client_) client_->compare_set(key("over"), {}, bytes(why));
}

std::optional<std::string> Rendezvous::over() {
  if (!client_ || !client_->check({key("over")})) return std::nullopt;
  return text(client_->get(key("over")));
}

void Rendezvous::mark_done(int round) {
  if (client_) client_->set(round_key(round, "done/" + std::to_string(options_.node_rank)), bytes("1"));
}

bool Rendezvous::all_done(int round) {
  if (!client_) return true;
  std::vector<std::string> keys;
  for (int k = 0; k < options_.nnodes; ++k) keys.push_back(round_key(round, "done/" + std::to_string(k)));
  return client_->check(keys);
}

void Rendezvous::leave(milliseconds timeout) {
  if (!client_) return;
  if (options_.node_rank != 0) {
    client_->set(key("left/" + std::to_string(options_.node_rank)), bytes("1"));
    return;
  }
  std::vector<std::string> keys;
  for (int k = 1; k < options_.nnodes; ++k) keys.push_back(key("left/" + std::to_string(k)));
  const auto deadline = Clock::now() + timeout;
  while (!client_->check(keys) && Clock::now() < deadline) idle_(kPollInterval);
}

}  // namespace kizuna::run
