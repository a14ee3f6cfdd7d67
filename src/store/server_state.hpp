// store/server_state.hpp: what a TcpStoreServer knows, without any I/O.
//
// ServerState is the key-value map, the join count and the requests held
// until they can be answered. The server's I/O thread is its only user, so
// it has no lock. A request is executed once; if it must wait (a get, wait
// or multi_get whose keys are missing, a join short of the world size), the
// caller holds it with hold(), and ServerState calls the Waiter's ready()
// when it can be answered, or the caller releases it (its deadline passed,
// its connection closed) and nothing of it is left.
//
// A held request is filed under one of its missing keys at a time (the
// first one); when that key appears it moves on to the next missing one, so
// a multi_get of n keys is woken at most n times, and waking costs nothing
// for requests waiting on other keys.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "store/wire.hpp"

namespace kizuna::store {

class Waiter {
 public:
  virtual ~Waiter() = default;

  // The held request can be answered now: call ServerState::answer(). Runs
  // inside the ServerState call that made it ready, which is iterating over
  // waiters: it must not release() or hold() any waiter, nor execute().
  virtual void ready() = 0;

  bool held() const { return held_; }

 private:
  friend class ServerState;
  const wire::Request* request_ = nullptr;
  std::size_t cursor_ = 0;   // keys before it were there at the last look
  std::string filed_under_;  // the missing key it waits on ("" for a join)
  bool held_ = false;
};

class ServerState {
 public:
  ServerState(wire::Limits limits, std::optional<int> world_size);
  ServerState(const ServerState&) = delete;
  ServerState& operator=(const ServerState&) = delete;

  // Executes `request` into `reply` (its op and id filled in). Returns false
  // when the request must wait; `reply` is then untouched and the caller
  // holds it. `client` names the sender in errors ("127.0.0.1:5555").
  //
  // A join that announces another world size than the store's is refused,
  // and so is every join held or still to come: each rank learns at once,
  // naming the client and both sizes, rather than at its deadline.
  bool execute(const wire::Request& request, wire::Reply& reply, std::string_view client = {});

  // The answer to a waiting request that is ready (no side effects).
  void answer(const wire::Request& request, wire::Reply& reply) const;
  // The Timeout reply of a held request whose deadline passed.
  void timed_out(const wire::Request& request, wire::Reply& reply) const;

  // `request` must outlive the hold (it belongs to the waiter's owner).
  void hold(Waiter& waiter, const wire::Request& request);
  // Forgets a held waiter (no-op when it is not held). A join that is
  // released before it completed is no longer counted.
  void release(Waiter& waiter);

  std::int64_t num_keys() const { return static_cast<std::int64_t>(data_.size()); }
  std::int64_t num_waiters() const { return num_waiters_; }
  std::int64_t num_joined() const { return joined_; }
  // Joins answered with a refusal (see execute()).
  std::int64_t num_join_refusals() const { return join_refusals_; }

 private:
  bool all_present(const std::vector<std::string>& keys) const;
  std::vector<std::string> missing(const std::vector<std::string>& keys) const;
  // A key was created or changed: wake (or refile) the waiters filed under it.
  void changed(const std::string& key);
  // Files `waiter` under its first missing key from its cursor; false when none is missing.
  bool file(Waiter& waiter);
  void fail(wire::Reply& reply, wire::Status status, std::string message) const;

  wire::Limits limits_;
  std::optional<int> world_size_;
  std::int64_t joined_ = 0;
  std::optional<std::string> join_failure_;  // why joins are refused, once one was
  std::int64_t join_refusals_ = 0;
  std::unordered_map<std::string, wire::Bytes> data_;
  std::unordered_map<std::string, std::vector<Waiter*>> by_key_;
  std::vector<Waiter*> joins_;
  std::int64_t num_waiters_ = 0;
};

}  // namespace kizuna::store
