// kizuna-fault-worker: one rank of a fault-injection test (tests/faults),
// started with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR
// and MASTER_PORT (or KIZUNA_STORE) set, and the KIZUNA_* variables the
// fault calls for (KIZUNA_ALGO, KIZUNA_TRANSPORT, a short KIZUNA_TIMEOUT).
//
//   kizuna-fault-worker COLLECTIVES COUNT ITERATIONS SECONDS [shrink|elastic|join]
//
// COLLECTIVES is a comma-separated list of all_reduce, broadcast, reduce,
// all_gather, reduce_scatter, barrier (or "all"); each iteration runs every
// one of them once on int64 data of COUNT elements, computed in closed form
// from (rank, index, iteration), and checks the result exactly. It stops
// after ITERATIONS iterations or SECONDS seconds, whichever comes first.
// With "shrink", a collective that fails with PeerLost or Aborted is not
// the end: the rank calls Communicator::shrink() and goes on with the
// survivors from the highest iteration any of them reached, every time it
// happens; and the ranks decide together when SECONDS are up (an
// all-reduce of "my time is up" every 16 iterations), so that all finish
// at the same iteration and none leaves a survivor behind. "elastic" does
// the same and, at each of those checks, calls Communicator::grow() to
// admit processes waiting to join; "join" is such a process: it joins the
// running group (Communicator::join) and then behaves as "elastic", as does
// an "elastic" one started with KIZUNA_JOIN=1 (kizuna-run --elastic's
// replacement). After
// a shrink or a grow, the group goes on from the highest iteration any
// rank reached (an all-reduce with Max: the state a newcomer is sent).
//
// What it prints is what the tests read (one line each, flushed at once):
//   ready rank R of N pid P         the communicator is up
//   done I iterations in T ms       finished without error
//   error CODE at NS after I iterations: MESSAGE
//                                   a kizuna::Error; NS is CLOCK_MONOTONIC in
//                                   nanoseconds (steady_clock), the clock the
//                                   test reads when it injects the fault
//   wrong ...                       a result that differs from the reference
//   lost CODE at NS after I iterations: MESSAGE
//                                   (shrink) the error that started a shrink
//   shrunk at NS to rank R of N     (shrink) the survivors' communicator is up
//   grew at NS to rank R of N       (elastic) admitted processes that joined
//   joined at NS as rank R of N     (join) this process is in the group
//   resumed at NS                   (shrink, grow, join) its first iteration
//                                   after that is right
// Exit code: 0 done, 1 wrong result, 2 bad usage, 10 + ErrorCode for an error.
#include <kizuna/comm.hpp>
#include <kizuna/store.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

using namespace kizuna;
using Clock = std::chrono::steady_clock;

namespace {

enum class Kind { AllReduce, Broadcast, Reduce, AllGather, ReduceScatter, Barrier };

bool parse(const std::string& list, std::vector<Kind>& out) {
  const std::vector<std::pair<std::string, Kind>> names = {
      {"all_reduce", Kind::AllReduce},         {"broadcast", Kind::Broadcast}, {"reduce", Kind::Reduce},
      {"all_gather", Kind::AllGather},         {"reduce_scatter", Kind::ReduceScatter},
      {"barrier", Kind::Barrier}};
  std::istringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    bool found = false;
    for (const auto& [name, kind] : names) {
      if (item == name || item == "all") out.push_back(kind), found = true;
    }
    if (!found) return false;
  }
  return !out.empty();
}

// Rank r's input element i in iteration `it`: small enough that a sum over
// any world never overflows.
std::int64_t value(int r, std::uint64_t i, std::uint64_t it) {
  return static_cast<std::int64_t>((r + 1) * (i % 100003 + 1) + it);
}

std::int64_t sum(int n, std::uint64_t i, std::uint64_t it) {
  std::int64_t s = 0;
  for (int r = 0; r < n; ++r) s += value(r, i, it);
  return s;
}

