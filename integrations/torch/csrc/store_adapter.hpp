// integrations/torch/csrc/store_adapter.hpp: torch's c10d::Store seen as a
// kizuna::Store.
//
// C10dStoreAdapter lets a kizuna Communicator rendezvous through the store
// that torch.distributed hands to a backend creator (a c10d::PrefixStore over
// the TCPStore, FileStore or HashStore of init_process_group), so the backend
// opens no second rendezvous port. Every kizuna::Store method is built from
// c10d::Store's set/get/add/compareSet/wait/check/deleteKey/getNumKeys:
//
//   get(key, timeout)       wait({key}, timeout), then get(key)
//   multi_get(keys, t)      wait(keys, t), then get() each key
//   multi_set               set() each key, in order
//   append                  a compareSet loop (read, extend, swap; retry on a race)
//   compare_set, add, ...   one c10d call each
//
// Deadlines: c10d's get() waits for the c10d store's own timeout, so every
// waiting call first waits with kizuna's timeout (at least 1 ms: c10d reads a
// zero timeout as "forever"). On a TCPStore (or PrefixStores over one) that
// wait polls check(), with pauses from 0.2 ms doubling to 10 ms, instead of
// calling c10d's wait(keys, timeout): torch 1.13's TCPStore client gives
// such a wait up while the server keeps it, and the server's late answer is
// then read by the next request as its own (a check() says a missing key is
// there, and every answer after it is one request late). Other stores keep
// c10d's wait (a FileStore's check() blocks until its file exists). A wait
// whose keys are still missing at its deadline is kizuna::Error(Timeout)
// naming the keys and the timeout (one whose keys are there by the time it
// looks succeeds); any other c10d failure (a lost store connection) is
// kizuna::Error(SystemError) carrying c10d's message. kizuna code, which
// reacts to error codes, thus sees the same errors from this store as from
// its own TcpStore.
//
// Ownership and threading: holds a reference to the c10d store for as long as
// it lives. Calls may come from any thread (kizuna's worker uses the store
// when it explains a timeout); c10d's TCPStore serialises them on its
// connection. This file depends only on c10d::Store, PrefixStore and
// TCPStore, which are the same in torch 1.13 and 2.x.
#pragma once

#include <kizuna/store.hpp>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>
#include <vector>

namespace kizuna_torch {

class C10dStoreAdapter final : public kizuna::Store {
 public:
  // The kizuna timeout starts as the c10d store's.
  explicit C10dStoreAdapter(c10::intrusive_ptr<c10d::Store> store);

  using kizuna::Store::get;
  using kizuna::Store::multi_get;
  using kizuna::Store::set;
  using kizuna::Store::wait;

  void set(const std::string& key, const kizuna::Bytes& value) override;
  kizuna::Bytes get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  kizuna::Bytes compare_set(const std::string& key, const kizuna::Bytes& expected,
                            const kizuna::Bytes& desired) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  std::int64_t num_keys() override;
  std::vector<kizuna::Bytes> multi_get(const std::vector<std::string>& keys,
                                       std::chrono::milliseconds timeout) override;
  void multi_set(const std::vector<std::string>& keys,
                 const std::vector<kizuna::Bytes>& values) override;
  void append(const std::string& key, const kizuna::Bytes& value) override;

  const c10::intrusive_ptr<c10d::Store>& c10d_store() const { return store_; }

 private:
  void poll_until_present(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);

  c10::intrusive_ptr<c10d::Store> store_;
  bool poll_;  // wait by polling check(): a TCPStore (see "Deadlines")
};

}  // namespace kizuna_torch
