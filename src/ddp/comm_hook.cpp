// The built-in communication hooks (kizuna/comm_hook.hpp).
#include <kizuna/comm_hook.hpp>

#include <cstdint>

#include "ddp/cast.hpp"

namespace kizuna {

namespace {

Work all_reduce_as_is(Communicator& comm, Bucket& bucket) {
  const ReduceOp op =
      bucket.average() && is_floating(bucket.dtype()) ? ReduceOp::Avg : ReduceOp::Sum;
  if (bucket.on_device())
    return comm.all_reduce(bucket.data(), bucket.data(), bucket.count(), bucket.dtype(), op, bucket.stream());
  return comm.all_reduce(bucket.data(), bucket.count(), bucket.dtype(), op);
}

class AllReduceHook final : public CommHook {
 public:
  std::string name() const override { return "allreduce"; }
  Work launch(Communicator& comm, Bucket& bucket) override { return all_reduce_as_is(comm, bucket); }
};

// Pre-divides by the world size before the cast (when averaging), as
// PyTorch's fp16_compress_hook does: each rank's term and every partial sum
// then stay at the scale of the mean, far from float16's overflow.
class CompressHook final : public CommHook {
 public:
  explicit CompressHook(DataType wire) : wire_(wire) {}

  std::string name() const override {
    return wire_ == DataType::Float16 ? "fp16_compress" : "bf16_compress";
  }

  Work launch(Communicator& comm, Bucket& bucket) override {
    if (!compressible(bucket)) return all_reduce_as_is(comm, bucket);
    auto* wire = wire_buffer(bucket);
    const double divisor = bucket.average() ? bucket.world_size() : 1.0;
    ddp::compress(wire, bucket.data(), bucket.count(), bucket.dtype(), wire_, divisor);
    return comm.all_reduce(wire, bucket.count(), wire_, ReduceOp::Sum);
  }

  void finish(Bucket& bucket) override {
    if (!compressible(bucket)) return;
    ddp::decompress(bucket.data(), wire_buffer(bucket), bucket.count(), bucket.dtype(), wire_);
  }

 private:
  static bool compressible(const Bucket& b) {
    return b.dtype() == DataType::Float32 || b.dtype() == DataType::Float64;
  }

  static std::uint16_t* wire_buffer(Bucket& bucket) {
    auto& scratch = bucket.scratch();
    const std::size_t bytes = bucket.count() * sizeof(std::uint16_t);
    if (scratch.size() < bytes) scratch.resize(bytes);
    return reinterpret_cast<std::uint16_t*>(scratch.data());
  }

  DataType wire_;
};

}  // namespace

std::shared_ptr<CommHook> CommHook::allreduce() { return std::make_shared<AllReduceHook>(); }

std::shared_ptr<CommHook> CommHook::fp16_compress() {
  return std::make_shared<CompressHook>(DataType::Float16);
}

std::shared_ptr<CommHook> CommHook::bf16_compress() {
  return std::make_shared<CompressHook>(DataType::BFloat16);
}

}  // namespace kizuna