// Compares got[0..count) with expect(i); "" when equal, else the first difference.
template <typename Expect>
std::string compare(const std::vector<std::int64_t>& got, std::size_t count, Expect&& expect) {
  for (std::size_t i = 0; i < count; ++i) {
    const std::int64_t e = expect(i);
    if (got[i] != e) {
      std::ostringstream out;
      out << "index " << i << ": got " << got[i] << ", expected " << e;
      return out.str();
    }
  }
  return "";
}

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::AllReduce: return "all_reduce";
    case Kind::Broadcast: return "broadcast";
    case Kind::Reduce: return "reduce";
    case Kind::AllGather: return "all_gather";
    case Kind::ReduceScatter: return "reduce_scatter";
    case Kind::Barrier: return "barrier";
  }
  return "?";
}

// Runs one collective of `count` elements and checks it; "" when right.
std::string run_one(Communicator& comm, Kind kind, std::size_t count, std::uint64_t it) {
  const int n = comm.size();
  const int r = comm.rank();
  const int root = static_cast<int>(it % static_cast<std::uint64_t>(n));
  const DataType t = DataType::Int64;
  std::vector<std::int64_t> in(count), out;
  for (std::size_t i = 0; i < count; ++i) in[i] = value(r, i, it);
  switch (kind) {
    case Kind::AllReduce:
      out.assign(count, -1);
      comm.all_reduce(in.data(), out.data(), count, t, ReduceOp::Sum).wait();
      return compare(out, count, [&](std::size_t i) { return sum(n, i, it); });
    case Kind::Broadcast:
      out.assign(count, r == root ? 0 : -1);
      if (r == root) out = in;
      comm.broadcast(out.data(), count, t, root).wait();
      return compare(out, count, [&](std::size_t i) { return value(root, i, it); });
    case Kind::Reduce:
      out.assign(count, -1);
      comm.reduce(in.data(), out.data(), count, t, ReduceOp::Sum, root).wait();
      if (r != root) return "";
      return compare(out, count, [&](std::size_t i) { return sum(n, i, it); });
    case Kind::AllGather:
      out.assign(count * n, -1);
      comm.all_gather(in.data(), out.data(), count, t).wait();
      return compare(out, count * n, [&](std::size_t j) { return value(static_cast<int>(j / count), j % count, it); });
    case Kind::ReduceScatter: {
      std::vector<std::int64_t> send(count * n);
      for (std::size_t j = 0; j < send.size(); ++j) send[j] = value(r, j, it);
      out.assign(count, -1);
      comm.reduce_scatter(send.data(), out.data(), count, t, ReduceOp::Sum).wait();
      return compare(out, count, [&](std::size_t i) { return sum(n, r * count + i, it); });
    }
    case Kind::Barrier:
      comm.barrier().wait();
      return "";
  }
  return "";
}

