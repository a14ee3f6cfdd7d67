// kizuna/store.hpp: the key-value store that ranks rendezvous through.
//
// Store is the abstract interface (after PyTorch c10d's Store): ranks
// publish their addresses under keys and read everyone else's; counters
// (add) and blocking reads (get, wait) make barriers. Values are bytes.
//
// Implementations: TcpStore (a client of a TcpStoreServer, include
// kizuna/tcp_store.hpp), HashStore (in process, for tests), and PrefixStore
// (a decorator that puts every key under "prefix/", so many communicators
// can share one store).
//
// Blocking and deadlines: get, multi_get and wait block until their keys
// exist, for at most timeout() (or the timeout given); then they throw
// kizuna::Error(Timeout) naming the missing keys. Every other call returns
// as soon as the store has answered; a store that stops answering is a
// SystemError or PeerLost, never a hang.
//
// Threading: every method may be called from any thread; a TcpStore
// serialises calls on its connection.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kizuna {

using Bytes = std::vector<std::uint8_t>;

class Store {
 public:
  static constexpr std::chrono::milliseconds kDefaultTimeout{60'000};

  virtual ~Store() = default;

  virtual void set(const std::string& key, const Bytes& value) = 0;

  // Waits until `key` exists, then returns its value.
  virtual Bytes get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  Bytes get(const std::string& key) { return get(key, timeout()); }

  // Atomically adds `delta` to the integer stored at `key` (a missing key is
  // 0) and returns the new value. The value is stored as decimal text, as
  // PyTorch's TCPStore does, so `get` of a counter reads "42".
  virtual std::int64_t add(const std::string& key, std::int64_t delta) = 0;

  // If the current value equals `expected` (a missing key equals an empty
  // `expected`), sets `desired`. Returns the value after the call.
  virtual Bytes compare_set(const std::string& key, const Bytes& expected,
                            const Bytes& desired) = 0;

  // Waits until every key exists.
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout()); }

  // True when every key exists; never blocks.
  virtual bool check(const std::vector<std::string>& keys) = 0;

  // Returns whether the key existed.
  virtual bool delete_key(const std::string& key) = 0;

  virtual std::int64_t num_keys() = 0;

  // Waits until every key exists; values in the order of `keys`.
  virtual std::vector<Bytes> multi_get(const std::vector<std::string>& keys,
                                       std::chrono::milliseconds timeout) = 0;
  std::vector<Bytes> multi_get(const std::vector<std::string>& keys) {
    return multi_get(keys, timeout());
  }

  virtual void multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) = 0;

  // Appends to the value at `key` (creating it).
  virtual void append(const std::string& key, const Bytes& value) = 0;

  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }

  // Text conveniences.
  void set(const std::string& key, std::string_view value) {
    set(key, Bytes(value.begin(), value.end()));
  }
  std::string get_string(const std::string& key) {
    const Bytes value = get(key);
    return std::string(value.begin(), value.end());
  }

  // "tcp://host:port" (or "host:port"): a TcpStore client of a running server.
  static std::shared_ptr<Store> from_url(const std::string& url);

  // From the launcher's variables: MASTER_ADDR and MASTER_PORT (or
  // KIZUNA_STORE=host:port), RANK and WORLD_SIZE (or Open MPI's / Slurm's).
  // Rank 0 hosts the TcpStoreServer in this process, on its own thread, for
  // as long as the returned store lives; every rank, 0 included, is a client.
  static std::shared_ptr<Store> from_env();

 protected:
  std::chrono::milliseconds timeout_ = kDefaultTimeout;
};

}  // namespace kizuna
