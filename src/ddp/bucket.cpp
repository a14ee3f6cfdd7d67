#include <kizuna/bucket.hpp>

#include <cstring>

#include "core/check.hpp"

namespace kizuna {

Bucket::Bucket(std::size_t index, BucketSpec spec, void* gradients, bool average, int world_size,
               DeviceStream stream)
    : index_(index),
      spec_(std::move(spec)),
      gradients_(static_cast<std::byte*>(gradients)),
      average_(average),
      world_size_(world_size),
      stream_(stream) {
  KIZUNA_CHECK_ARG(!on_device() || spec_.segments.empty() || spec_.is_contiguous(), "bucket ", index_,
                   " of device gradients is not one contiguous range of the gradient buffer: register the "
                   "parameters back to back");
  if (spec_.segments.empty()) {
    data_ = gradients_;
  } else if (spec_.is_contiguous()) {
    data_ = gradients_ + spec_.segments.front().offset;
  } else {
    staging_.resize(spec_.bytes);
    data_ = staging_.data();
  }
}

// Segments are in ascending offset order, so the staging buffer holds the
// bucket's elements in memory order: the same layout on every rank.
void Bucket::pack() {
  if (is_view()) return;
  std::size_t at = 0;
  for (const auto& s : spec_.segments) {
    std::memcpy(staging_.data() + at, gradients_ + s.offset, s.bytes);
    at += s.bytes;
  }
}

void Bucket::unpack() {
  if (is_view()) return;
  std::size_t at = 0;
  for (const auto& s : spec_.segments) {
    std::memcpy(gradients_ + s.offset, staging_.data() + at, s.bytes);
    at += s.bytes;
  }
}

}  // namespace kizuna
