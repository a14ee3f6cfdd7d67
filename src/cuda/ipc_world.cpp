#include "cuda/ipc_world.hpp"

#include <cuda_runtime.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "core/check.hpp"
#include "core/completion_poller.hpp"
#include "core/device_table_cache.hpp"
#include "core/log.hpp"
#include "cuda/runtime.hpp"
#include "cuda/copy_queue.hpp"
#include "cuda/event_pool.hpp"
#include "kernels/fifo_kernel.hpp"
#include "kernels/fifo_layout.hpp"

namespace kizuna::cuda {
namespace {

// Status words of calls in flight (mapped pinned memory, kFifoMaxBlocks
// per call), reused in turn.
constexpr std::size_t kStatusSlots = 4096;
// Encoded step tables kept on the device; beyond this they are all freed
// (at least kFifoMaxBlocks: one launch's parts must fit).
constexpr std::size_t kMaxTables = 64;
static_assert(kMaxTables >= kernels::kFifoMaxBlocks);

std::size_t align_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }

kernels::FifoShape shape_of(const IpcGeometry& g) { return {g.blocks, g.slots, g.slot_bytes}; }

// Every rank publishes whether it succeeded (with its payload, or why not)
// and reads everyone's; all ranks therefore throw, or none. Returns the
// payloads by rank.
std::vector<Bytes> agree(Store& store, const std::string& key, int rank, int world, bool ok, const Bytes& payload,
                         std::chrono::milliseconds timeout) {
  Bytes mine(payload.size() + 1);
  mine[0] = static_cast<std::uint8_t>(ok ? 'Y' : 'N');
  std::copy(payload.begin(), payload.end(), mine.begin() + 1);
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
  std::vector<Bytes> payloads;
  for (const Bytes& b : all) payloads.emplace_back(b.begin() + 1, b.end());  // past the 'Y' every one has
  return payloads;
}

Bytes text(const std::string& s) { return Bytes(s.begin(), s.end()); }

// This process, told apart from every other on the node: its pid and a
// random number drawn once (pids repeat across containers). Ranks that are
// threads of one process share raw device pointers: cudaIpcOpenMemHandle
// refuses a handle exported by the calling process, and needs none there.
struct ProcessId {
  std::uint64_t pid = 0;
  std::uint64_t nonce = 0;
  bool operator==(const ProcessId&) const = default;
};

const ProcessId& this_process() {
  static const ProcessId id{static_cast<std::uint64_t>(::getpid()),
                            (std::uint64_t(std::random_device{}()) << 32) ^ std::random_device{}()};
  return id;
}

// Whether a call's kernel finished every block, from its status words;
// throws Timeout when one gave up (its deadline, or abort()).
bool finished(const volatile std::uint32_t* status, int blocks, std::uint32_t* abort, const std::string& what) {
  bool done = true;
  for (int b = 0; b < blocks; ++b) done = done && status[b] == static_cast<std::uint32_t>(kernels::FifoStatus::Done);
  if (done) return true;
  // The channels are in an unknown state: stop the calls queued behind.
  *const_cast<volatile std::uint32_t*>(abort) = 1;
  KIZUNA_THROW(ErrorCode::Timeout, what, ": the GPU collective stopped before its end: a peer did not take part "
                                         "within the deadline, or the communicator was aborted");
}

// How long after a call's own deadline the host gives up on its kernel: the
// kernel watches the deadline itself and normally reports first.
constexpr std::chrono::seconds kHostGrace{2};

// How long a world being destroyed waits for the credits of its last
// chunks to come home before it leaves its memory to the process's end.
constexpr std::chrono::seconds kCreditsWait{1};

}  // namespace

