// ProcessGroupKizuna: the backend object over a TorchComm, derived from the
// base class the torch being built for wants (torch_compat.hpp).
#include "process_group_kizuna.hpp"

#include "kizuna_work.hpp"
#include "torch_comm.hpp"
#include "torch_compat.hpp"

#include <torch/csrc/utils/pybind.h>

#include <pybind11/chrono.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace kizuna_torch {
namespace {

// Thread safety: c10d may call from any thread (DDP's autograd threads, the
// Python thread); TorchComm and kizuna order calls by arrival.
class ProcessGroupKizuna final : public compat::BackendBase {
 public:
  ProcessGroupKizuna(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                     std::chrono::milliseconds timeout)
      : compat::BackendBase(rank, size), comm_(store, rank, size, timeout) {
    init();
  }
  // A group of the survivors of `failed` (see shrink()).
  ProcessGroupKizuna(const ProcessGroupKizuna& failed, std::shared_ptr<kizuna::Communicator> survivors)
      : compat::BackendBase(survivors->rank(), survivors->size()),
        comm_(failed.comm_.store(), std::move(survivors), failed.comm_.timeout()) {
    init();
  }

  ~ProcessGroupKizuna() override { close(); }

  const std::string getBackendName() const override { return "kizuna"; }

  WorkPtr broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override {
    return comm_.broadcast(tensors, opts);
  }
  WorkPtr allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override {
    return comm_.allreduce(tensors, opts);
  }
  WorkPtr allreduce_coalesced(std::vector<at::Tensor>& tensors,
                              const c10d::AllreduceCoalescedOptions& opts) override {
    return comm_.allreduce_coalesced(tensors, opts);
  }
  WorkPtr reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override {
    return comm_.reduce(tensors, opts);
  }
  WorkPtr allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                    const c10d::AllgatherOptions& opts) override {
    return comm_.allgather(outputs, inputs, opts);
  }
  WorkPtr _allgather_base(at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) override {
    return comm_.allgather_base(output, input, opts);
  }
  WorkPtr allgather_coalesced(std::vector<std::vector<at::Tensor>>& output_lists, std::vector<at::Tensor>& inputs,
                              const c10d::AllgatherOptions& opts) override {
    return comm_.allgather_coalesced(output_lists, inputs, opts);
  }
  WorkPtr gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                 const c10d::GatherOptions& opts) override {
    return comm_.gather(outputs, inputs, opts);
  }
  WorkPtr scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                  const c10d::ScatterOptions& opts) override {
    return comm_.scatter(outputs, inputs, opts);
  }
  WorkPtr reduce_scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                         const c10d::ReduceScatterOptions& opts) override {
    return comm_.reduce_scatter(outputs, inputs, opts);
  }
  WorkPtr _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                               const c10d::ReduceScatterOptions& opts) override {
    return comm_.reduce_scatter_base(output, input, opts);
  }
  WorkPtr alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
                        std::vector<int64_t>& input_splits, const c10d::AllToAllOptions& opts) override {
    return comm_.alltoall_base(output, input, output_splits, input_splits, opts);
  }
  WorkPtr alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                   const c10d::AllToAllOptions& opts) override {
    return comm_.alltoall(outputs, inputs, opts);
  }
  WorkPtr send(std::vector<at::Tensor>& tensors, int dst, int tag) override {
    return comm_.send(tensors, dst, tag);
  }
  WorkPtr recv(std::vector<at::Tensor>& tensors, int src, int tag) override {
    return comm_.recv(tensors, src, tag);
  }
  WorkPtr recvAnysource(std::vector<at::Tensor>& tensors, int tag) override {
    return comm_.recv_anysource(tensors, tag);
  }
  WorkPtr barrier(const c10d::BarrierOptions& opts) override { return comm_.barrier(opts); }
  // Torch 1.13's Python refuses monitored_barrier() on any backend but
  // Gloo; the method itself is reachable (group.monitored_barrier()).
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override {
    comm_.monitored_barrier(opts, wait_all_ranks);
  }
  // Sequence numbers start at 0 on every rank (as Gloo's): nothing to agree on.
  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return comm_.sequence_number(); }

