// kizuna-soak: one rank of the soak test (`make soak`, CTest label `soak`).
// Started by kizuna-run (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set):
//
//   kizuna-run --nproc-per-node 4 -- kizuna-soak --seconds 600
//
// For the given time every rank runs the same random sequence of
// collectives (all ranks draw from one generator seeded alike): a random
// kind (all_reduce in place or not, broadcast, reduce, all_gather,
// reduce_scatter, barrier, send/recv between rank pairs), size (0 to
// --max-bytes per rank, log-uniform, so small and large both come often),
// dtype, operator, root and communicator. There are eight communicators, one
// per transport (tcp, shm) and algorithm (ring, tree, one-shot, two-shot), all with
// KIZUNA_CHECK's fingerprints on, so both transports and every schedule
// run interleaved. Every result is compared element by element with the
// closed-form reference of tests/support/collective_reference.hpp (exact,
// floats included); the inputs are shifted by the operation's number so
// that a result left over from an earlier call cannot pass.
//
// Resident memory (/proc/self/statm) is sampled at every stop check (every
// 16 operations). The warm-up runs every kind at the largest size on every
// communicator, then random operations until a fifth of the run (at least
// 5 s) has passed; the baseline is the sample at its end, and growth is the
// largest sample after it minus the baseline. Rank 0 prints one line per
// rank and a summary.
//
// Exit status (the same on every rank): 0 all results right and every
// rank's growth under --rss-limit-mib; 1 a wrong result or too much growth;
// 2 bad usage; 3 a kizuna::Error (the message says which).
#include <kizuna/comm.hpp>
#include <kizuna/store.hpp>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "algorithms.hpp"
#include "collective_reference.hpp"

using namespace kizuna;
using namespace kizuna::test;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  double seconds = 600;
  std::uint64_t seed = 0;  // 0: rank 0 picks one
  std::uint64_t max_bytes = 4 << 20;
  double rss_limit_mib = 16;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "kizuna-soak: %s\nusage: kizuna-soak [--seconds S] [--seed N] [--max-bytes B] "
               "[--rss-limit-mib M]\n",
               why.c_str());
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage("missing value after " + flag);
    const std::string value = argv[++i];
    char* end = nullptr;
    const double number = std::strtod(value.c_str(), &end);
    if (end == value.c_str() || *end != '\0' || !(number >= 0)) usage(flag + "='" + value + "' is not a number >= 0");
    if (flag == "--seconds") o.seconds = number;
    else if (flag == "--seed") o.seed = std::strtoull(value.c_str(), nullptr, 10);
    else if (flag == "--max-bytes") o.max_bytes = static_cast<std::uint64_t>(number);
    else if (flag == "--rss-limit-mib") o.rss_limit_mib = number;
    else usage("unknown flag " + flag);
  }
  return o;
}

int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v) usage(std::string(name) + " is not set; start kizuna-soak with kizuna-run");
  return std::atoi(v);
}

std::int64_t rss_kib() {
  std::ifstream statm("/proc/self/statm");
  std::int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * (::sysconf(_SC_PAGESIZE) / 1024);
}

enum class Kind { AllReduce, AllReduceInPlace, Broadcast, Reduce, AllGather, ReduceScatter, Barrier, SendRecv, kCount };
constexpr const char* kKindNames[] = {"all_reduce", "all_reduce(in place)", "broadcast", "reduce",
                                      "all_gather", "reduce_scatter", "barrier", "send/recv"};
constexpr int kKinds = static_cast<int>(Kind::kCount);

struct Channel {
  std::string name;
  std::shared_ptr<Communicator> comm;
};

// One operation, identical on every rank.
struct Op {
  Kind kind;
  DataType dtype;
  ReduceOp op;
  std::size_t count;  // per-rank elements
  int root;
  int channel;
  std::uint64_t first;  // the reference's index shift
};

class Soak {
 public:
  Soak(const Options& o, int rank, int world) : o_(o), rank_(rank), world_(world) {
    // Every buffer is allocated and touched once, before the baseline.
    const std::size_t cap = o.max_bytes * static_cast<std::size_t>(world) + 8;
    send_.assign(cap, 0x5a);
    recv_.assign(cap, 0xa5);
  }

  Op draw(std::mt19937_64& g, std::uint64_t number, int channels) {
    Op op{};
    op.kind = static_cast<Kind>(g() % kKinds);
    op.dtype = kAllDataTypes[g() % std::size(kAllDataTypes)];
    op.op = kAllReduceOps[g() % std::size(kAllReduceOps)];
    if (op.op == ReduceOp::Avg && !is_floating(op.dtype)) op.op = ReduceOp::Sum;
    // 1 in 16 empty; else log-uniform in [1, max_bytes].
    std::uint64_t bytes = 0;
    if (g() % 16 != 0) {
      const double u = std::uniform_real_distribution<double>(0, 1)(g);
      bytes = static_cast<std::uint64_t>(std::exp(u * std::log(static_cast<double>(o_.max_bytes))));
    }
    op.count = bytes / size_of(op.dtype);
    op.root = static_cast<int>(g() % static_cast<std::uint64_t>(world_));
    op.channel = static_cast<int>(g() % static_cast<std::uint64_t>(channels));
    op.first = (number * 7919) % 1000003;
    return op;
  }