struct IpcWorld::State {
  int rank = 0;
  int world = 1;
  int device = 0;
  IpcGeometry geometry;
  std::uint32_t usable_blocks = 1;     // parts a call may run at once (<= geometry.blocks)
  unsigned char* mine = nullptr;       // this rank's inbound channels
  std::vector<void*> peers;            // the peers' inbound channels, mapped
  std::vector<bool> opened;            // peers[p] came from cudaIpcOpenMemHandle (else: same process)
  int same_process = 0;                // peers that are threads of this process
  // At teardown: whether every peer has closed its mapping of `mine`.
  std::function<bool()> peers_closed;
  // Per block b, peer p: [b * world + p].
  kernels::FifoChannel* d_in = nullptr;
  kernels::FifoChannel* d_out = nullptr;
  kernels::FifoCounters* d_counters = nullptr;  // per block
  std::uint32_t* abort_host = nullptr;   // mapped pinned
  std::vector<std::uint64_t*> poison_words;  // what the peers wait on for this rank, in their memory
  std::atomic<bool> poisoned{false};
  std::uint32_t* abort_dev = nullptr;
  std::uint32_t* status_host = nullptr;  // mapped pinned, kStatusSlots
  std::uint32_t* status_dev = nullptr;
  cudaEvent_t last = nullptr;
  cudaStream_t last_stream = nullptr;  // the stream of the last call launched
  bool launched = false;
  std::uint64_t calls = 0;
  // Each call's completion event, reused.
  EventPool events;
  void* scratch = nullptr;
  std::size_t scratch_bytes = 0;
  kernels::FifoSend* pending = nullptr;  // the walks' send queues: per block, an entry per step
  std::size_t pending_entries = 0;       // per block
  // Table uploads go on a non-blocking stream of their own: a cudaMemcpy
  // on the legacy stream would wait for every blocking stream's work,
  // the user's included.
  cudaStream_t uploads = nullptr;
  // Nothing here frees with cudaFree while calls run: cudaFree waits for
  // the whole device, and when ranks are threads of one process a peer's
  // kernel may be waiting for this thread's next launch (a deadlock).
  // Tables, scratch and send queues are stream-ordered allocations, freed
  // with cudaFreeAsync after the last call that may read them.
  core::DeviceTableCache tables{kMaxTables, {[this](std::string_view bytes) -> void* {
                                                void* d = nullptr;
                                                KIZUNA_CUDA_CHECK(cudaMallocAsync(
                                                    &d, std::max<std::size_t>(bytes.size(), 1), uploads));
                                                if (!bytes.empty())
                                                  KIZUNA_CUDA_CHECK(cudaMemcpyAsync(d, bytes.data(), bytes.size(),
                                                                                    cudaMemcpyHostToDevice, uploads));
                                                KIZUNA_CUDA_CHECK(cudaStreamSynchronize(uploads));
                                                return d;
                                              },
                                              [this](void* d) { cudaFreeAsync(d, uploads); },
                                              [this] {
                                                if (launched) KIZUNA_CUDA_CHECK(cudaStreamWaitEvent(uploads, last, 0));
                                              }}};
  std::mutex mutex;
  // Reset first in ~State, while what its items read is still there.
  std::unique_ptr<core::CompletionPoller> completions = std::make_unique<core::CompletionPoller>();

  ~State() {
    // Nothing may be running on the channels when they go: wait for it.
    if (launched) cudaEventSynchronize(last);
    completions.reset();  // every call's event back in the pool
    tables.clear();
    if (uploads) cudaStreamSynchronize(uploads);
    // After an abort (ours, or a kernel that gave up) the peers' kernels
    // may still write into these channels: freeing them would let those
    // writes land in whatever is allocated there next. Without one, a
    // receiver still writes a credit here as it releases the last chunks
    // this rank sent, after this rank's kernels ended: the memory goes once
    // they are all home (at once where it never launched, so sent nothing).
    // Otherwise it is left to the process's end.
    const bool aborted = abort_host != nullptr && *const_cast<volatile std::uint32_t*>(abort_host) != 0;
    const bool quiet = !aborted && (!launched || credits_home_within(kCreditsWait));
    for (std::size_t p = 0; p < peers.size(); ++p)
      if (peers[p] && opened[p]) cudaIpcCloseMemHandle(peers[p]);
    // Peers in other processes mapped `mine` with cudaIpcOpenMemHandle,
    // and freeing it before they close that mapping is undefined: every
    // rank closes its mappings above, then they meet (peers_closed, a
    // barrier with a deadline) before any frees. An aborted world skips
    // the meeting (its store may be gone with a dead rank) and leaks.
    const bool exported = world - 1 > same_process;
    const bool unmapped = !exported || (!aborted && peers_closed && peers_closed());
    cudaFree(scratch);
    cudaFree(pending);
    cudaFree(d_in);
    cudaFree(d_out);
    cudaFree(d_counters);
    if (quiet && unmapped) cudaFree(mine);
    if (last) cudaEventDestroy(last);
    if (uploads) cudaStreamDestroy(uploads);
    if (abort_host) cudaFreeHost(abort_host);
    if (status_host) cudaFreeHost(status_host);
  }

