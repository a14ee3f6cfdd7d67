#include "cuda/ipc_world.hpp"

#include <cuda_runtime.h>

#include <cstring>
#include <map>
#include <mutex>

#include "core/check.hpp"
#include "cuda/runtime.hpp"
#include "cuda/staging.hpp"
#include "kernels/fifo_kernel.hpp"

namespace kizuna::cuda {
namespace {

// Status words of calls in flight (mapped pinned memory), reused in turn.
constexpr std::size_t kStatusSlots = 4096;
// Encoded step tables kept on the device; beyond this they are all freed.
constexpr std::size_t kMaxTables = 64;

std::size_t align_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }

// One inbound channel: `slots` ready words and the tail, then the slots.
std::size_t control_bytes(const IpcGeometry& g) { return align_up(std::size_t(g.slots) * 8 + 8, 256); }
std::size_t channel_bytes(const IpcGeometry& g) { return control_bytes(g) + std::size_t(g.slots) * g.slot_bytes; }

kernels::FifoChannel channel_at(unsigned char* base, const IpcGeometry& g, int index) {
  unsigned char* c = base + index * channel_bytes(g);
  kernels::FifoChannel ch;
  ch.ready = reinterpret_cast<std::uint64_t*>(c);
  ch.tail = reinterpret_cast<std::uint64_t*>(c + std::size_t(g.slots) * 8);
  ch.data = c + control_bytes(g);
  return ch;
}

// Every rank publishes whether it succeeded (with its payload, or why not)
// and reads everyone's; all ranks therefore throw, or none. Returns the
// payloads by rank.
std::vector<Bytes> agree(Store& store, const std::string& key, int rank, int world, bool ok, const Bytes& payload,
                         std::chrono::milliseconds timeout) {
  Bytes mine{static_cast<std::uint8_t>(ok ? 'Y' : 'N')};
  mine.insert(mine.end(), payload.begin(), payload.end());
  store.set(key + "/" + std::to_string(rank), mine);
  std::vector<std::string> keys;
  for (int r = 0; r < world; ++r) keys.push_back(key + "/" + std::to_string(r));
  std::vector<Bytes> all = store.multi_get(keys, timeout);
  std::string refusals;
  for (int r = 0; r < world; ++r) {
    if (!all[r].empty() && all[r][0] == 'Y') continue;
    refusals += "; rank " + std::to_string(r) + ": " +
                (all[r].empty() ? std::string("?") : std::string(all[r].begin() + 1, all[r].end()));
  }
  if (!refusals.empty())
    KIZUNA_THROW(ErrorCode::CudaError, "CUDA IPC cannot join the GPUs of every rank", refusals);
  for (Bytes& b : all) b.erase(b.begin());
  return all;
}

Bytes text(const std::string& s) { return Bytes(s.begin(), s.end()); }

struct Completion {
  const volatile std::uint32_t* status;
  std::uint32_t* abort;
  std::string what;
  IpcWorld::Done on_done;
};

void CUDART_CB complete(void* p) {
  std::unique_ptr<Completion> c(static_cast<Completion*>(p));
  if (*c->status == static_cast<std::uint32_t>(kernels::FifoStatus::Done)) {
    c->on_done(nullptr);
    return;
  }
  // The channels are in an unknown state: stop the calls queued behind.
  *const_cast<volatile std::uint32_t*>(c->abort) = 1;
  c->on_done(std::make_exception_ptr(Error(
      ErrorCode::Timeout, c->what + ": the GPU collective stopped before its end: a peer did not take part "
                                    "within the deadline, or the communicator was aborted")));
}

}  // namespace

struct IpcWorld::State {
  int rank = 0;
  int world = 1;
  int device = 0;
  IpcGeometry geometry;
  unsigned char* mine = nullptr;       // this rank's inbound channels
  std::vector<void*> peers;            // the peers' inbound channels, mapped
  kernels::FifoChannel* d_in = nullptr;
  kernels::FifoChannel* d_out = nullptr;
  kernels::FifoCounters* d_counters = nullptr;
  std::uint32_t* abort_host = nullptr;   // mapped pinned
  std::uint32_t* abort_dev = nullptr;
  std::uint32_t* status_host = nullptr;  // mapped pinned, kStatusSlots
  std::uint32_t* status_dev = nullptr;
  cudaEvent_t last = nullptr;
  bool launched = false;
  std::uint64_t calls = 0;
  void* scratch = nullptr;
  std::size_t scratch_bytes = 0;
  kernels::FifoSend* pending = nullptr;  // the walk's send queue: an entry per step
  std::size_t pending_entries = 0;
  std::map<std::string, kernels::DeviceStep*> tables;
  std::mutex mutex;

