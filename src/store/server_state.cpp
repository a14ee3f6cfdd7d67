#include "store/server_state.hpp"

#include <algorithm>

#include "core/check.hpp"
#include "store/keys.hpp"

namespace kizuna::store {

using wire::Op;
using wire::Reply;
using wire::Request;
using wire::Status;

ServerState::ServerState(wire::Limits limits, std::optional<int> world_size)
    : limits_(limits), world_size_(world_size) {}

bool ServerState::all_present(const std::vector<std::string>& keys) const {
  for (const auto& k : keys)
    if (!data_.contains(k)) return false;
  return true;
}

std::vector<std::string> ServerState::missing(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  for (const auto& k : keys)
    if (!data_.contains(k)) out.push_back(k);
  return out;
}

void ServerState::fail(Reply& reply, Status status, std::string message) const {
  reply.status = status;
  reply.values.clear();
  reply.keys.clear();
  reply.message = std::move(message);
  if (reply.message.size() > wire::kMaxKeyBytes) reply.message.resize(wire::kMaxKeyBytes);
}

bool ServerState::execute(const Request& r, Reply& reply, std::string_view client) {
  reply = Reply{};
  reply.op = r.op;
  reply.id = r.id;
  switch (r.op) {
    case Op::Set:
      data_[r.keys[0]] = r.values[0];
      changed(r.keys[0]);
      return true;

    case Op::Get:
    case Op::Wait:
    case Op::MultiGet:
      if (!all_present(r.keys)) return false;
      answer(r, reply);
      return true;

    case Op::Add: {
      const auto it = data_.find(r.keys[0]);
      std::string error;
      const auto sum =
          add_to_counter(r.keys[0], it == data_.end() ? nullptr : &it->second, r.number, error);
      if (!sum) {
        fail(reply, Status::InvalidArgument, error);
        return true;
      }
      data_[r.keys[0]] = counter_bytes(*sum);
      reply.number = *sum;
      changed(r.keys[0]);
      return true;
    }

    case Op::CompareSet: {
      const Bytes& expected = r.values[0];
      const Bytes& desired = r.values[1];
      const auto it = data_.find(r.keys[0]);
      if (it == data_.end()) {
        if (expected.empty()) {
          data_.emplace(r.keys[0], desired);
          reply.values.push_back(desired);
          changed(r.keys[0]);
        } else {
          reply.values.emplace_back();  // still missing: reads as empty
        }
      } else {
        const bool swap = it->second == expected;
        if (swap) it->second = desired;
        reply.values.push_back(it->second);
        if (swap) changed(r.keys[0]);
      }
      return true;
    }

    case Op::Check: reply.number = all_present(r.keys) ? 1 : 0; return true;

    case Op::Delete: reply.number = data_.erase(r.keys[0]) > 0 ? 1 : 0; return true;

    case Op::NumKeys: reply.number = num_keys(); return true;

    case Op::MultiSet:
      for (std::size_t i = 0; i < r.keys.size(); ++i) data_[r.keys[i]] = r.values[i];
      for (const auto& k : r.keys) changed(k);
      return true;

    case Op::Append: {
      const auto it = data_.find(r.keys[0]);
      const std::uint64_t size = (it == data_.end() ? 0 : it->second.size()) + r.values[0].size();
      if (size > limits_.max_value_bytes) {
        fail(
            reply, Status::TooLarge,
            core::concat("append would make key '", wire::printable(r.keys[0]), "' ", size,
                         " bytes, over this store's limit of ", limits_.max_value_bytes, " bytes"));
        return true;
      }
      Bytes& value = it == data_.end() ? data_[r.keys[0]] : it->second;
      value.insert(value.end(), r.values[0].begin(), r.values[0].end());
      changed(r.keys[0]);
      return true;
    }

    case Op::Join: {
      const int world = static_cast<int>(r.number);
      if (join_failure_) {
        fail(reply, Status::Mismatch, *join_failure_);
        ++join_refusals_;
        return true;
      }
      if (world_size_ && *world_size_ != world) {
        join_failure_ = core::concat("the client at ", client.empty() ? std::string_view("?") : client,
                                     " says world size ", world, ", this store expects ", *world_size_,
                                     " (", joined_, " joined): every rank must give the same WORLD_SIZE");
        fail(reply, Status::Mismatch, *join_failure_);
        ++join_refusals_;
        // Everyone held learns it now, not at their deadline.
        std::vector<Waiter*> waiting = std::move(joins_);
        joins_.clear();
        for (Waiter* w : waiting) {
          w->held_ = false;
          --num_waiters_;
          --joined_;
          ++join_refusals_;
          w->ready();
        }
        return true;
      }
      if (!world_size_) world_size_ = world;
      ++joined_;
      if (joined_ < *world_size_) return false;
      // The last one in: everyone held is answered now, this one below.
      std::vector<Waiter*> waiting = std::move(joins_);
      joins_.clear();
      for (Waiter* w : waiting) {
        w->held_ = false;
        --num_waiters_;
        w->ready();
      }
      answer(r, reply);
      return true;
    }

    case Op::ListKeys: {
      std::vector<std::string> keys;
      for (const auto& [k, v] : data_)
        if (k.compare(0, r.prefix.size(), r.prefix) == 0) keys.push_back(k);
      std::sort(keys.begin(), keys.end());
      constexpr std::size_t kMaxListBytes = 4u << 20;
      std::size_t bytes = 0, n = 0;
      while (n < keys.size() && n < wire::kMaxBatchKeys &&
             bytes + keys[n].size() + 4 <= kMaxListBytes)
        bytes += keys[n++].size() + 4;
      reply.number = n < keys.size() ? 1 : 0;
      keys.resize(n);
      reply.keys = std::move(keys);
      return true;
    }

    case Op::Ping: return true;

    case Op::Hello:
    case Op::Auth:
    case Op::AuthOk: break;
  }
  fail(reply, Status::InvalidArgument,
       core::concat("opcode ", static_cast<int>(r.op), " is not a request"));
  return true;
}

void ServerState::answer(const Request& r, Reply& reply) const {
  reply = Reply{};
  reply.op = r.op;
  reply.id = r.id;
  switch (r.op) {
    case Op::Get: reply.values.push_back(data_.at(r.keys[0])); break;
    case Op::MultiGet: {
      std::uint64_t bytes = 0;
      for (const auto& k : r.keys) bytes += data_.at(k).size() + 4;
      if (bytes > limits_.max_body_bytes() - 8) {
        fail(reply, Status::TooLarge,
             core::concat("multi_get of ", r.keys.size(), " keys would return ", bytes,
                          " bytes, over this store's frame limit of ", limits_.max_body_bytes(),
                          " bytes; fetch fewer keys at once"));
        break;
      }
      reply.values.reserve(r.keys.size());
      for (const auto& k : r.keys) reply.values.push_back(data_.at(k));
      break;
    }
    case Op::Join:
      if (join_failure_) fail(reply, Status::Mismatch, *join_failure_);
      else reply.number = joined_;
      break;
    default: break;
  }
}

void ServerState::timed_out(const Request& r, Reply& reply) const {
  reply = Reply{};
  reply.op = r.op;
  reply.id = r.id;
  reply.status = Status::Timeout;
  if (r.op == Op::Join) {
    reply.message = core::concat(joined_, " of ", world_size_.value_or(0), " clients joined");
    return;
  }
  reply.keys = missing(r.keys);
  if (reply.keys.size() > 16) reply.keys.resize(16);  // enough to name them in a message
}

bool ServerState::file(Waiter& w) {
  const auto& keys = w.request_->keys;
  for (; w.cursor_ < keys.size(); ++w.cursor_) {
    if (!data_.contains(keys[w.cursor_])) {
      w.filed_under_ = keys[w.cursor_];
      by_key_[w.filed_under_].push_back(&w);
      return true;
    }
  }
  // The keys before the cursor were there when it passed them; one may have
  // been deleted since.
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (!data_.contains(keys[i])) {
      w.cursor_ = i;
      w.filed_under_ = keys[i];
      by_key_[w.filed_under_].push_back(&w);
      return true;
    }
  }
  return false;
}

