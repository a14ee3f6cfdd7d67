#include "comm/store_barrier.hpp"

#include <vector>

#include "core/log.hpp"

namespace kizuna::comm {

bool store_barrier_within(Store& store, const std::string& key, int rank, int world,
                          std::chrono::milliseconds wait) noexcept {
  try {
    store.set(key + "/" + std::to_string(rank), std::string_view("1"));
    std::vector<std::string> keys;
    for (int r = 0; r < world; ++r)
      if (r != rank) keys.push_back(key + "/" + std::to_string(r));
    if (!keys.empty()) store.wait(keys, wait);
    return true;
  } catch (const std::exception& e) {
    KIZUNA_LOG(Debug) << "rank " << rank << " leaves " << key << " without every rank: " << e.what();
    return false;
  }
}

}  // namespace kizuna::comm