  ~State() {
    // Nothing may be running on the channels when they go: wait for it.
    if (launched) cudaEventSynchronize(last);
    for (auto& t : tables) cudaFree(t.second);
    for (void* p : peers)
      if (p) cudaIpcCloseMemHandle(p);
    cudaFree(scratch);
    cudaFree(pending);
    cudaFree(d_in);
    cudaFree(d_out);
    cudaFree(d_counters);
    cudaFree(mine);
    if (last) cudaEventDestroy(last);
    if (abort_host) cudaFreeHost(abort_host);
    if (status_host) cudaFreeHost(status_host);
  }

  void ensure_scratch(std::size_t bytes) {
    if (bytes <= scratch_bytes) return;
    if (launched) KIZUNA_CUDA_CHECK(cudaEventSynchronize(last));  // the old one may still be in use
    KIZUNA_CUDA_CHECK(cudaFree(scratch));
    scratch = nullptr;
    scratch_bytes = 0;
    KIZUNA_CUDA_CHECK(cudaMalloc(&scratch, bytes));
    scratch_bytes = bytes;
  }

  void ensure_pending(std::size_t entries) {
    if (entries <= pending_entries) return;
    if (launched) KIZUNA_CUDA_CHECK(cudaEventSynchronize(last));
    KIZUNA_CUDA_CHECK(cudaFree(pending));
    pending = nullptr;
    pending_entries = 0;
    KIZUNA_CUDA_CHECK(cudaMalloc(&pending, entries * sizeof(kernels::FifoSend)));
    pending_entries = entries;
  }

  kernels::DeviceStep* table_on_device(const std::vector<kernels::DeviceStep>& table) {
    std::string key(reinterpret_cast<const char*>(table.data()), table.size() * sizeof(kernels::DeviceStep));
    auto it = tables.find(key);
    if (it != tables.end()) return it->second;
    if (tables.size() >= kMaxTables) {
      if (launched) KIZUNA_CUDA_CHECK(cudaEventSynchronize(last));
      for (auto& t : tables) cudaFree(t.second);
      tables.clear();
    }
    kernels::DeviceStep* d = nullptr;
    KIZUNA_CUDA_CHECK(cudaMalloc(&d, std::max<std::size_t>(key.size(), 1)));
    if (!key.empty()) KIZUNA_CUDA_CHECK(cudaMemcpy(d, table.data(), key.size(), cudaMemcpyHostToDevice));
    tables.emplace(std::move(key), d);
    return d;
  }
};

IpcWorld::IpcWorld(std::unique_ptr<State> state) : state_(std::move(state)) {}
IpcWorld::~IpcWorld() = default;

std::unique_ptr<IpcWorld> IpcWorld::connect(Store& store, const std::string& prefix, int rank, int world,
                                            int device, IpcGeometry geometry, std::chrono::milliseconds timeout) {
  KIZUNA_CHECK_ARG(world <= kernels::kFifoMaxRanks, "CUDA IPC collectives take at most ", kernels::kFifoMaxRanks,
                   " ranks, not ", world);
  KIZUNA_CHECK_ARG(geometry.slots > 0 && geometry.slot_bytes > 0 && geometry.slot_bytes % 256 == 0,
                   "CUDA IPC FIFO geometry: ", geometry.slots, " slots of ", geometry.slot_bytes, " bytes");
  auto st = std::make_unique<State>();
  st->rank = rank;
  st->world = world;
  st->device = device;
  st->geometry = geometry;
  st->peers.assign(world, nullptr);

  // 1. This rank's inbound channels, zeroed before anyone may write.
  bool ok = true;
  Bytes payload;
  try {
    set_device(device);
    const std::size_t bytes = channel_bytes(geometry) * world;
    KIZUNA_CUDA_CHECK(cudaMalloc(&st->mine, bytes));
    KIZUNA_CUDA_CHECK(cudaMemset(st->mine, 0, bytes));
    KIZUNA_CUDA_CHECK(cudaDeviceSynchronize());
    cudaIpcMemHandle_t handle;
    KIZUNA_CUDA_CHECK(cudaIpcGetMemHandle(&handle, st->mine));
    const auto* h = reinterpret_cast<const std::uint8_t*>(&handle);
    payload.assign(h, h + sizeof handle);
  } catch (const Error& e) {
    ok = false;
    payload = text(e.what());
  }
  const std::vector<Bytes> handles = agree(store, prefix + "/handle", rank, world, ok, payload, timeout);

  // 2. The peers' channels mapped, and what the kernel reads set up.
  ok = true;
  payload.clear();
  try {
    std::vector<kernels::FifoChannel> in(world), out(world);
    for (int p = 0; p < world; ++p) {
      if (p != rank) {
        KIZUNA_CHECK(handles[p].size() == sizeof(cudaIpcMemHandle_t), "rank ", p, "'s IPC handle has ",
                     handles[p].size(), " bytes");
        cudaIpcMemHandle_t handle;
        std::memcpy(&handle, handles[p].data(), sizeof handle);
        KIZUNA_CUDA_CHECK(cudaIpcOpenMemHandle(&st->peers[p], handle, cudaIpcMemLazyEnablePeerAccess));
      }
      in[p] = channel_at(st->mine, geometry, p);
      out[p] = channel_at(p == rank ? st->mine : static_cast<unsigned char*>(st->peers[p]), geometry, rank);
    }
    KIZUNA_CUDA_CHECK(cudaMalloc(&st->d_in, sizeof(kernels::FifoChannel) * world));
    KIZUNA_CUDA_CHECK(cudaMalloc(&st->d_out, sizeof(kernels::FifoChannel) * world));
    KIZUNA_CUDA_CHECK(cudaMemcpy(st->d_in, in.data(), sizeof(kernels::FifoChannel) * world, cudaMemcpyHostToDevice));
    KIZUNA_CUDA_CHECK(cudaMemcpy(st->d_out, out.data(), sizeof(kernels::FifoChannel) * world, cudaMemcpyHostToDevice));
    KIZUNA_CUDA_CHECK(cudaMalloc(&st->d_counters, sizeof(kernels::FifoCounters)));
    KIZUNA_CUDA_CHECK(cudaMemset(st->d_counters, 0, sizeof(kernels::FifoCounters)));
    KIZUNA_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&st->abort_host), sizeof(std::uint32_t), cudaHostAllocMapped));
    *st->abort_host = 0;
    KIZUNA_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&st->abort_dev), st->abort_host, 0));
    KIZUNA_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&st->status_host), sizeof(std::uint32_t) * kStatusSlots,
                                    cudaHostAllocMapped));
    std::memset(st->status_host, 0, sizeof(std::uint32_t) * kStatusSlots);
    KIZUNA_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&st->status_dev), st->status_host, 0));
    KIZUNA_CUDA_CHECK(cudaEventCreateWithFlags(&st->last, cudaEventDisableTiming));
    KIZUNA_CUDA_CHECK(cudaDeviceSynchronize());
  } catch (const Error& e) {
    ok = false;
    payload = text(e.what());
  }
  agree(store, prefix + "/open", rank, world, ok, payload, timeout);
  return std::unique_ptr<IpcWorld>(new IpcWorld(std::move(st)));
}

