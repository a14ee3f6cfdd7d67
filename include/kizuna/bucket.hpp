// kizuna/bucket.hpp: one bucket of gradients, as a communication hook sees it.
//
// A Bucket is the live form of a BucketSpec (kizuna/bucket_spec.hpp): the
// gradients of a group of parameters presented as one contiguous buffer of
// count() elements of dtype(). When the bucket's views are adjacent in the
// gradient buffer, data() points straight into it (is_view()) and a hook
// reduces the trainer's gradients in place. Otherwise data() is a staging
// buffer owned by the bucket: the Reducer packs the gradients into it
// (pack()) before the hook runs and unpacks them (unpack()) after.
//
// What a hook must leave in data() when it finishes: the sum over ranks of
// every rank's data(), divided by world_size() when average() is set.
//
// scratch() is a byte buffer the bucket keeps from one iteration to the
// next for hooks that need memory of their own (the compression hooks keep
// the 16-bit copy there), so that a hook allocates once, not every step.
//
// Ownership: the Reducer owns its buckets; a hook gets a reference that is
// valid during launch() and finish(). Threading: a bucket is touched by one
// thread at a time (the one that launches it, then the one in finalize()),
// and its memory must stay untouched by the trainer while it is in flight.
#pragma once

#include <kizuna/bucket_spec.hpp>
#include <kizuna/types.hpp>

#include <cstddef>
#include <vector>

namespace kizuna {

class Bucket {
 public:
  // `gradients` is the flat gradient buffer the spec's segments refer to.
  // With a stream, `gradients` is device memory and the bucket must be a
  // view (is_view()): hooks then call the stream variants.
  Bucket(std::size_t index, BucketSpec spec, void* gradients, bool average, int world_size,
         DeviceStream stream = {});

  Bucket(Bucket&&) noexcept = default;
  Bucket& operator=(Bucket&&) noexcept = default;
  Bucket(const Bucket&) = delete;
  Bucket& operator=(const Bucket&) = delete;

  // Position in launch order: bucket 0 is launched first on every rank.
  std::size_t index() const { return index_; }
  const BucketSpec& spec() const { return spec_; }
  DataType dtype() const { return spec_.dtype; }
  std::size_t count() const { return spec_.count(); }
  std::size_t bytes() const { return spec_.bytes; }
  const std::vector<std::size_t>& parameters() const { return spec_.parameters; }

  // The bucket's gradients, count() elements; see above.
  void* data() { return data_; }
  const void* data() const { return data_; }
  bool is_view() const { return spec_.is_contiguous(); }

  DeviceStream stream() const { return stream_; }
  bool on_device() const { return stream_.handle != nullptr; }

  bool average() const { return average_; }
  int world_size() const { return world_size_; }

  std::vector<std::byte>& scratch() { return scratch_; }

  // Staging: copy the gradients into data() / back out of it. No-ops for a
  // view. The Reducer calls them around the hook.
  void pack();
  void unpack();

 private:
  std::size_t index_ = 0;
  BucketSpec spec_;
  std::byte* gradients_ = nullptr;
  void* data_ = nullptr;
  bool average_ = true;
  int world_size_ = 1;
  DeviceStream stream_;
  std::vector<std::byte> staging_;
  std::vector<std::byte> scratch_;
};

}  // namespace kizuna
