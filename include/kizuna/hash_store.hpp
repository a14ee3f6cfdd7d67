// kizuna/hash_store.hpp: a Store that lives in this process.
//
// HashStore keeps keys in a hash map behind one mutex; get, wait and
// multi_get block on a condition variable until their keys exist or their
// deadline passes (then kizuna::Error(Timeout) naming the missing keys).
// It is what unit tests rendezvous through when ranks are threads, and the
// reference the TcpStore is tested against: both behave the same.
//
// Ownership: share it (std::shared_ptr) between the threads that use it.
// Threading: every method may be called from any thread at any time.
#pragma once

#include <kizuna/store.hpp>

#include <memory>

namespace kizuna {

class HashStore : public Store {
 public:
  HashStore();
  ~HashStore() override;
  HashStore(const HashStore&) = delete;
  HashStore& operator=(const HashStore&) = delete;

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

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace kizuna