  // Whether every chunk this rank sent has come home as a credit in its
  // own memory within `wait` (kernels/fifo_layout.hpp). Read on the
  // world's own non-blocking stream, not the legacy one.
  bool credits_home_within(std::chrono::milliseconds wait) {
    if (mine == nullptr || d_counters == nullptr || uploads == nullptr) return false;
    std::vector<kernels::FifoCounters> counters(geometry.blocks);
    if (cudaMemcpyAsync(counters.data(), d_counters, sizeof(kernels::FifoCounters) * counters.size(),
                        cudaMemcpyDeviceToHost, uploads) != cudaSuccess ||
        cudaStreamSynchronize(uploads) != cudaSuccess)
      return false;
    const kernels::FifoShape shape = shape_of(geometry);
    bool failed = false;
    const auto credit = [&](std::uint32_t b, int p) {
      std::uint64_t v = 0;
      failed = failed ||
               cudaMemcpyAsync(&v, mine + kernels::fifo_credit_offset(world, shape, b, p), sizeof v,
                               cudaMemcpyDeviceToHost, uploads) != cudaSuccess ||
               cudaStreamSynchronize(uploads) != cudaSuccess;
      return v;
    };
    const auto until = std::chrono::steady_clock::now() + wait;
    for (;;) {
      if (kernels::fifo_credits_home(rank, world, geometry.blocks, counters.data(), credit)) return !failed;
      if (failed || std::chrono::steady_clock::now() >= until) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  // Grows `buffer` to at least `bytes` (to a power of two, so that growth
  // is rare), in the order of `stream`, after every call launched so far.
  void ensure(void*& buffer, std::size_t& have, std::size_t bytes, cudaStream_t stream) {
    if (bytes <= have) return;
    std::size_t grown = 4096;
    while (grown < bytes) grown *= 2;
    if (launched) KIZUNA_CUDA_CHECK(cudaStreamWaitEvent(stream, last, 0));
    if (buffer) KIZUNA_CUDA_CHECK(cudaFreeAsync(buffer, stream));
    buffer = nullptr;
    have = 0;
    KIZUNA_CUDA_CHECK(cudaMallocAsync(&buffer, grown, stream));
    have = grown;
  }

  void ensure_scratch(std::size_t bytes, cudaStream_t stream) { ensure(scratch, scratch_bytes, bytes, stream); }

  void ensure_pending(std::size_t entries, cudaStream_t stream) {
    const std::size_t per_entry = geometry.blocks * sizeof(kernels::FifoSend);
    void* p = pending;
    std::size_t have = pending_entries * per_entry;
    ensure(p, have, entries * per_entry, stream);
    pending = static_cast<kernels::FifoSend*>(p);
    pending_entries = have / per_entry;
  }
};

IpcWorld::IpcWorld(std::unique_ptr<State> state) : state_(std::move(state)) {}
IpcWorld::~IpcWorld() = default;

std::unique_ptr<IpcWorld> IpcWorld::connect(Store& store, const std::string& prefix, int rank, int world,
                                            int device, IpcGeometry geometry, std::chrono::milliseconds timeout,
                                            std::function<bool()> peers_closed) {
  KIZUNA_CHECK_ARG(world <= kernels::kFifoMaxRanks, "CUDA IPC collectives take at most ", kernels::kFifoMaxRanks,
                   " ranks, not ", world);
  KIZUNA_CHECK_ARG(geometry.slots > 0 && geometry.slot_bytes > 0 && geometry.slot_bytes % 256 == 0 &&
                       geometry.blocks >= 1 && geometry.blocks <= static_cast<std::uint32_t>(kernels::kFifoMaxBlocks),
                   "CUDA IPC FIFO geometry: ", geometry.blocks, " blocks of ", geometry.slots, " slots of ",
                   geometry.slot_bytes, " bytes");
  auto st = std::make_unique<State>();
  st->rank = rank;
  st->world = world;
  st->device = device;
  st->geometry = geometry;
  st->peers_closed = std::move(peers_closed);
  st->peers.assign(world, nullptr);
  st->opened.assign(world, false);

  // 1. This rank's inbound channels, zeroed before anyone may write.
  bool ok = true;
  Bytes payload;
  try {
    set_device(device);
    const std::size_t bytes = kernels::fifo_memory_bytes(shape_of(geometry), world);
    KIZUNA_CUDA_CHECK(cudaMalloc(&st->mine, bytes));
    KIZUNA_CUDA_CHECK(cudaMemset(st->mine, 0, bytes));
    KIZUNA_CUDA_CHECK(cudaDeviceSynchronize());
    cudaIpcMemHandle_t handle;
    KIZUNA_CUDA_CHECK(cudaIpcGetMemHandle(&handle, st->mine));
    const auto* h = reinterpret_cast<const std::uint8_t*>(&handle);
    payload.assign(h, h + sizeof handle);
    // Which GPU, and whether its contexts are shared through MPS.
    cudaDeviceProp prop;
    KIZUNA_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    const auto* u = reinterpret_cast<const std::uint8_t*>(&prop.uuid);
    payload.insert(payload.end(), u, u + sizeof prop.uuid);
    // Which process, and the channels' address in it.
    const auto* id = reinterpret_cast<const std::uint8_t*>(&this_process());
    payload.insert(payload.end(), id, id + sizeof(ProcessId));
    const auto* at = reinterpret_cast<const std::uint8_t*>(&st->mine);
    payload.insert(payload.end(), at, at + sizeof st->mine);
    const std::uint32_t shape[3] = {geometry.blocks, geometry.slots, geometry.slot_bytes};
    const auto* sh = reinterpret_cast<const std::uint8_t*>(shape);
    payload.insert(payload.end(), sh, sh + sizeof shape);
    const std::uint32_t sms = static_cast<std::uint32_t>(prop.multiProcessorCount);
    const auto* sm = reinterpret_cast<const std::uint8_t*>(&sms);
    payload.insert(payload.end(), sm, sm + sizeof sms);
    int mps = 0;
    KIZUNA_CUDA_CHECK(cudaDeviceGetAttribute(&mps, cudaDevAttrMpsEnabled, device));
    payload.push_back(mps ? 1 : 0);
  } catch (const Error& e) {
    ok = false;
    payload = text(e.what());
  }
  const std::vector<Bytes> handles = agree(store, prefix + "/handle", rank, world, ok, payload, timeout);
  // Ranks sharing a GPU run their kernels at the same time only under MPS,
  // or when they are threads of one process (one context, many streams);
  // otherwise the GPU time-slices between their processes and the walks,
  // which wait for one another, advance one slice at a time. Every rank
  // sees every record, so all decide alike.
  constexpr std::size_t kHandle = sizeof(cudaIpcMemHandle_t), kUuid = sizeof(cudaUUID_t),
                        kProcess = sizeof(ProcessId), kPointer = sizeof(void*), kShape = 3 * sizeof(std::uint32_t),
                        kSms = sizeof(std::uint32_t);
  constexpr std::size_t kRecord = kHandle + kUuid + kProcess + kPointer + kShape + kSms + 1;
  for (int p = 0; p < world; ++p)
    KIZUNA_CHECK(handles[p].size() == kRecord, "rank ", p, "'s CUDA IPC record has ", handles[p].size(),
                 " bytes, not ", kRecord, " (a different kizuna build?)");
  // Every rank's FIFOs must have the same shape: a sender writes slots at
  // the receiver's offsets.
  for (int p = 0; p < world; ++p) {
    std::uint32_t shape[3];
    std::memcpy(shape, handles[p].data() + kHandle + kUuid + kProcess + kPointer, kShape);
    if (shape[0] != geometry.blocks || shape[1] != geometry.slots || shape[2] != geometry.slot_bytes)
      KIZUNA_THROW(ErrorCode::InvalidArgument, "rank ", p, " has FIFOs of ", shape[0], " channel sets of ", shape[1],
                   " slots of ", shape[2], " bytes, rank ", rank, " of ", geometry.blocks, " of ", geometry.slots,
                   " of ", geometry.slot_bytes, ": give every rank the same KIZUNA_CUDA_CHANNELS and "
                   "KIZUNA_CUDA_SLOT_BYTES");
  }
  // A block waits for its peers' blocks, so every block of a call, of
  // every rank, must be resident at once, or the walk stalls until its
  // deadline. One block per multiprocessor always fits (the kernel's launch
  // bounds), so a call runs at most as many parts as each GPU's
  // multiprocessors shared among the ranks on it; every rank sees every
  // record and takes the same bound.
  const auto same_gpu = [&](int p, int q) {
    return std::equal(handles[p].begin() + kHandle, handles[p].begin() + kHandle + kUuid, handles[q].begin() + kHandle);
  };
  st->usable_blocks = geometry.blocks;
  for (int p = 0; p < world; ++p) {
    std::uint32_t sms = 0;
    std::memcpy(&sms, handles[p].data() + kHandle + kUuid + kProcess + kPointer + kShape, kSms);
    std::uint32_t sharing = 0;
    for (int q = 0; q < world; ++q) sharing += same_gpu(p, q) ? 1 : 0;
    st->usable_blocks = std::min(st->usable_blocks, std::max<std::uint32_t>(1, sms / sharing));
  }
  if (st->usable_blocks < geometry.blocks) {
    KIZUNA_LOG(Info) << "rank " << rank << ": GPU-to-GPU calls run at most " << st->usable_blocks
                     << " parts at once, not " << geometry.blocks
                     << ": every rank's blocks must be resident on the multiprocessors of the GPU they share";
  }
  const auto process_of = [&](int p) {
    ProcessId id;
    std::memcpy(&id, handles[p].data() + kHandle + kUuid, sizeof id);
    return id;
  };
  for (int p = 0; p < world; ++p)
    for (int q = p + 1; q < world; ++q)
      if (same_gpu(p, q) && !(process_of(p) == process_of(q)) && (handles[p].back() == 0 || handles[q].back() == 0))
        KIZUNA_THROW(ErrorCode::CudaError, "ranks ", p, " and ", q, " share a GPU without MPS: their kernels "
                     "would run one time slice at a time (start nvidia-cuda-mps-control -d for GPU to GPU "
                     "collectives between processes on one GPU; threads of one process need no MPS)");

  // 2. The peers' channels mapped, and what the kernel reads set up.
  ok = true;
  payload.clear();
  try {
    for (int p = 0; p < world; ++p) {
      if (p == rank) continue;
      if (process_of(p) == this_process()) {
        std::memcpy(&st->peers[p], handles[p].data() + kHandle + kUuid + kProcess, kPointer);
        ++st->same_process;
        continue;
      }
      cudaIpcMemHandle_t handle;
      std::memcpy(&handle, handles[p].data(), sizeof handle);
      KIZUNA_CUDA_CHECK(cudaIpcOpenMemHandle(&st->peers[p], handle, cudaIpcMemLazyEnablePeerAccess));
      st->opened[p] = true;
    }
    // Every wait on this GPU's own memory (kernels/fifo_layout.hpp).
    std::vector<unsigned char*> memory(world);
    for (int p = 0; p < world; ++p) memory[p] = p == rank ? st->mine : static_cast<unsigned char*>(st->peers[p]);
    const std::size_t n = std::size_t(world) * geometry.blocks;
    std::vector<kernels::FifoChannel> in(n), out(n);
    for (std::uint32_t b = 0; b < geometry.blocks; ++b)
      for (int p = 0; p < world; ++p) {
        in[b * world + p] = kernels::fifo_channel(memory.data(), world, shape_of(geometry), b, p, rank);
        out[b * world + p] = kernels::fifo_channel(memory.data(), world, shape_of(geometry), b, rank, p);
      }
    kernels::fifo_poison_words(memory.data(), world, shape_of(geometry), rank,
                               [&](std::uint64_t* word) { st->poison_words.push_back(word); });
    KIZUNA_CUDA_CHECK(cudaMalloc(&st->d_in, sizeof(kernels::FifoChannel) * n));
    KIZUNA_CUDA_CHECK(cudaMalloc(&st->d_out, sizeof(kernels::FifoChannel) * n));
    KIZUNA_CUDA_CHECK(cudaMemcpy(st->d_in, in.data(), sizeof(kernels::FifoChannel) * n, cudaMemcpyHostToDevice));
    KIZUNA_CUDA_CHECK(cudaMemcpy(st->d_out, out.data(), sizeof(kernels::FifoChannel) * n, cudaMemcpyHostToDevice));
    KIZUNA_CUDA_CHECK(cudaMalloc(&st->d_counters, sizeof(kernels::FifoCounters) * geometry.blocks));
    KIZUNA_CUDA_CHECK(cudaMemset(st->d_counters, 0, sizeof(kernels::FifoCounters) * geometry.blocks));
    KIZUNA_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&st->abort_host), sizeof(std::uint32_t), cudaHostAllocMapped));
    *st->abort_host = 0;
    KIZUNA_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&st->abort_dev), st->abort_host, 0));
    const std::size_t status_bytes = sizeof(std::uint32_t) * kStatusSlots * kernels::kFifoMaxBlocks;
    KIZUNA_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&st->status_host), status_bytes, cudaHostAllocMapped));
    std::memset(st->status_host, 0, status_bytes);
    KIZUNA_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&st->status_dev), st->status_host, 0));
    KIZUNA_CUDA_CHECK(cudaEventCreateWithFlags(&st->last, cudaEventDisableTiming));
    KIZUNA_CUDA_CHECK(cudaStreamCreateWithFlags(&st->uploads, cudaStreamNonBlocking));
    // A tiny read through every peer's mapping: one that opened may still
    // not be usable (MPS servers of other users, GPUs without peer
    // access), and then no rank takes the join, as for a failed open.
    for (int p = 0; p < world; ++p) {
      if (p == rank) continue;
      std::uint64_t word = 0;
      cudaError_t e = cudaMemcpyAsync(&word, memory[p], sizeof word, cudaMemcpyDeviceToHost, st->uploads);
      if (e == cudaSuccess) e = cudaStreamSynchronize(st->uploads);
      if (e != cudaSuccess)
        KIZUNA_THROW(ErrorCode::CudaError, "cannot read rank ", p, "'s FIFO memory through its mapping: ",
                     cudaGetErrorString(e));
    }
    KIZUNA_CUDA_CHECK(cudaDeviceSynchronize());
  } catch (const Error& e) {
    ok = false;
    payload = text(e.what());
  }
  agree(store, prefix + "/open", rank, world, ok, payload, timeout);
  return std::unique_ptr<IpcWorld>(new IpcWorld(std::move(st)));
}