  // Runs `op` on `comm` and checks this rank's result; "" when right.
  std::string run(Communicator& comm, const Op& op) {
    const CollectiveReference ref(op.dtype, op.op);
    const std::size_t e = ref.elem(), n = op.count, w = static_cast<std::size_t>(world_);
    unsigned char* s = send_.data();
    unsigned char* r = recv_.data();
    auto fill = [&](unsigned char* buf, int rank, std::size_t count, std::uint64_t first) {
      for (std::size_t i = 0; i < count; ++i) ref.input(rank, first + i, buf + i * e);
    };
    auto poison = [&](std::size_t bytes) { std::memset(r, 0xa5, bytes); };
    auto reduced = [&](std::uint64_t first) {
      return [&, first](std::uint64_t i, unsigned char* want) { ref.reduced(world_, first + i, want); };
    };
    auto input_of = [&](int rank, std::uint64_t first) {
      return [&, rank, first](std::uint64_t i, unsigned char* want) { ref.input(rank, first + i, want); };
    };
    switch (op.kind) {
      case Kind::AllReduce:
        fill(s, rank_, n, op.first);
        poison(n * e);
        comm.all_reduce(s, r, n, op.dtype, op.op).wait();
        return ref.compare(r, n, reduced(op.first));
      case Kind::AllReduceInPlace:
        fill(r, rank_, n, op.first);
        comm.all_reduce(r, n, op.dtype, op.op).wait();
        return ref.compare(r, n, reduced(op.first));
      case Kind::Broadcast:
        if (rank_ == op.root) fill(r, rank_, n, op.first);
        else poison(n * e);
        comm.broadcast(r, n, op.dtype, op.root).wait();
        return ref.compare(r, n, input_of(op.root, op.first));
      case Kind::Reduce:
        fill(s, rank_, n, op.first);
        poison(n * e);
        comm.reduce(s, r, n, op.dtype, op.op, op.root).wait();
        return rank_ == op.root ? ref.compare(r, n, reduced(op.first)) : "";
      case Kind::AllGather:
        fill(s, rank_, n, op.first);
        poison(w * n * e);
        comm.all_gather(s, r, n, op.dtype).wait();
        for (int j = 0; j < world_; ++j) {
          std::string wrong = ref.compare(r + j * n * e, n, input_of(j, op.first));
          if (!wrong.empty()) return "block of rank " + std::to_string(j) + ": " + wrong;
        }
        return "";
      case Kind::ReduceScatter:
        fill(s, rank_, w * n, op.first);
        poison(n * e);
        comm.reduce_scatter(s, r, n, op.dtype, op.op).wait();
        return ref.compare(r, n, reduced(op.first + rank_ * n));
      case Kind::Barrier:
        comm.barrier().wait();
        return "";
      case Kind::SendRecv: {
        // Pairs (0, 1), (2, 3), ...: the even rank sends first, the odd one
        // receives first, so neither waits on the other's queue.
        const int peer = rank_ ^ 1;
        if (peer >= world_) return "";
        fill(s, rank_, n, op.first);
        poison(n * e);
        if (rank_ % 2 == 0) {
          comm.send(s, n, op.dtype, peer).wait();
          comm.recv(r, n, op.dtype, peer).wait();
        } else {
          comm.recv(r, n, op.dtype, peer).wait();
          comm.send(s, n, op.dtype, peer).wait();
        }
        return ref.compare(r, n, input_of(peer, op.first));
      }
      case Kind::kCount: break;
    }
    return "";
  }

 private:
  Options o_;
  int rank_, world_;
  std::vector<unsigned char> send_, recv_;
};

// Per-rank figures, gathered to every rank as int64 words.
enum Stat { kOps, kWrong, kBaselineKiB, kFinalKiB, kPeakKiB, kTcpOps, kShmOps, kStats };

