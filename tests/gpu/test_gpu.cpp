// test_gpu: every check that needs a GPU, in one executable.
//
//   test_gpu                 all checks; exit 0 passed, 1 failed, 77 no usable GPU
//   test_gpu --rank R ...    one rank of a multi-rank check (started by the above)
//
// Ranks are separate processes started with fork+exec (CUDA must not be
// initialised before a fork), all on GPU 0 when there is one GPU — several
// ranks per GPU is exactly what NCCL refuses and kizuna must support. Each
// check compares the device results with the closed-form reference of
// tests/support/collective_reference.hpp, bit for bit.
#include <cuda_runtime.h>
#include <kizuna/comm.hpp>
#include <kizuna/reducer.hpp>
#include <kizuna/tcp_store.hpp>
#include <kizuna/tcp_store_server.hpp>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "collective_reference.hpp"
#include "core/reduce.hpp"
#include "cuda/runtime.hpp"
#include "kernels/reduce_kernel.hpp"

using namespace kizuna;
using namespace kizuna::test;

namespace {

int g_failures = 0;

#define GPU_EXPECT(cond, ...)            \
  do {                                   \
    if (!(cond)) {                       \
      std::printf("FAIL: " __VA_ARGS__); \
      std::printf("\n");                 \
      ++g_failures;                      \
    }                                    \
  } while (0)

#define CUDA_OK(expr)                                                                         \
  do {                                                                                        \
    const cudaError_t kz_e = (expr);                                                          \
    if (kz_e != cudaSuccess) {                                                                \
      std::printf("FAIL: %s: %s (%s:%d)\n", #expr, cudaGetErrorString(kz_e), __FILE__, __LINE__); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

void check_reduce_kernel() {
  const std::size_t counts[] = {0, 1, 7, 1000003};
  for (int t = 0; t < kNumDataTypes; ++t) {
    for (int o = 0; o < kNumReduceOps; ++o) {
      for (std::size_t count : counts) {
        const auto dtype = static_cast<DataType>(t);
        const auto op = static_cast<ReduceOp>(o);
        const std::size_t bytes = count * size_of(dtype);
        std::vector<unsigned char> a(bytes), b(bytes), want(bytes), got(bytes);
        for (std::size_t i = 0; i < bytes; ++i) {
          a[i] = static_cast<unsigned char>(i * 7 + 3);
          b[i] = static_cast<unsigned char>(i * 13 + 5);
        }
        // Keep float exponents moderate so every value is finite.
        if (is_floating(dtype))
          for (std::size_t i = size_of(dtype) - 1; i < bytes; i += size_of(dtype)) a[i] = b[i] = 0x3c;
        want = a;
        core::reduce(want.data(), b.data(), count, dtype, op);
        void *da = nullptr, *db = nullptr;
        CUDA_OK(cudaMalloc(&da, bytes + 1));
        CUDA_OK(cudaMalloc(&db, bytes + 1));
        CUDA_OK(cudaMemcpy(da, a.data(), bytes, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(db, b.data(), bytes, cudaMemcpyHostToDevice));
        kernels::reduce(da, db, count, dtype, op, nullptr);
        CUDA_OK(cudaMemcpy(got.data(), da, bytes, cudaMemcpyDeviceToHost));
        GPU_EXPECT(got == want, "reduce_kernel %s %s count %zu differs from the CPU", name(dtype).data(),
                   name(op).data(), count);
        cudaFree(da);
        cudaFree(db);
      }
    }
  }
  std::printf("reduce_kernel: every dtype x op matches the CPU reduction\n");
}

// ---- one rank of a multi-rank check ------------------------------------------

struct RankArgs {
  int rank = -1, world = 0, port = 0;
  std::string mode;  // "check", "kill"
  bool ipc = true;   // KIZUNA_CUDA_IPC: GPU to GPU, or staged through the host
};

int run_rank(const RankArgs& a) {
  TcpStoreOptions so;
  so.host = "127.0.0.1";
  so.port = a.port;
  CommOptions o;
  o.store = std::make_shared<TcpStore>(so);
  o.rank = a.rank;
  o.world_size = a.world;
  o.device = "cuda";
  o.local_rank = a.rank;
  o.timeout = std::chrono::seconds(a.mode == "kill" ? 10 : 20);
  auto comm = Communicator::create(o);
  // The path must be the one asked for: IPC joins the ranks' GPUs (ranks
  // sharing one only under MPS, whose kernels then run at once), and
  // KIZUNA_CUDA_IPC=0 stages.
  int gpus = 0, mps = 0;
  CUDA_OK(cudaGetDeviceCount(&gpus));
  CUDA_OK(cudaDeviceGetAttribute(&mps, cudaDevAttrMpsEnabled, 0));
  const bool expect_ipc = a.ipc && (gpus >= a.world || mps);
  const std::string path = comm->device();
  if (path.find(expect_ipc ? "CUDA IPC" : "staged") == std::string::npos) {
    std::printf("rank %d: expected the %s path, got %s\n", a.rank, expect_ipc ? "CUDA IPC" : "staged", path.c_str());
    return 2;
  }
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  const DeviceStream ds{stream};
  const int n = a.world, r = a.rank;

  if (a.mode == "kill") {
    std::vector<float> host(1 << 22, 1.0f);
    void* d = nullptr;
    CUDA_OK(cudaMalloc(&d, host.size() * 4));
    CUDA_OK(cudaMemcpy(d, host.data(), host.size() * 4, cudaMemcpyHostToDevice));
    try {
      for (int i = 0; i < 1000; ++i) {
        if (r == 1 && i == 3) ::raise(SIGKILL);
        comm->all_reduce(d, d, host.size(), DataType::Float32, ReduceOp::Sum, ds).wait();
      }
    } catch (const Error& e) {
      std::printf("rank %d: %s: %s\n", r, name(e.code()).data(), e.what());
      return e.code() == ErrorCode::PeerLost ? 3 : e.code() == ErrorCode::Timeout ? 6 : 4;
    }
    return 5;  // nobody noticed the dead rank
  }

  if (a.mode == "ddp") {
    // The Reducer on device gradients: three parameters back to back; every
    // rank ends with the mean of the ranks' gradients.
    std::vector<Parameter> views;
    std::size_t at = 0;
    for (std::size_t count : {1000u, 37u, 300007u}) {
      Parameter p;
      p.name = "p" + std::to_string(views.size());
      p.offset = at;
      p.count = count;
      at += count * 4;
      views.push_back(p);
    }
    const std::size_t n_floats = at / 4;
    std::vector<float> host(n_floats);
    for (std::size_t i = 0; i < n_floats; ++i) host[i] = static_cast<float>((r + 1) * (i % 97));
    void *dparams = nullptr, *dgrads = nullptr;
    CUDA_OK(cudaMalloc(&dparams, at));
    CUDA_OK(cudaMalloc(&dgrads, at));
    CUDA_OK(cudaMemcpy(dgrads, host.data(), at, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dparams, host.data(), at, cudaMemcpyHostToDevice));
    ReducerOptions ro;
    ro.stream = ds;
    ro.first_bucket_bytes = 4096;
    ro.bucket_cap_bytes = 512 << 10;
    Reducer reducer(comm, dparams, dgrads, at, views, ro);
    for (std::size_t p = views.size(); p-- > 0;) reducer.mark_ready(p);
    reducer.finalize();
    CUDA_OK(cudaMemcpy(host.data(), dgrads, at, cudaMemcpyDeviceToHost));
    int wrong = 0;
    const float mean_factor = (n + 1) / 2.0f;  // mean of 1..n
    for (std::size_t i = 0; i < n_floats; ++i)
      if (host[i] != mean_factor * static_cast<float>(i % 97)) ++wrong;
    // broadcast_parameters (at construction) left rank 0's parameters everywhere.
    CUDA_OK(cudaMemcpy(host.data(), dparams, at, cudaMemcpyDeviceToHost));
    for (std::size_t i = 0; i < n_floats; ++i)
      if (host[i] != static_cast<float>(i % 97)) ++wrong;
    std::printf("rank %d of %d: DDP on device gradients: %s\n", r, n, wrong ? "WRONG" : "ok");
    return wrong ? 1 : 0;
  }

  // "check": every collective x dtype x op on device buffers.
  int wrong = 0;
  const DataType types[] = {DataType::Float16, DataType::BFloat16, DataType::Float32, DataType::Float64,
                            DataType::Int32, DataType::Int64, DataType::UInt8};
  for (DataType t : types) {
    for (ReduceOp op : kAllReduceOps) {
      if (op == ReduceOp::Avg && !is_floating(t)) continue;
      const CollectiveReference ref(t, op);
      const std::size_t e = ref.elem();
      for (std::uint64_t count : {0ull, 1ull, 1009ull, 1000003ull}) {
        const std::size_t bytes = count * e;
        void *din = nullptr, *dout = nullptr;
        CUDA_OK(cudaMalloc(&din, bytes * n + 1));
        CUDA_OK(cudaMalloc(&dout, bytes * n + 1));
        auto expect = [&](const char* what, const std::vector<unsigned char>& got, std::uint64_t elements, auto&& fn) {
          const std::string w = ref.compare(got.data(), elements, fn);
          if (!w.empty()) {
            std::printf("rank %d %s %s %s count %llu: %s\n", r, what, name(t).data(), name(op).data(),
                        static_cast<unsigned long long>(count), w.c_str());
            ++wrong;
          }
        };
        std::vector<unsigned char> got(bytes * n);
        // all_reduce
        auto in = ref.input_buffer(r, count);
        CUDA_OK(cudaMemcpy(din, in.data(), bytes, cudaMemcpyHostToDevice));
        comm->all_reduce(din, dout, count, t, op, ds).wait();
        CUDA_OK(cudaMemcpy(got.data(), dout, bytes, cudaMemcpyDeviceToHost));
        expect("all_reduce", got, count, [&](std::uint64_t i, unsigned char* w) { ref.reduced(n, i, w); });
        // reduce_scatter
        auto in_n = ref.input_buffer(r, count * n);
        CUDA_OK(cudaMemcpy(din, in_n.data(), bytes * n, cudaMemcpyHostToDevice));
        comm->reduce_scatter(din, dout, count, t, op, ds).wait();
        CUDA_OK(cudaMemcpy(got.data(), dout, bytes, cudaMemcpyDeviceToHost));
        expect("reduce_scatter", got, count, [&](std::uint64_t i, unsigned char* w) { ref.reduced(n, r * count + i, w); });
        // reduce to the last rank
        CUDA_OK(cudaMemcpy(din, in.data(), bytes, cudaMemcpyHostToDevice));
        comm->reduce(din, dout, count, t, op, n - 1, ds).wait();
        if (r == n - 1) {
          CUDA_OK(cudaMemcpy(got.data(), dout, bytes, cudaMemcpyDeviceToHost));
          expect("reduce", got, count, [&](std::uint64_t i, unsigned char* w) { ref.reduced(n, i, w); });
        }
        if (op != ReduceOp::Sum) {
          cudaFree(din);
          cudaFree(dout);
          continue;
        }
        // all_gather and broadcast (no operator)
        comm->all_gather(din, dout, count, t, ds).wait();
        CUDA_OK(cudaMemcpy(got.data(), dout, bytes * n, cudaMemcpyDeviceToHost));
        if (count)
          expect("all_gather", got, count * n,
                 [&](std::uint64_t i, unsigned char* w) { ref.input(static_cast<int>(i / count), i % count, w); });
        comm->broadcast(din, dout, count, t, 0, ds).wait();
        CUDA_OK(cudaMemcpy(got.data(), dout, bytes, cudaMemcpyDeviceToHost));
        expect("broadcast", got, count, [&](std::uint64_t i, unsigned char* w) { ref.input(0, i, w); });
        // In place: the input is this rank's block of the output (a share
        // larger than the FIFO once deadlocked the walk).
        auto* own = static_cast<unsigned char*>(dout) + r * bytes;
        CUDA_OK(cudaMemcpy(own, in.data(), bytes, cudaMemcpyHostToDevice));
        comm->all_gather(own, dout, count, t, ds).wait();
        CUDA_OK(cudaMemcpy(got.data(), dout, bytes * n, cudaMemcpyDeviceToHost));
        if (count)
          expect("all_gather in place", got, count * n,
                 [&](std::uint64_t i, unsigned char* w) { ref.input(static_cast<int>(i / count), i % count, w); });
        cudaFree(din);
        cudaFree(dout);
      }
    }
  }
  CUDA_OK(cudaStreamDestroy(stream));
  std::printf("rank %d of %d on %s: %s\n", r, n, comm->device().c_str(), wrong ? "WRONG" : "ok");
  return wrong ? 1 : 0;
}

// ---- the parent: starts ranks as processes -----------------------------------

// `stream_wait` false: staged calls gate their copies back with host
// functions rather than cuStreamWaitValue32 (KIZUNA_CUDA_STREAM_WAIT=0).
std::vector<int> run_ranks(const char* self, int world, const std::string& mode, bool ipc, bool stream_wait = true) {
  TcpStoreServer server(TcpStoreOptions{});
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setenv("KIZUNA_CUDA_IPC", ipc ? "1" : "0", 1);
      ::setenv("KIZUNA_CUDA_STREAM_WAIT", stream_wait ? "1" : "0", 1);
      const std::string rs = std::to_string(r), ws = std::to_string(world), ps = std::to_string(server.port());
      ::execl(self, self, "--rank", rs.c_str(), "--world", ws.c_str(), "--port", ps.c_str(), "--mode", mode.c_str(),
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    pids.push_back(pid);
  }
  std::vector<int> codes;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  for (pid_t pid : pids) {
    int status = 0;
    while (::waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &status, 0);
        break;
      }
      ::usleep(10000);
    }
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  }
  return codes;
}

}  // namespace

int main(int argc, char** argv) {
  RankArgs a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--rank" && i + 1 < argc) a.rank = std::atoi(argv[++i]);
    else if (arg == "--world" && i + 1 < argc) a.world = std::atoi(argv[++i]);
    else if (arg == "--port" && i + 1 < argc) a.port = std::atoi(argv[++i]);
    else if (arg == "--mode" && i + 1 < argc) a.mode = argv[++i];
  }
  const char* ipc = std::getenv("KIZUNA_CUDA_IPC");
  a.ipc = ipc == nullptr || std::string(ipc) != "0";
  if (a.rank >= 0) {
    try {
      return run_rank(a);
    } catch (const Error& e) {
      std::printf("rank %d: %s: %s\n", a.rank, name(e.code()).data(), e.what());
      return 10 + static_cast<int>(e.code());
    }
  }

  // The parent checks for a GPU in a child process, so that it never
  // initialises CUDA itself before forking the ranks.
  const pid_t probe_pid = ::fork();
  if (probe_pid == 0) ::_exit(cuda::probe().device_count > 0 ? 0 : 77);
  int probe_status = 0;
  ::waitpid(probe_pid, &probe_status, 0);
  if (!WIFEXITED(probe_status) || WEXITSTATUS(probe_status) != 0) {
    std::printf("skipped: %s\n", cuda::probe().reason.c_str());
    return 77;
  }

  // GPU to GPU through CUDA IPC, then staged (KIZUNA_CUDA_IPC=0, the
  // fallback when IPC cannot join the ranks).
  for (const bool ipc : {true, false}) {
    const char* path = ipc ? "CUDA IPC" : "staged";
    for (int world : ipc ? std::vector<int>{2, 3, 4, 8} : std::vector<int>{2, 4}) {
      const int before = g_failures;
      const auto codes = run_ranks(argv[0], world, "check", ipc);
      for (int r = 0; r < world; ++r)
        GPU_EXPECT(codes[r] == 0, "%s check with %d ranks: rank %d exited %d", path, world, r, codes[r]);
      std::printf("device collectives, %s, %d ranks on one GPU: %s\n", path, world, g_failures > before ? "FAILED" : "ok");
    }
    for (int world : {2, 3}) {
      const auto codes = run_ranks(argv[0], world, "ddp", ipc);
      for (int r = 0; r < world; ++r)
        GPU_EXPECT(codes[r] == 0, "%s DDP with %d ranks: rank %d exited %d", path, world, r, codes[r]);
    }
    // A rank killed mid-collective: the others end with an error, within
    // their 10 s deadline (PeerLost staged; IPC kernels see only the
    // deadline, or PeerLost when the host noticed first).
    const auto start = std::chrono::steady_clock::now();
    const auto codes = run_ranks(argv[0], 4, "kill", ipc);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (int r : {0, 2, 3})
      GPU_EXPECT(codes[r] == 3 || (ipc && codes[r] == 6), "%s kill test: survivor %d exited %d, expected %s", path, r,
                 codes[r], ipc ? "PeerLost (3) or Timeout (6)" : "PeerLost (3)");
    GPU_EXPECT(took < 60, "%s kill test: the survivors took %.0f s", path, took);
    std::printf("a rank killed mid-collective, %s: survivors error out in %.1f s\n", path, took);
  }
  // Staged with the other kind of gate: a host function on the copy
  // queue's stream instead of cuStreamWaitValue32.
  {
    const int before = g_failures;
    const auto codes = run_ranks(argv[0], 2, "check", false, false);
    for (int r = 0; r < 2; ++r)
      GPU_EXPECT(codes[r] == 0, "staged (host-function gates) check: rank %d exited %d", r, codes[r]);
    std::printf("device collectives, staged with host-function gates, 2 ranks: %s\n",
                g_failures > before ? "FAILED" : "ok");
  }
  // The reduce kernel last: it initialises CUDA in this process.
  check_reduce_kernel();
  std::printf("%s\n", g_failures ? "GPU checks FAILED" : "GPU checks passed");
  return g_failures ? 1 : 0;
}
