// The step-table cache of CUDA IPC launches (core/device_table_cache.hpp),
// with a host "device" that records what it holds: a launch never points
// at a table that another part of the same launch freed, however many
// distinct tables came before.
#include <catch2/catch.hpp>

#include <kizuna/error.hpp>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/device_table_cache.hpp"

using namespace kizuna;
using kizuna::core::DeviceTableCache;

namespace {

// A device whose copies are host strings, each alive until freed; waits
// for idleness are counted.
struct FakeDevice {
  std::set<std::string*> alive;
  int waits = 0;
  int uploads = 0;

  DeviceTableCache::Device device() {
    return {[this](std::string_view bytes) -> void* {
              ++uploads;
              auto* copy = new std::string(bytes);
              alive.insert(copy);
              return copy;
            },
            [this](void* p) {
              auto* copy = static_cast<std::string*>(p);
              REQUIRE(alive.erase(copy) == 1);
              delete copy;
            },
            [this] { ++waits; }};
  }
};

std::string table(int shape) { return "steps of shape " + std::to_string(shape); }

// One launch of `shapes`: reserve, then place each part's table; returns
// what each part points at.
std::vector<void*> launch(DeviceTableCache& cache, const std::vector<std::string>& tables) {
  std::vector<std::string_view> views(tables.begin(), tables.end());
  cache.reserve(views);
  std::vector<void*> pointers;
  for (const std::string& t : tables) pointers.push_back(cache.place(t));
  return pointers;
}

}  // namespace

TEST_CASE("device table cache: a launch's tables all stay alive past a full cache", "[core][cuda]") {
  FakeDevice dev;
  {
    DeviceTableCache cache(64, dev.device());
    // 70 distinct shapes, one launch of 8 parts after another: the cache
    // fills and is emptied between launches, never inside one.
    int shape = 0;
    for (int l = 0; l < 40; ++l) {
      std::vector<std::string> tables;
      for (int b = 0; b < 8; ++b) tables.push_back(table(shape++ % 70));
      const std::vector<void*> parts = launch(cache, tables);
      for (std::size_t b = 0; b < parts.size(); ++b) {
        INFO("launch " << l << " part " << b);
        REQUIRE(dev.alive.count(static_cast<std::string*>(parts[b])) == 1);  // not freed
        CHECK(*static_cast<std::string*>(parts[b]) == tables[b]);
      }
      CHECK(cache.size() <= 64);
    }
    CHECK(dev.waits > 0);  // it did fill, and waited for the device before freeing
  }
  CHECK(dev.alive.empty());  // the destructor frees the rest
}

TEST_CASE("device table cache: hits upload nothing, and repeated tables in one launch count once",
          "[core][cuda]") {
  FakeDevice dev;
  DeviceTableCache cache(4, dev.device());
  const std::vector<void*> first = launch(cache, {table(1), table(2), table(1), table(2)});
  CHECK(dev.uploads == 2);
  CHECK(first[0] == first[2]);
  const std::vector<void*> again = launch(cache, {table(2), table(1)});
  CHECK(dev.uploads == 2);
  CHECK(again[0] == first[1]);
  // Two new ones fit beside the two cached: nothing freed, no wait.
  launch(cache, {table(3), table(4)});
  CHECK(dev.waits == 0);
  CHECK(cache.size() == 4);
  // A fifth does not: wait, free all, then place.
  const std::vector<void*> fifth = launch(cache, {table(5), table(1)});
  CHECK(dev.waits == 1);
  CHECK(cache.size() == 2);
  CHECK(*static_cast<std::string*>(fifth[1]) == table(1));
}

TEST_CASE("device table cache: a launch needing more tables than it holds is refused", "[core][cuda]") {
  FakeDevice dev;
  DeviceTableCache cache(2, dev.device());
  std::vector<std::string> tables{table(1), table(2), table(3)};
  std::vector<std::string_view> views(tables.begin(), tables.end());
  try {
    cache.reserve(views);
    FAIL("reserve() accepted 3 tables in a cache of 2");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::InvalidArgument);
  }
  CHECK_THROWS_AS(cache.place(table(1)), Error);  // no room was reserved
}