#if KIZUNA_TORCH2
  WorkPtr allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllgatherOptions& opts) override {
    return comm_.allgather_into_tensor_coalesced(outputs, inputs, opts);
  }
  WorkPtr reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::ReduceScatterOptions& opts) override {
    return comm_.reduce_scatter_tensor_coalesced(outputs, inputs, opts);
  }
  // destroy_process_group(): queued calls finish, then the communicator
  // closes; later calls raise.
  void shutdown() override { close(); }
  void abort() override { comm_.abort("torch.distributed aborted the process group"); }
#endif
  // kizuna_torch.shrink(): a new backend of the survivors, and each of its
  // ranks' rank in this group (torch_comm.hpp, "Shrinking").
  std::pair<c10::intrusive_ptr<compat::BackendBase>, std::vector<int>> shrink() {
    TorchComm::Survivors survivors = comm_.shrink();
    return {c10::make_intrusive<ProcessGroupKizuna>(*this, std::move(survivors.comm)),
            std::move(survivors.old_ranks)};
  }
  const std::string& name() const { return comm_.name(); }
  std::chrono::milliseconds timeout() const { return comm_.timeout(); }

  // Not overridden, so c10d's base raises "... does not support <call>":
  // allreduce_sparse, and in torch 2.x gather_into_tensor (gather_single),
  // coalescing (startCoalescing) and splitting.

 private:
  // The communicator's worker thread may drop the last reference to a
  // tensor Python owns, which takes the GIL; closing often happens with
  // the GIL held (destroy_process_group) and joins that thread. Let go of
  // the GIL meanwhile, or each waits for the other for ever.
  void close() {
    if (Py_IsInitialized() && PyGILState_Check()) {
      const pybind11::gil_scoped_release release;
      comm_.close();
    } else {
      comm_.close();
    }
  }

  TorchComm comm_;
};

}  // namespace

void bind_process_group(pybind11::module_& m) {
  namespace py = pybind11;
  m.def(
      "create_process_group",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
         const std::chrono::duration<float>& timeout) -> c10::intrusive_ptr<compat::BackendBase> {
        const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
        return c10::make_intrusive<ProcessGroupKizuna>(store, rank, size, ms);
      },
      py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
      // Creation is collective and blocks until every rank has connected.
      py::call_guard<py::gil_scoped_release>(),
      "Creates a kizuna process group (collective): the creator registered as "
      "torch.distributed backend \"kizuna\".");
  m.def(
      "_shrink",
      [](const c10::intrusive_ptr<compat::BackendBase>& backend) {
        auto* kizuna = dynamic_cast<ProcessGroupKizuna*>(backend.get());
        TORCH_CHECK(kizuna, "kizuna_torch.shrink: the group's CPU backend is ", backend->getBackendName(),
                    ", not kizuna");
        std::pair<c10::intrusive_ptr<compat::BackendBase>, std::vector<int>> shrunk_group;
        {
          // Collective and blocking, as creation is.
          const py::gil_scoped_release release;
          shrunk_group = kizuna->shrink();
        }
        auto& [survivors, old_ranks] = shrunk_group;
        const auto* shrunk = static_cast<const ProcessGroupKizuna*>(survivors.get());
        return py::make_tuple(survivors, old_ranks, shrunk->name(), shrunk->timeout().count());
      },
      py::arg("backend"),
      "Shrinks a failed kizuna backend (collective over the survivors): returns the survivors' "
      "backend, each of its ranks' rank in the old group, its name and its timeout in ms (0: "
      "kizuna's default). kizuna_torch.shrink() wraps this in a ProcessGroup.");
  m.def(
      "_wait_for_threads_to_release",
      [](double seconds) {
        return wait_for_threads_to_release(std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000)));
      },
      py::arg("seconds"), py::call_guard<py::gil_scoped_release>(),
      "Waits, at most `seconds`, until kizuna's threads hold no reference to a torch call; returns "
      "how many they still hold (kizuna_work.hpp, \"Exit\"). kizuna_torch calls it at exit.");
}

}  // namespace kizuna_torch