long long monotonic_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<Kind> kinds;
  const std::string mode = argc == 6 ? argv[5] : "";
  const bool shrink = mode == "shrink" || mode == "elastic" || mode == "join";
  const bool elastic = mode == "elastic" || mode == "join";
  if ((argc != 5 && !shrink) || !parse(argv[1], kinds)) {
    std::fprintf(stderr,
                 "usage: kizuna-fault-worker all|COLLECTIVE[,COLLECTIVE...] COUNT ITERATIONS SECONDS "
                 "[shrink|elastic|join]\n"
                 "  collectives: all_reduce broadcast reduce all_gather reduce_scatter barrier\n");
    return 2;
  }
  const std::size_t count = std::strtoull(argv[2], nullptr, 10);
  const std::uint64_t iterations = std::strtoull(argv[3], nullptr, 10);
  const auto limit = std::chrono::duration<double>(std::strtod(argv[4], nullptr));
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::uint64_t it = 0;
  bool resumed = true;
  // Outside the try: the error is stamped before the destructor runs.
  std::shared_ptr<Communicator> comm;
  // From when this rank's first communicator is up, as the ranks' are at
  // about the same moment: in plain mode each rank stops by its own clock.
  Clock::time_point start = Clock::now();
  for (;;) {
    bool regroup = false;
    try {
      const char* join_env = std::getenv("KIZUNA_JOIN");
      if (!comm && (mode == "join" || (elastic && join_env != nullptr && std::string(join_env) == "1"))) {
        // kizuna-run --elastic's replacement (KIZUNA_JOIN=1): from_env joins
        if (mode == "join") {
          CommOptions options;
          options.store = Store::from_env();
          comm = Communicator::join(options);
        } else {
          comm = Communicator::from_env();
        }
        std::printf("joined at %lld as rank %d of %d\n", monotonic_ns(), comm->rank(), comm->size());
        start = Clock::now();
        resumed = false;
      } else if (!comm) {
        comm = Communicator::from_env();
        std::printf("ready rank %d of %d pid %d\n", comm->rank(), comm->size(), static_cast<int>(::getpid()));
        start = Clock::now();
      }
      if (!resumed) {
        // Go on from the furthest iteration any rank reached: one that
        // finished the failed call before it failed elsewhere is ahead, and
        // a newcomer starts from 0.
        std::int64_t furthest = static_cast<std::int64_t>(it);
        comm->all_reduce(&furthest, 1, DataType::Int64, ReduceOp::Max).wait();
        it = static_cast<std::uint64_t>(furthest);
      }
      for (; it < iterations; ++it) {
        if (!shrink && Clock::now() - start >= limit) break;
        if (shrink && it % 16 == 0) {
          std::int32_t up = Clock::now() - start >= limit;
          comm->all_reduce(&up, 1, DataType::Int32, ReduceOp::Max).wait();
          if (up) break;
          if (elastic) {
            std::shared_ptr<Communicator> grown;
            try {
              grown = comm->grow();
            } catch (const Error& e) {
              if (comm->async_error()) throw;  // the group itself failed: shrink
              // a joiner that died while admitted: the group goes on as it was
              std::printf("grow failed at %lld: %s\n", monotonic_ns(), e.what());
            }
            if (grown) {
              comm = grown;
              std::printf("grew at %lld to rank %d of %d\n", monotonic_ns(), comm->rank(), comm->size());
              resumed = false;
              regroup = true;
              break;
            }
          }
        }
        for (Kind k : kinds) {
          const std::string wrong = run_one(*comm, k, count, it);
          if (!wrong.empty()) {
            std::printf("wrong %s count %zu iteration %llu on rank %d: %s\n", kind_name(k), count,
                        static_cast<unsigned long long>(it), comm->rank(), wrong.c_str());
            return 1;
          }
        }
        if (!resumed) std::printf("resumed at %lld\n", monotonic_ns()), resumed = true;
      }
      if (regroup) continue;
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
      std::printf("done %llu iterations in %lld ms\n", static_cast<unsigned long long>(it), static_cast<long long>(ms));
      return 0;
    } catch (const Error& e) {
      const long long at = monotonic_ns();
      const bool survivable = shrink && comm && (e.code() == ErrorCode::PeerLost || e.code() == ErrorCode::Aborted);
      std::printf("%s %s at %lld after %llu iterations: %s\n", survivable ? "lost" : "error",
                  std::string(name(e.code())).c_str(), at, static_cast<unsigned long long>(it), e.what());
      std::fflush(stdout);
      if (!survivable) return 10 + static_cast<int>(e.code());
    }
    try {
      comm = comm->shrink();
      std::printf("shrunk at %lld to rank %d of %d\n", monotonic_ns(), comm->rank(), comm->size());
      resumed = false;
    } catch (const Error& e) {
      std::printf("error %s at %lld after %llu iterations: %s\n", std::string(name(e.code())).c_str(), monotonic_ns(),
                  static_cast<unsigned long long>(it), e.what());
      std::fflush(stdout);
      return 10 + static_cast<int>(e.code());
    }
  }
}
