// The executor registry: which device backends this build has.
#include <kizuna/config.hpp>

#include "comm/device_backend.hpp"
#include "comm/store_barrier.hpp"
#include "core/check.hpp"
#include "core/env.hpp"

#if KIZUNA_HAS_CUDA
#include "cuda/ipc_world.hpp"
#include "cuda/copy_queue.hpp"
#endif

namespace kizuna::comm {

#if KIZUNA_HAS_CUDA
namespace {

// How long a world being destroyed waits for its peers to close their
// mappings of its memory before it leaves that memory to the process's
// end: the ranks of a job end their communicators at about the same time,
// and one that comes later costs only memory until its process ends.
constexpr std::chrono::seconds kPeersCloseWait{2};

class CudaQueue final : public DeviceQueue {
 public:
  CudaQueue(int device, bool stream_wait) : queue_(device, stream_wait) {}
  std::shared_ptr<unsigned char> host_buffer(std::size_t bytes) override { return queue_.host_buffer(bytes); }
  void follow(void* stream) override { queue_.follow(stream); }
  void copy_to_host(void* host, const void* device, std::size_t bytes) override {
    queue_.copy_to_host(host, device, bytes);
  }
  void copy_to_device(void* device, const void* host, std::size_t bytes) override {
    queue_.copy_to_device(device, host, bytes);
  }
  std::function<bool()> mark() override { return queue_.mark(); }
  std::uint64_t gate(std::chrono::milliseconds patience) override { return queue_.gate(patience); }
  void open(std::uint64_t ticket) override { queue_.open(ticket); }
  void then(std::chrono::milliseconds patience, const std::string& what,
            std::function<void(std::exception_ptr)> fn) override {
    queue_.then(patience, what, std::move(fn));
  }
  void lead(void* stream) override { queue_.lead(stream); }

 private:
  cuda::CopyQueue queue_;
};

class CudaBackend final : public DeviceBackend {
 public:
  explicit CudaBackend(int index) : index_(index) {}
  std::string describe() const override {
    return "cuda:" + std::to_string(index_) + " (" + cuda::device_name(index_) + "), " +
           (ipc_ ? ipc_->how() : std::string("staged through pinned host memory"));
  }
  bool connect(const std::shared_ptr<Store>& store, const std::string& prefix, int rank, int world,
               std::chrono::milliseconds timeout, std::string* why) override {
    try {
      cuda::IpcGeometry geometry;
      const core::Env& env = core::Env::get();
      if (env.cuda_channels > 0) geometry.blocks = static_cast<std::uint32_t>(env.cuda_channels);
      if (env.cuda_slot_bytes > 0) geometry.slot_bytes = static_cast<std::uint32_t>(env.cuda_slot_bytes);
      // At teardown, once this rank has closed its mappings of the peers'
      // memory: whether every peer has closed its mapping of this rank's
      // (cuda/ipc_world.hpp). The store stays with the world for it.
      auto peers_closed = [store, key = prefix + "/closed", rank, world] {
        return store_barrier_within(*store, key, rank, world, kPeersCloseWait);
      };
      ipc_ = cuda::IpcWorld::connect(*store, prefix, rank, world, index_, geometry, timeout, std::move(peers_closed));
      return true;
    } catch (const Error& e) {
      *why = e.what();
      return false;
    }
  }
  void launch(const DirectCall& c, std::function<void(std::exception_ptr)> on_done) override {
    KIZUNA_CHECK(ipc_ != nullptr, "launch() before connect()");
    std::vector<cuda::IpcPart> parts;
    for (const DirectPart& p : c.parts) parts.push_back({p.table, p.scratch_bytes, p.offset_bytes});
    ipc_->launch(parts, c.input, c.output, c.dtype, c.op, c.avg_count, c.avg_divisor, c.stream, c.timeout, c.what,
                 std::move(on_done));
  }
  int direct_parts() const override { return ipc_ ? ipc_->blocks() : 1; }
  void abort() override {
    if (ipc_) ipc_->abort();
  }
  DeviceQueue& queue() override {
    if (!queue_) queue_ = std::make_unique<CudaQueue>(index_, core::Env::get().cuda_stream_wait);
    return *queue_;
  }

 private:
  int index_;
  std::unique_ptr<cuda::IpcWorld> ipc_;
  std::unique_ptr<CudaQueue> queue_;
};

}  // namespace
#endif

namespace {

DeviceBackendFactory& test_factory() {
  static DeviceBackendFactory make;
  return make;
}

}  // namespace

void set_device_backend_for_tests(DeviceBackendFactory make) { test_factory() = std::move(make); }

std::unique_ptr<DeviceBackend> make_device_backend(const std::string& device, int index, int local_rank) {
  if (test_factory() && device != "cpu") return test_factory()(index, local_rank);
  if (device == "cuda") {
#if KIZUNA_HAS_CUDA
    return std::make_unique<CudaBackend>(cuda::select_device(index, local_rank));
#else
    KIZUNA_THROW(ErrorCode::InvalidArgument,
                 "device 'cuda' was asked for, but this libkizuna was built without CUDA "
                 "(configure with nvcc present, KIZUNA_CUDA=AUTO or ON)");
#endif
  }
  KIZUNA_THROW(ErrorCode::InvalidArgument, "unknown device '", device, "'; accepted: cpu, cuda, cuda:N");
}

}  // namespace kizuna::comm
