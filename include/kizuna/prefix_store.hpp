// kizuna/prefix_store.hpp: a Store seen through a key prefix.
//
// PrefixStore is a decorator (as in PyTorch c10d): every key `k` becomes
// "prefix/k" in the underlying store, so several communicators, or several
// rounds of one, share a store without their keys colliding. Prefix stores
// nest ("a/b/k"). num_keys() is the count of the whole underlying store, as
// in c10d: the store cannot count one prefix's keys without listing them.
//
// Ownership: holds a shared_ptr to the underlying store. Threading and
// blocking are the underlying store's; the timeout starts as the underlying
// store's and is kept separately afterwards.
#pragma once

#include <kizuna/store.hpp>

#include <memory>

namespace kizuna {

class PrefixStore : public Store {
 public:
  // Throws InvalidArgument when `base` is null.
  PrefixStore(std::string prefix, std::shared_ptr<Store> base);

  using Store::get;
  using Store::multi_get;
  using Store::set;
  using Store::wait;

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  std::int64_t num_keys() override;
  std::vector<Bytes> multi_get(const std::vector<std::string>& keys,
                               std::chrono::milliseconds timeout) override;
  void multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) override;
  void append(const std::string& key, const Bytes& value) override;

  const std::string& prefix() const { return prefix_; }
  const std::shared_ptr<Store>& base() const { return base_; }

 private:
  std::string full(const std::string& key) const;
  std::vector<std::string> full(const std::vector<std::string>& keys) const;

  std::string prefix_;
  std::shared_ptr<Store> base_;
};

}  // namespace kizuna
