#include "store_adapter.hpp"

#include <kizuna/error.hpp>

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <chrono>
#include <exception>
#include <sstream>
#include <thread>
#include <utility>

namespace kizuna_torch {
namespace {

using kizuna::Bytes;
using kizuna::Error;
using kizuna::ErrorCode;

std::string join(const std::vector<std::string>& keys) {
  std::ostringstream out;
  for (std::size_t i = 0; i < keys.size(); ++i) out << (i ? ", " : "") << '"' << keys[i] << '"';
  return out.str();
}

// c10d's exceptions as kizuna's: c10::Error's text without its C++ backtrace.
[[noreturn]] void rethrow_as_kizuna(const char* call, const std::string& key) {
  try {
    throw;
  } catch (const Error&) {
    throw;
  } catch (const c10::Error& e) {
    throw Error(ErrorCode::SystemError, std::string("c10d store ") + call + "(\"" + key +
                                            "\") failed: " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    throw Error(ErrorCode::SystemError,
                std::string("c10d store ") + call + "(\"" + key + "\") failed: " + e.what());
  }
}

template <typename Fn>
auto guarded(const char* call, const std::string& key, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (...) {
    rethrow_as_kizuna(call, key);
  }
}

// A wait whose keys are still missing at its deadline.
[[noreturn]] void throw_wait_timeout(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  throw Error(ErrorCode::Timeout,
              "timed out after " + std::to_string(timeout.count()) + " ms waiting for store key(s) " + join(keys));
}

// Whether `store` is a TCPStore, or PrefixStores over one.
bool over_tcp_store(c10::intrusive_ptr<c10d::Store> store) {
  for (int depth = 0; store && depth < 64; ++depth) {
    if (dynamic_cast<c10d::TCPStore*>(store.get()) != nullptr) return true;
    auto* prefix = dynamic_cast<c10d::PrefixStore*>(store.get());
    if (prefix == nullptr) return false;
    store = prefix->getUnderlyingStore();
  }
  return false;
}

}  // namespace

C10dStoreAdapter::C10dStoreAdapter(c10::intrusive_ptr<c10d::Store> store)
    : store_(std::move(store)), poll_(over_tcp_store(store_)) {
  if (!store_) throw Error(ErrorCode::InvalidArgument, "C10dStoreAdapter: the c10d store is null");
  const auto t = store_->getTimeout();
  // c10d's zero timeout means "no timeout"; kizuna's deadlines are finite.
  if (t.count() > 0) set_timeout(t);
}

void C10dStoreAdapter::set(const std::string& key, const Bytes& value) {
  guarded("set", key, [&] { store_->set(key, value); });
}

Bytes C10dStoreAdapter::get(const std::string& key, std::chrono::milliseconds timeout) {
  wait({key}, timeout);
  return guarded("get", key, [&] { return store_->get(key); });
}

std::int64_t C10dStoreAdapter::add(const std::string& key, std::int64_t delta) {
  return guarded("add", key, [&] { return store_->add(key, delta); });
}

Bytes C10dStoreAdapter::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  return guarded("compareSet", key, [&] { return store_->compareSet(key, expected, desired); });
}

void C10dStoreAdapter::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  if (keys.empty()) return;
  const auto bounded = std::max(timeout, std::chrono::milliseconds(1));
  if (poll_) {
    poll_until_present(keys, bounded);
    return;
  }
  try {
    store_->wait(keys, bounded);
    return;
  } catch (...) {
    // Tell a deadline from a broken store: are the keys still missing? Keys
    // that came just after the deadline are a wait that succeeded (kizuna
    // waits in short slices while it watches for a failure, so this race is
    // common), not a broken store.
    bool present = false;
    try {
      present = store_->check(keys);
    } catch (...) {
      rethrow_as_kizuna("wait", keys.front());
    }
    if (present) return;
  }
  throw_wait_timeout(keys, bounded);
}

// A TCPStore's wait, by check() (see the header): a key set soon after the
// first look is seen soon, and a long wait costs the store one request
// every kMaxPause.
void C10dStoreAdapter::poll_until_present(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  constexpr auto kFirstPause = std::chrono::microseconds(200);
  constexpr auto kMaxPause = std::chrono::microseconds(10000);
  const auto deadline = Clock::now() + timeout;
  auto pause = kFirstPause;
  for (;;) {
    if (check(keys)) return;
    const auto now = Clock::now();
    if (now >= deadline) break;
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, kMaxPause);
  }
  throw_wait_timeout(keys, timeout);
}

bool C10dStoreAdapter::check(const std::vector<std::string>& keys) {
  return guarded("check", keys.empty() ? std::string() : keys.front(),
                 [&] { return store_->check(keys); });
}

bool C10dStoreAdapter::delete_key(const std::string& key) {
  return guarded("deleteKey", key, [&] { return store_->deleteKey(key); });
}

std::int64_t C10dStoreAdapter::num_keys() {
  return guarded("getNumKeys", "", [&] { return store_->getNumKeys(); });
}

std::vector<Bytes> C10dStoreAdapter::multi_get(const std::vector<std::string>& keys,
                                               std::chrono::milliseconds timeout) {
  wait(keys, timeout);
  std::vector<Bytes> values;
  values.reserve(keys.size());
  for (const auto& key : keys) values.push_back(guarded("get", key, [&] { return store_->get(key); }));
  return values;
}

void C10dStoreAdapter::multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) {
  if (keys.size() != values.size())
    throw Error(ErrorCode::InvalidArgument, "multi_set: " + std::to_string(keys.size()) + " keys but " +
                                                std::to_string(values.size()) + " values");
  for (std::size_t i = 0; i < keys.size(); ++i) set(keys[i], values[i]);
}

void C10dStoreAdapter::append(const std::string& key, const Bytes& value) {
  // c10d::Store (torch 1.13) has no append: swap in the extended value and
  // retry when another writer got there first. compareSet returns the value
  // after the call, so success is "the store now holds what we wrote".
  for (;;) {
    Bytes current;
    if (check({key})) current = get(key);
    Bytes desired = current;
    desired.insert(desired.end(), value.begin(), value.end());
    if (compare_set(key, current, desired) == desired) return;
  }
}

}  // namespace kizuna_torch