void IpcWorld::launch(const std::vector<kernels::DeviceStep>& table, std::size_t scratch_bytes, const void* input,
                      void* output, DataType dtype, ReduceOp op, std::size_t avg_count, double avg_divisor,
                      void* stream_handle, std::chrono::milliseconds timeout, const std::string& what, Done on_done) {
  State& st = *state_;
  std::lock_guard lock(st.mutex);
  set_device(st.device);
  auto stream = static_cast<cudaStream_t>(stream_handle);
  st.ensure_scratch(std::max<std::size_t>(scratch_bytes, 256));
  st.ensure_pending(std::max<std::size_t>(table.size(), 64));
  kernels::FifoLaunch l;
  l.program.steps = st.table_on_device(table);
  l.program.step_count = static_cast<std::uint32_t>(table.size());
  l.program.rank = st.rank;
  l.program.world = st.world;
  l.program.slots = st.geometry.slots;
  l.program.slot_bytes = st.geometry.slot_bytes;
  l.program.in = st.d_in;
  l.program.out = st.d_out;
  l.program.counters = st.d_counters;
  l.program.pending = st.pending;
  l.input = input;
  l.output = output;
  l.scratch = st.scratch;
  l.dtype = dtype;
  l.op = op;
  l.timeout_ns = static_cast<std::uint64_t>(timeout.count()) * 1000000ull;
  l.abort = st.abort_dev;
  const std::size_t slot = st.calls++ % kStatusSlots;
  st.status_host[slot] = static_cast<std::uint32_t>(kernels::FifoStatus::Running);
  l.status = st.status_dev + slot;
  // Calls run in call order whatever their streams: the channels are shared.
  if (st.launched) KIZUNA_CUDA_CHECK(cudaStreamWaitEvent(stream, st.last, 0));
  kernels::launch_fifo(l, stream);
  if (op == ReduceOp::Avg && avg_count > 0) kernels::scale(output, avg_count, dtype, avg_divisor, stream);
  KIZUNA_CUDA_CHECK(cudaEventRecord(st.last, stream));
  st.launched = true;
  auto* c = new Completion{st.status_host + slot, st.abort_host, what, std::move(on_done)};
  const cudaError_t e = cudaLaunchHostFunc(stream, complete, c);
  if (e != cudaSuccess) {
    delete c;
    KIZUNA_THROW(ErrorCode::CudaError, "cudaLaunchHostFunc failed: ", cudaGetErrorString(e));
  }
}

void IpcWorld::abort() {
  if (state_->abort_host) *const_cast<volatile std::uint32_t*>(state_->abort_host) = 1;
}

}  // namespace kizuna::cuda
