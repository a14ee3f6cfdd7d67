// test_gpu: every check that needs a GPU, in one executable.
//
//   test_gpu                 all checks; exit 0 passed, 1 failed, 77 no usable GPU
//   test_gpu --step STEP     one check (tests/gpu/run.sh runs them one by one):
//     reduce                 the reduce kernels against the CPU, every dtype and op
//     threads N              N ranks as threads of this process, kernel path
//     procs N ipc|staged|hostfn   N processes: GPU to GPU (under MPS when they
//                            share a GPU), staged, staged with host-function gates
//     ddp N ipc|staged       the Reducer on device gradients
//     kill ipc|staged        a rank killed mid-collective; the others end in an error
//     mps                    exit 0 when this GPU's contexts go through MPS
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

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "collective_reference.hpp"
#include "core/reduce.hpp"
#include "cuda/runtime.hpp"
#include "kernels/reduce_kernel.hpp"

using namespace kizuna;
using namespace kizuna::test;

namespace {

// Counted from the rank threads at once (run_threads): an atomic, so that
// no failure is lost to a race.
std::atomic<int> g_failures{0};

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
  bool threads = false;  // ranks are threads of one process
  bool quick = false;    // small counts only (under compute-sanitizer)
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
  o.name = "gpu-check";  // threads' stores would otherwise each count their own communicators
  o.timeout = std::chrono::seconds(a.mode == "kill" ? 10 : 20);
  // Ranks that are threads share one CUDA context: a cudaFree, or a copy on
  // the legacy stream, waits for every rank's kernel, and a kernel waits
  // for its peers' kernels, which the blocked thread would never launch.
  // So the check allocates its buffers once, before the communicator, and
  // copies on a non-blocking stream of its own.
  const bool large = !a.quick;
  const std::size_t most = (large ? 1000003 : 1009) * 8 * std::size_t(a.world) + 1;
  void *din = nullptr, *dout = nullptr;
  CUDA_OK(cudaMalloc(&din, most));
  CUDA_OK(cudaMalloc(&dout, most));
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const auto up = [&](void* to, const void* from, std::size_t bytes) {
    CUDA_OK(cudaMemcpyAsync(to, from, bytes, cudaMemcpyHostToDevice, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
  };
  const auto down = [&](void* to, const void* from, std::size_t bytes) {
    CUDA_OK(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToHost, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
  };
  auto comm = Communicator::create(o);
  // The path must be the one asked for: threads of one process share
  // pointers, IPC joins processes' GPUs (ranks sharing one only under MPS,
  // whose kernels then run at once), and KIZUNA_CUDA_IPC=0 stages.
  int gpus = 0, mps = 0;
  CUDA_OK(cudaGetDeviceCount(&gpus));
  CUDA_OK(cudaDeviceGetAttribute(&mps, cudaDevAttrMpsEnabled, 0));
  const bool expect_ipc = a.ipc && (a.threads || gpus >= a.world || mps);
  const char* expected = !expect_ipc ? "staged" : a.threads ? "in one process" : "CUDA IPC";
  const std::string path = comm->device();
  if (path.find(expected) == std::string::npos) {
    std::printf("rank %d: expected the path '%s', got %s\n", a.rank, expected, path.c_str());
    return 2;
  }
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
  for (DataType t : kAllDataTypes) {
    for (ReduceOp op : kAllReduceOps) {
      if (op == ReduceOp::Avg && !is_floating(t)) continue;
      const CollectiveReference ref(t, op);
      const std::size_t e = ref.elem();
      for (std::uint64_t count : {0ull, 1ull, 1009ull, 1000003ull}) {
        if (count > 1009 && !large) continue;
        const std::size_t bytes = count * e;
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
        up(din, in.data(), bytes);
        comm->all_reduce(din, dout, count, t, op, ds).wait();
        down(got.data(), dout, bytes);
        expect("all_reduce", got, count, [&](std::uint64_t i, unsigned char* w) { ref.reduced(n, i, w); });
        // reduce_scatter
        auto in_n = ref.input_buffer(r, count * n);
        up(din, in_n.data(), bytes * n);
        comm->reduce_scatter(din, dout, count, t, op, ds).wait();
        down(got.data(), dout, bytes);
        expect("reduce_scatter", got, count, [&](std::uint64_t i, unsigned char* w) { ref.reduced(n, r * count + i, w); });
        // reduce to the last rank
        up(din, in.data(), bytes);
        comm->reduce(din, dout, count, t, op, n - 1, ds).wait();
        if (r == n - 1) {
          down(got.data(), dout, bytes);
          expect("reduce", got, count, [&](std::uint64_t i, unsigned char* w) { ref.reduced(n, i, w); });
        }
        if (op != ReduceOp::Sum) continue;
        // all_gather and broadcast (no operator)
        comm->all_gather(din, dout, count, t, ds).wait();
        down(got.data(), dout, bytes * n);
        if (count)
          expect("all_gather", got, count * n,
                 [&](std::uint64_t i, unsigned char* w) { ref.input(static_cast<int>(i / count), i % count, w); });
        comm->broadcast(din, dout, count, t, 0, ds).wait();
        down(got.data(), dout, bytes);
        expect("broadcast", got, count, [&](std::uint64_t i, unsigned char* w) { ref.input(0, i, w); });
        // In place: the input is this rank's block of the output (a share
        // larger than the FIFO once deadlocked the walk).
        auto* own = static_cast<unsigned char*>(dout) + r * bytes;
        up(own, in.data(), bytes);
        comm->all_gather(own, dout, count, t, ds).wait();
        down(got.data(), dout, bytes * n);
        if (count)
          expect("all_gather in place", got, count * n,
                 [&](std::uint64_t i, unsigned char* w) { ref.input(static_cast<int>(i / count), i % count, w); });
      }
    }
  }
  // Every rank done before any frees (a cudaFree waits for the peers' kernels).
  comm->barrier().wait();
  std::printf("rank %d of %d on %s: %s\n", r, n, comm->device().c_str(), wrong ? "WRONG" : "ok");
  comm.reset();
  CUDA_OK(cudaFree(din));
  CUDA_OK(cudaFree(dout));
  CUDA_OK(cudaStreamDestroy(stream));
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
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(100);
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

// Ranks as threads of this process, on the kernel path: one store, one
// communicator per thread, every check of run_rank.
std::vector<int> run_threads(int world, bool quick = false) {
  TcpStoreServer server(TcpStoreOptions{});
  std::vector<int> codes(world, -1);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      RankArgs a;
      a.rank = r;
      a.world = world;
      a.port = server.port();
      a.mode = "check";
      a.threads = true;
      a.quick = quick;
      try {
        codes[r] = run_rank(a);
      } catch (const Error& e) {
        std::printf("rank %d: %s: %s\n", r, name(e.code()).data(), e.what());
        codes[r] = 10 + static_cast<int>(e.code());
      }
    });
  for (auto& t : threads) t.join();
  return codes;
}

int expect_all_zero(const std::vector<int>& codes, const std::string& what) {
  for (std::size_t r = 0; r < codes.size(); ++r)
    GPU_EXPECT(codes[r] == 0, "%s: rank %zu exited %d", what.c_str(), r, codes[r]);
  std::printf("%s: %s\n", what.c_str(), g_failures ? "FAILED" : "ok");
  return g_failures ? 1 : 0;
}

int kill_check(const char* self, bool ipc) {
  const char* path = ipc ? "GPU to GPU" : "staged";
  // A rank killed mid-collective: the others end with an error, within
  // their 10 s deadline (PeerLost staged; IPC kernels see only the
  // deadline, or PeerLost when the host noticed first).
  const auto start = std::chrono::steady_clock::now();
  const auto codes = run_ranks(self, 4, "kill", ipc);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (int r : {0, 2, 3})
    GPU_EXPECT(codes[r] == 3 || (ipc && codes[r] == 6), "%s kill test: survivor %d exited %d, expected %s", path, r,
               codes[r], ipc ? "PeerLost (3) or Timeout (6)" : "PeerLost (3)");
  GPU_EXPECT(took < 60, "%s kill test: the survivors took %.0f s", path, took);
  std::printf("a rank killed mid-collective, %s: survivors error out in %.1f s: %s\n", path, took,
              g_failures ? "FAILED" : "ok");
  return g_failures ? 1 : 0;
}

// One step of tests/gpu/run.sh. Multi-process steps fork before this
// process touches CUDA.
int run_step(const char* self, const std::vector<std::string>& args) {
  const std::string step = args.empty() ? "" : args[0];
  const int world = args.size() > 1 ? std::atoi(args[1].c_str()) : 0;
  const std::string how = args.size() > 2 ? args[2] : (args.size() > 1 ? args[1] : "");
  if (step == "reduce") {
    check_reduce_kernel();
    return g_failures ? 1 : 0;
  }
  if (step == "mps") {
    int mps = 0;
    CUDA_OK(cudaDeviceGetAttribute(&mps, cudaDevAttrMpsEnabled, 0));
    std::printf("MPS %s\n", mps ? "enabled" : "not enabled");
    return mps ? 0 : 1;
  }
  if (step == "threads" && world >= 1)
    return expect_all_zero(run_threads(world, how == "quick"), "device collectives, " + std::to_string(world) +
                                                   " ranks as threads of one process, kernel path");
  if (step == "procs" && world >= 1 && (how == "ipc" || how == "staged" || how == "hostfn"))
    return expect_all_zero(run_ranks(self, world, "check", how == "ipc", how != "hostfn"),
                           "device collectives, " + std::to_string(world) + " processes, " + how);
  if (step == "ddp" && world >= 1 && (how == "ipc" || how == "staged"))
    return expect_all_zero(run_ranks(self, world, "ddp", how == "ipc"),
                           "DDP on device gradients, " + std::to_string(world) + " processes, " + how);
  if (step == "kill" && (how == "ipc" || how == "staged")) return kill_check(self, how == "ipc");
  std::fprintf(stderr, "test_gpu: unknown step; see the comment at the top of tests/gpu/test_gpu.cpp\n");
  return 2;
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
  std::vector<std::string> step;
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--step")
      for (int j = i + 1; j < argc; ++j) step.emplace_back(argv[j]);
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
  if (!step.empty()) return run_step(argv[0], step);

  // Threads of one process on the kernel path (pointers shared, no MPS).
  for (int world : {2, 4, 8})
    expect_all_zero(run_threads(world), "device collectives, " + std::to_string(world) + " threads, kernel path");
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
    kill_check(argv[0], ipc);
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
