#include <kizuna/prefix_store.hpp>

#include "core/check.hpp"

namespace kizuna {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> base)
    : prefix_(std::move(prefix)), base_(std::move(base)) {
  KIZUNA_CHECK_ARG(base_ != nullptr, "PrefixStore '", prefix_, "' needs an underlying store");
  timeout_ = base_->timeout();
}

std::string PrefixStore::full(const std::string& key) const {
  KIZUNA_CHECK_ARG(!key.empty(), "store keys cannot be empty");
  return prefix_ + "/" + key;
}

std::vector<std::string> PrefixStore::full(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(full(k));
  return out;
}

void PrefixStore::set(const std::string& key, const Bytes& value) { base_->set(full(key), value); }

Bytes PrefixStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  return base_->get(full(key), timeout);
}

std::int64_t PrefixStore::add(const std::string& key, std::int64_t delta) {
  return base_->add(full(key), delta);
}

Bytes PrefixStore::compare_set(const std::string& key, const Bytes& expected,
                               const Bytes& desired) {
  return base_->compare_set(full(key), expected, desired);
}

void PrefixStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  base_->wait(full(keys), timeout);
}

bool PrefixStore::check(const std::vector<std::string>& keys) { return base_->check(full(keys)); }

bool PrefixStore::delete_key(const std::string& key) { return base_->delete_key(full(key)); }

std::int64_t PrefixStore::num_keys() { return base_->num_keys(); }

std::vector<Bytes> PrefixStore::multi_get(const std::vector<std::string>& keys,
                                          std::chrono::milliseconds timeout) {
  return base_->multi_get(full(keys), timeout);
}

void PrefixStore::multi_set(const std::vector<std::string>& keys,
                            const std::vector<Bytes>& values) {
  base_->multi_set(full(keys), values);
}

void PrefixStore::append(const std::string& key, const Bytes& value) {
  base_->append(full(key), value);
}

}  // namespace kizuna