void IpcWorld::launch(const std::vector<IpcPart>& parts, const void* input, void* output, DataType dtype,
                      ReduceOp op, std::size_t avg_count, double avg_divisor, void* stream_handle,
                      std::chrono::milliseconds timeout, const std::string& what, Done on_done) {
  State& st = *state_;
  KIZUNA_CHECK_ARG(!parts.empty() && parts.size() <= st.usable_blocks, what, ": ", parts.size(),
                   " parts for ", st.usable_blocks, " usable channel sets");
  std::lock_guard lock(st.mutex);
  set_device(st.device);
  auto stream = static_cast<cudaStream_t>(stream_handle);
  // Scratch: each part's at its own offset, 256-byte aligned.
  std::vector<std::size_t> scratch_at;
  std::size_t scratch_total = 0;
  std::size_t longest = 64;
  for (const IpcPart& part : parts) {
    scratch_at.push_back(scratch_total);
    scratch_total += align_up(std::max<std::size_t>(part.scratch_bytes, 1), 256);
    longest = std::max(longest, part.table->size());
  }
  st.ensure_scratch(scratch_total, stream);
  st.ensure_pending(longest, stream);
  // Every part's table on the device before any block points at one
  // (core/device_table_cache.hpp).
  std::vector<std::string_view> tables;
  for (const IpcPart& part : parts)
    tables.emplace_back(reinterpret_cast<const char*>(part.table->data()),
                        part.table->size() * sizeof(kernels::DeviceStep));
  st.tables.reserve(tables);
  kernels::FifoLaunch l;
  l.block_count = static_cast<int>(parts.size());
  for (std::size_t b = 0; b < parts.size(); ++b) {
    const IpcPart& part = parts[b];
    kernels::FifoBlock& block = l.blocks[b];
    block.program.steps = static_cast<kernels::DeviceStep*>(st.tables.place(tables[b]));
    block.program.step_count = static_cast<std::uint32_t>(part.table->size());
    block.program.rank = st.rank;
    block.program.world = st.world;
    block.program.slots = st.geometry.slots;
    block.program.slot_bytes = st.geometry.slot_bytes;
    block.program.in = st.d_in + b * st.world;
    block.program.out = st.d_out + b * st.world;
    block.program.counters = st.d_counters + b;
    block.program.pending = st.pending + b * st.pending_entries;
    // Unused buffers (a non-root's output of reduce, say) may be null.
    block.input = input ? static_cast<const unsigned char*>(input) + part.offset_bytes : nullptr;
    block.output = output ? static_cast<unsigned char*>(output) + part.offset_bytes : nullptr;
    block.scratch = static_cast<unsigned char*>(st.scratch) + scratch_at[b];
  }
  l.dtype = dtype;
  l.op = op;
  l.timeout_ns = static_cast<std::uint64_t>(timeout.count()) * 1000000ull;
  l.abort = st.abort_dev;
  const std::size_t slot = (st.calls++ % kStatusSlots) * kernels::kFifoMaxBlocks;
  for (std::size_t b = 0; b < parts.size(); ++b)
    st.status_host[slot + b] = static_cast<std::uint32_t>(kernels::FifoStatus::Running);
  l.status = st.status_dev + slot;
  // Calls run in call order whatever their streams: the channels are
  // shared. On the last call's stream the order holds already (but not on
  // cudaStreamPerThread, whose handle names each thread's own stream).
  if (st.launched && (stream != st.last_stream || stream == cudaStreamPerThread))
    KIZUNA_CUDA_CHECK(cudaStreamWaitEvent(stream, st.last, 0));
  kernels::launch_fifo(l, stream);
  if (op == ReduceOp::Avg && avg_count > 0) kernels::scale(output, avg_count, dtype, avg_divisor, stream);
  KIZUNA_CUDA_CHECK(cudaEventRecord(st.last, stream));
  st.launched = true;
  st.last_stream = stream;
  // Completion by polling an event of the call's own, never by a CUDA host
  // function: those are not called once the context has an error, and
  // on_done must not run on CUDA's callback thread (core/completion_poller.hpp).
  cudaEvent_t done = st.events.take();
  const cudaError_t recorded = cudaEventRecord(done, stream);
  if (recorded != cudaSuccess) {
    st.events.give(done);
    KIZUNA_CUDA_CHECK(recorded);
  }
  const volatile std::uint32_t* status = st.status_host + slot;
  const int blocks = static_cast<int>(parts.size());
  std::uint32_t* abort_flag = st.abort_host;
  const int device = st.device;
  EventPool* pool = &st.events;  // outlives the poller, which ~State resets first
  auto event = std::shared_ptr<CUevent_st>(done, [pool](cudaEvent_t e) { pool->give(e); });
  st.completions->watch({[event, status, blocks, abort_flag, what, device] {
                          set_device(device);
                          const cudaError_t q = cudaEventQuery(event.get());
                          if (q == cudaErrorNotReady) return false;
                          if (q != cudaSuccess)
                            KIZUNA_THROW(ErrorCode::CudaError, what, ": ", cudaGetErrorString(q));
                          return finished(status, blocks, abort_flag, what);
                        },
                        std::chrono::steady_clock::now() + timeout + kHostGrace, what,
                        [event, on_done = std::move(on_done)](std::exception_ptr e) mutable {
                          on_done(std::move(e));
                        },
                        [abort_flag] { *const_cast<volatile std::uint32_t*>(abort_flag) = 1; }});
}

