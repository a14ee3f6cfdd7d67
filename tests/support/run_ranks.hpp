// tests/support/run_ranks.hpp: ranks as threads.
//
// run_ranks(n, fn) runs fn(rank) on n threads and rethrows the lowest
// rank's exception once every thread has finished.
// make_comms(n, options[, adjust]) creates n communicators over one
// HashStore (the creation is collective, so it happens on n threads at
// once).
#pragma once

#include <kizuna/comm.hpp>
#include <kizuna/hash_store.hpp>

#include <exception>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

namespace kizuna::test {

template <typename Fn>
void run_ranks(int n, Fn&& fn) {
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// `adjust`, when given, changes one rank's options before it creates its
// communicator.
inline std::vector<std::shared_ptr<Communicator>> make_comms(
    int n, CommOptions options = {}, const std::function<void(int rank, CommOptions&)>& adjust = {}) {
  if (!options.store) options.store = std::make_shared<HashStore>();
  if (options.name.empty()) {
    static int counter = 0;
    options.name = "test/comm" + std::to_string(counter++);
  }
  std::vector<std::shared_ptr<Communicator>> comms(n);
  run_ranks(n, [&](int r) {
    CommOptions mine = options;
    mine.rank = r;
    mine.world_size = n;
    if (adjust) adjust(r, mine);
    comms[r] = Communicator::create(mine);
  });
  return comms;
}

}  // namespace kizuna::test
