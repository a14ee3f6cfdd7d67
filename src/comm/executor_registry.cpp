// The executor registry: which device backends this build has.
#include <kizuna/config.hpp>

#include "comm/device_backend.hpp"
#include "core/check.hpp"

#if KIZUNA_HAS_CUDA
#include "cuda/ipc_world.hpp"
#include "cuda/staging.hpp"
#endif

namespace kizuna::comm {

#if KIZUNA_HAS_CUDA
namespace {

class CudaStaged final : public StagedCall {
 public:
  explicit CudaStaged(std::shared_ptr<cuda::StagedCall> call) : call_(std::move(call)) {}
  void* host() override { return call_->host(); }
  bool wait_input(std::chrono::steady_clock::time_point deadline) override { return call_->wait_input(deadline); }
  void release(std::exception_ptr error) override { call_->release(std::move(error)); }

 private:
  std::shared_ptr<cuda::StagedCall> call_;
};

class CudaBackend final : public DeviceBackend {
 public:
  explicit CudaBackend(int index) : index_(index) {}
  std::string describe() const override {
    return "cuda:" + std::to_string(index_) + " (" + cuda::device_name(index_) + "), " +
           (ipc_ ? "GPU to GPU through CUDA IPC" : "staged through pinned host memory");
  }
  bool connect(Store& store, const std::string& prefix, int rank, int world, std::chrono::milliseconds timeout,
               std::string* why) override {
    try {
      ipc_ = cuda::IpcWorld::connect(store, prefix, rank, world, index_, cuda::IpcGeometry{}, timeout);
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
  std::shared_ptr<StagedCall> stage(const StageRequest& r, std::function<void(std::exception_ptr)> on_done) override {
    return std::make_shared<CudaStaged>(cuda::StagedCall::start(index_, r.stream, r.send, r.send_bytes, r.in_offset,
                                                                r.recv, r.recv_bytes, r.out_offset, r.host_bytes,
                                                                r.timeout, std::move(on_done)));
  }

 private:
  int index_;
  std::unique_ptr<cuda::IpcWorld> ipc_;
};

}  // namespace
#endif

std::unique_ptr<DeviceBackend> make_device_backend(const std::string& device, int index, int local_rank) {
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
