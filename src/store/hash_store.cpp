#include <kizuna/hash_store.hpp>

#include <condition_variable>
#include <mutex>
#include <unordered_map>

#include "core/check.hpp"
#include "store/keys.hpp"

namespace kizuna {

struct HashStore::State {
  std::mutex mutex;
  std::condition_variable changed;  // notified whenever a key is created or changed
  std::unordered_map<std::string, Bytes> data;

  std::vector<std::string> missing_locked(const std::vector<std::string>& keys) const {
    std::vector<std::string> out;
    for (const auto& k : keys)
      if (!data.contains(k)) out.push_back(k);
    return out;
  }

  // Blocks until every key exists; throws Timeout naming the missing ones.
  void wait_locked(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
                   std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    const auto all_there = [&] {
      for (const auto& k : keys)
        if (!data.contains(k)) return false;
      return true;
    };
    if (!changed.wait_until(lock, deadline, all_there))
      throw Error(ErrorCode::Timeout,
                  store::timeout_message(timeout, keys, missing_locked(keys), " in HashStore"));
  }
};

HashStore::HashStore() : state_(std::make_unique<State>()) {}
HashStore::~HashStore() = default;

void HashStore::set(const std::string& key, const Bytes& value) {
  store::check_key(key);
  {
    std::lock_guard lock(state_->mutex);
    state_->data[key] = value;
  }
  state_->changed.notify_all();
}

Bytes HashStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  store::check_key(key);
  std::unique_lock lock(state_->mutex);
  state_->wait_locked(lock, {key}, timeout);
  return state_->data.at(key);
}

std::int64_t HashStore::add(const std::string& key, std::int64_t delta) {
  store::check_key(key);
  std::int64_t value = 0;
  {
    std::lock_guard lock(state_->mutex);
    const auto it = state_->data.find(key);
    std::string error;
    const auto sum =
        store::add_to_counter(key, it == state_->data.end() ? nullptr : &it->second, delta, error);
    if (!sum) throw Error(ErrorCode::InvalidArgument, error);
    value = *sum;
    state_->data[key] = store::counter_bytes(value);
  }
  state_->changed.notify_all();
  return value;
}

Bytes HashStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  store::check_key(key);
  Bytes after;
  bool changed = false;
  {
    std::lock_guard lock(state_->mutex);
    const auto it = state_->data.find(key);
    if (it == state_->data.end()) {
      if (expected.empty()) {
        state_->data[key] = desired;
        after = desired;
        changed = true;
      }
    } else {
      if (it->second == expected) {
        it->second = desired;
        changed = true;
      }
      after = it->second;
    }
  }
  if (changed) state_->changed.notify_all();
  return after;
}

void HashStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  store::check_keys(keys);
  std::unique_lock lock(state_->mutex);
  state_->wait_locked(lock, keys, timeout);
}

bool HashStore::check(const std::vector<std::string>& keys) {
  store::check_keys(keys);
  std::lock_guard lock(state_->mutex);
  return state_->missing_locked(keys).empty();
}

bool HashStore::delete_key(const std::string& key) {
  store::check_key(key);
  std::lock_guard lock(state_->mutex);
  return state_->data.erase(key) > 0;
}

std::int64_t HashStore::num_keys() {
  std::lock_guard lock(state_->mutex);
  return static_cast<std::int64_t>(state_->data.size());
}

std::vector<Bytes> HashStore::multi_get(const std::vector<std::string>& keys,
                                        std::chrono::milliseconds timeout) {
  store::check_keys(keys);
  std::unique_lock lock(state_->mutex);
  state_->wait_locked(lock, keys, timeout);
  std::vector<Bytes> values;
  values.reserve(keys.size());
  for (const auto& k : keys) values.push_back(state_->data.at(k));
  return values;
}

void HashStore::multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) {
  KIZUNA_CHECK_ARG(keys.size() == values.size(), "multi_set: ", keys.size(), " keys but ",
                   values.size(), " values");
  store::check_keys(keys);
  {
    std::lock_guard lock(state_->mutex);
    for (std::size_t i = 0; i < keys.size(); ++i) state_->data[keys[i]] = values[i];
  }
  state_->changed.notify_all();
}

void HashStore::append(const std::string& key, const Bytes& value) {
  store::check_key(key);
  {
    std::lock_guard lock(state_->mutex);
    Bytes& current = state_->data[key];
    current.insert(current.end(), value.begin(), value.end());
  }
  state_->changed.notify_all();
}

}  // namespace kizuna