void ServerState::hold(Waiter& w, const Request& request) {
  KIZUNA_CHECK(!w.held_, "a waiter is held twice");
  w.request_ = &request;
  w.cursor_ = 0;
  w.filed_under_.clear();
  w.held_ = true;
  ++num_waiters_;
  if (request.op == Op::Join) {
    joins_.push_back(&w);
    return;
  }
  const bool filed = file(w);
  KIZUNA_CHECK(filed, "held a request whose keys are all present");
}

void ServerState::release(Waiter& w) {
  if (!w.held_) return;
  w.held_ = false;
  --num_waiters_;
  if (w.request_->op == Op::Join) {
    std::erase(joins_, &w);
    --joined_;
    return;
  }
  const auto it = by_key_.find(w.filed_under_);
  if (it == by_key_.end()) return;
  std::erase(it->second, &w);
  if (it->second.empty()) by_key_.erase(it);
}

void ServerState::changed(const std::string& key) {
  const auto it = by_key_.find(key);
  if (it == by_key_.end()) return;
  std::vector<Waiter*> woken = std::move(it->second);
  by_key_.erase(it);
  for (Waiter* w : woken) {
    if (file(*w)) continue;  // still missing another key: filed under that one
    w->held_ = false;
    --num_waiters_;
    w->ready();
  }
}

}  // namespace kizuna::store