int soak(const Options& o) {
  const int rank = env_int("RANK"), world = env_int("WORLD_SIZE");
  const auto store = Store::from_env();
  std::vector<Channel> channels;
  for (Transport t : {Transport::Tcp, Transport::Shm})
    for (const auto& [a, algo_name] : kForcedAlgorithms) {
      CommOptions c;
      c.store = store;
      c.rank = rank;
      c.world_size = world;
      c.transport = t;
      c.algorithm = a;
      c.check = true;
      c.name = std::string("soak/") + (t == Transport::Tcp ? "tcp" : "shm") + "-" + algo_name;
      channels.push_back({c.name.substr(5), Communicator::create(c)});
    }
  Communicator& control = *channels[0].comm;

  std::uint64_t seed = o.seed;
  if (seed == 0 && rank == 0) seed = std::random_device{}() | 1;
  control.broadcast(&seed, 1, DataType::UInt64, 0).wait();
  std::mt19937_64 g(seed);
  if (rank == 0)
    std::printf("soak: %d ranks, %.0f s, seed %llu, up to %llu bytes per rank, %zu communicators "
                "(tcp and shm x ring, tree, one-shot, two-shot), KIZUNA_CHECK on\n",
                world, o.seconds, static_cast<unsigned long long>(seed),
                static_cast<unsigned long long>(o.max_bytes), channels.size());
  std::fflush(stdout);

  Soak s(o, rank, world);
  std::int64_t stats[kStats] = {};
  std::int64_t per_kind[kKinds] = {};
  const double warmup = std::max(5.0, o.seconds / 5);
  const Clock::time_point start = Clock::now();
  bool warmed = false;
  auto account = [&](const Op& op, std::uint64_t number, const std::string& wrong) {
    ++stats[kOps];
    ++per_kind[static_cast<int>(op.kind)];
    ++stats[op.channel < 3 ? kTcpOps : kShmOps];
    if (wrong.empty()) return;
    ++stats[kWrong];
    std::printf("rank %d: WRONG %s #%llu on %s: %s %s, %zu elements, root %d: %s\n", rank,
                kKindNames[static_cast<int>(op.kind)], static_cast<unsigned long long>(number),
                channels[op.channel].name.c_str(), std::string(name(op.dtype)).c_str(),
                std::string(name(op.op)).c_str(), op.count, op.root, wrong.c_str());
    std::fflush(stdout);
  };
  // Warm-up, part 1: every kind at the largest size on every communicator,
  // so that each has grown its buffers to their largest before the clock's
  // part of the warm-up and the baseline.
  std::uint64_t number = 0;
  for (int c = 0; c < static_cast<int>(channels.size()); ++c)
    for (int k = 0; k < kKinds; ++k) {
      const Op op{static_cast<Kind>(k), DataType::Float32, ReduceOp::Sum, o.max_bytes / 4, k % world, c,
                  number};
      account(op, number++, s.run(*channels[c].comm, op));
    }
  for (;; ++number) {
    if (number % 16 == 0) {
      // Rank 0's clock decides, so every rank stops after the same operation.
      const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      std::int32_t phase = elapsed >= o.seconds ? 2 : elapsed >= warmup ? 1 : 0;
      control.broadcast(&phase, 1, DataType::Int32, 0).wait();
      const std::int64_t rss = rss_kib();
      if (phase >= 1 && !warmed) {
        warmed = true;
        stats[kBaselineKiB] = stats[kPeakKiB] = rss;
      }
      if (warmed) stats[kPeakKiB] = std::max(stats[kPeakKiB], rss);
      if (phase == 2) {
        stats[kFinalKiB] = rss;
        break;
      }
    }
    const Op op = s.draw(g, number, static_cast<int>(channels.size()));
    account(op, number, s.run(*channels[op.channel].comm, op));
  }

  std::vector<std::int64_t> all(static_cast<std::size_t>(kStats) * world);
  control.all_gather(stats, all.data(), kStats, DataType::Int64).wait();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  bool ok = true;
  std::int64_t wrong = 0;
  double worst = 0;
  for (int r = 0; r < world; ++r) {
    const std::int64_t* st = all.data() + r * kStats;
    const double growth = (st[kPeakKiB] - st[kBaselineKiB]) / 1024.0;
    worst = std::max(worst, growth);
    wrong += st[kWrong];
    if (st[kWrong] > 0 || growth >= o.rss_limit_mib) ok = false;
    if (rank == 0)
      std::printf("rank %d: %lld operations, %lld wrong; RSS %.1f MiB after warm-up, %.1f MiB at the end, "
                  "peak growth %.2f MiB\n",
                  r, static_cast<long long>(st[kOps]), static_cast<long long>(st[kWrong]),
                  st[kBaselineKiB] / 1024.0, st[kFinalKiB] / 1024.0, growth);
  }
  if (rank == 0) {
    std::printf("soak: operations per rank by kind:");
    for (int k = 0; k < kKinds; ++k) std::printf(" %s %lld;", kKindNames[k], static_cast<long long>(per_kind[k]));
    std::printf("\nsoak: %s after %.0f s: %lld operations per rank (tcp %lld, shm %lld) on %d ranks, "
                "%lld wrong results in all, largest RSS growth %.2f MiB (limit %.0f MiB)\n",
                ok ? "PASSED" : "FAILED", elapsed, static_cast<long long>(all[kOps]),
                static_cast<long long>(all[kTcpOps]), static_cast<long long>(all[kShmOps]), world,
                static_cast<long long>(wrong), worst, o.rss_limit_mib);
  }
  std::fflush(stdout);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  try {
    return soak(o);
  } catch (const Error& e) {
    std::fprintf(stderr, "kizuna-soak: %s: %s\n", std::string(name(e.code())).c_str(), e.what());
    return 3;
  }
}