std::string IpcWorld::how() const {
  const int others = state_->world - 1;
  if (state_->same_process == others) return "GPU to GPU in one process";
  if (state_->same_process == 0) return "GPU to GPU through CUDA IPC";
  return "GPU to GPU through CUDA IPC and, with " + std::to_string(state_->same_process) +
         " peer(s) in this process, shared pointers";
}

int IpcWorld::blocks() const { return static_cast<int>(state_->usable_blocks); }

void IpcWorld::abort() {
  State& st = *state_;
  if (st.abort_host) *const_cast<volatile std::uint32_t*>(st.abort_host) = 1;
  // The peers' kernels may be waiting on this rank: poison what they wait
  // on, once, so that they stop now rather than at their deadlines
  // (kernels/fifo_layout.hpp). At best effort: a context with an error
  // copies nothing, and the peers' hosts then stop their kernels when they
  // learn of the failure.
  if (st.poisoned.exchange(true) || st.uploads == nullptr) return;
  set_device(st.device);
  static const std::uint64_t poison = kernels::kFifoPoison;
  for (std::uint64_t* word : st.poison_words)
    if (cudaMemcpyAsync(word, &poison, sizeof poison, cudaMemcpyHostToDevice, st.uploads) != cudaSuccess) break;
}

}  // namespace kizuna::cuda
