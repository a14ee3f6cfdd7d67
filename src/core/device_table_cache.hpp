// core/device_table_cache.hpp: the device copies of step tables that a
// CUDA IPC launch points its blocks at (cuda/ipc_world.cpp), cached by
// their bytes.
//
// A launch has up to one part per block, each with its own table. The
// cache holds at most `capacity` tables; a launch first reserves room for
// all of its parts (reserve()), then places each (place()). Nothing is
// freed between the two, so no part can point at a table that a later
// part's miss freed (freeing inside the per-part loop let a kernel read
// freed memory once the cache was full). When a launch's missing tables do
// not fit beside the cached ones, reserve() frees them all after the
// device is done with them (`Device::wait_idle`: waits for the previous
// launch, their only reader, or orders the frees after it on a stream).
//
// Header-only and independent of CUDA, so that the host's unit tests pin
// it down without a GPU (tests/unit/core/test_device_table_cache.cpp).
#pragma once

#include <algorithm>
#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/check.hpp"

namespace kizuna::core {

class DeviceTableCache {
 public:
  struct Device {
    std::function<void*(std::string_view bytes)> upload;  // a device copy of `bytes`
    std::function<void(void*)> free;
    std::function<void()> wait_idle;  // frees that follow come after every launch's reads
  };

  DeviceTableCache(std::size_t capacity, Device device) : capacity_(capacity), device_(std::move(device)) {}
  DeviceTableCache(const DeviceTableCache&) = delete;
  DeviceTableCache& operator=(const DeviceTableCache&) = delete;
  ~DeviceTableCache() { release(); }

  // Room for every table of one launch (its parts' bytes): afterwards
  // place() of each never frees anything. Throws InvalidArgument when the
  // launch alone needs more than the capacity.
  void reserve(const std::vector<std::string_view>& tables) {
    std::vector<std::string_view> distinct;
    std::size_t missing = 0;
    for (std::string_view t : tables)
      if (std::find(distinct.begin(), distinct.end(), t) == distinct.end()) {
        distinct.push_back(t);
        missing += tables_.count(std::string(t)) == 0;
      }
    KIZUNA_CHECK_ARG(distinct.size() <= capacity_, "a launch of ", distinct.size(),
                     " distinct step tables; at most ", capacity_);
    if (tables_.size() + missing <= capacity_) {
      reserved_ = missing;
      return;
    }
    // Emptied, every table of the launch is a miss.
    device_.wait_idle();
    release();
    reserved_ = distinct.size();
  }

  // The device copy of `table`, uploaded on a miss; after reserve() for
  // the launch it belongs to.
  void* place(std::string_view table) {
    const auto it = tables_.find(std::string(table));
    if (it != tables_.end()) return it->second;
    KIZUNA_CHECK(reserved_ > 0 && tables_.size() < capacity_, "step table placed without reserve()");
    void* copy = device_.upload(table);
    tables_.emplace(std::string(table), copy);
    --reserved_;
    return copy;
  }

  std::size_t size() const { return tables_.size(); }

  // Frees every table (no launch may read them any more).
  void clear() { release(); }

 private:
  void release() {
    for (auto& t : tables_) device_.free(t.second);
    tables_.clear();
  }

  std::size_t capacity_;
  Device device_;
  std::map<std::string, void*> tables_;
  std::size_t reserved_ = 0;  // misses reserve() made room for
};

}  // namespace kizuna::core
