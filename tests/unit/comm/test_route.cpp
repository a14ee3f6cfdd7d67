// The route table: which way each call goes, as one pure function of the
// call's shape, its buffers' kind, the agreed placement, the paths
// creation set up and the tuning (comm/route.hpp).
#include <catch2/catch.hpp>

#include "comm/route.hpp"

using namespace kizuna;
using namespace kizuna::comm;
using algo::Collective;

namespace {

// `world` ranks on one node of `cores` cores.
Tuning tuning_of(int world, int cores, Settings settings = {}) {
  Facts f;
  f.world = world;
  f.local_ranks = world;
  f.cores = cores;
  f.mailbox_capacity = 1024;
  return make_tuning(settings, f);
}

Settings with(Algorithm a, Transport t = Transport::Auto) {
  Settings s;
  s.algorithm = a;
  s.transport = t;
  return s;
}

constexpr Paths kAll{true, true, false};
constexpr Paths kNone{false, false, false};

struct Row {
  const char* what;
  CallShape call;
  Buffers buffers;
  Placement placement;
  Paths paths;
  Tuning tuning;
  Route expected;
};

CallShape all_reduce(std::size_t bytes) { return {CallKind::Collective, Collective::AllReduce, bytes}; }
CallShape of(Collective c, std::size_t bytes) { return {CallKind::Collective, c, bytes}; }

}  // namespace

TEST_CASE("the route table: every call's route from its shape, buffers, placement, paths and tuning", "[comm][route]") {
  const Tuning two = tuning_of(2, 2), four = tuning_of(4, 2), ring = tuning_of(2, 2, with(Algorithm::Ring)),
               tcp = tuning_of(2, 2, with(Algorithm::Auto, Transport::Tcp));
  const Placement far = Placement::Far, near = Placement::Near, unknown = Placement::Unknown;
  const Buffers host = Buffers::Host, sym = Buffers::Symmetric;
  const Row rows[] = {
      {"a barrier: the mailboxes", of(Collective::Barrier, 0), host, unknown, kAll, two, Route::Mailbox},
      {"a barrier without them", of(Collective::Barrier, 0), host, unknown, kNone, two, Route::Schedule},
      {"a barrier, ring forced", of(Collective::Barrier, 0), host, unknown, kAll, ring, Route::Schedule},
      {"8 B all-reduce", all_reduce(8), host, unknown, kAll, two, Route::Mailbox},
      {"1 KiB all-reduce: the mailboxes' last", all_reduce(1024), host, unknown, kAll, two, Route::Mailbox},
      {"1 KiB + 4 all-reduce", all_reduce(1028), host, unknown, kAll, two, Route::Schedule},
      {"4 KiB all-reduce", all_reduce(4096), host, far, kAll, two, Route::Schedule},
      {"64 KiB all-reduce, far: staged", all_reduce(64 << 10), host, far, kAll, two, Route::Staged},
      {"64 KiB all-reduce, placement unknown: staged", all_reduce(64 << 10), host, unknown, kAll, two, Route::Staged},
      {"64 KiB all-reduce, near: the slots", all_reduce(64 << 10), host, near, kAll, two, Route::Schedule},
      {"256 KiB all-reduce, near: staged", all_reduce(256 << 10), host, near, kAll, two, Route::Staged},
      {"6 MiB - 4 all-reduce, near: staged", all_reduce((6 << 20) - 4), host, near, kAll, two, Route::Staged},
      {"6 MiB all-reduce, near: the slots", all_reduce(6 << 20), host, near, kAll, two, Route::Schedule},
      {"64 MiB all-reduce, near: the slots", all_reduce(64 << 20), host, near, kAll, two, Route::Schedule},
      {"64 MiB all-reduce, far: staged", all_reduce(64 << 20), host, far, kAll, two, Route::Staged},
      {"64 MiB all-reduce, placement unknown: staged", all_reduce(64 << 20), host, unknown, kAll, two, Route::Staged},
      {"64 MiB all-reduce, near, 4 ranks on 2 cores: staged", all_reduce(64 << 20), host, near, kAll, four,
       Route::Staged},
      {"64 KiB all-reduce, near, 4 ranks on 2 cores: staged", all_reduce(64 << 10), host, near, kAll, four,
       Route::Staged},
      {"64 KiB all-reduce without staging memory", all_reduce(64 << 10), host, far, {true, false, false}, two,
       Route::Schedule},
      {"64 KiB on symmetric memory, below its threshold: staged", all_reduce(64 << 10), sym, far, kAll, two,
       Route::Staged},
      {"512 KiB on symmetric memory", all_reduce(512 << 10), sym, far, kAll, two, Route::Symmetric},
      {"64 KiB on symmetric memory, 4 ranks on 2 cores", all_reduce(64 << 10), sym, near, kAll, four,
       Route::Symmetric},
      {"8 B on symmetric memory: the mailboxes", all_reduce(8), sym, far, kAll, two, Route::Mailbox},
      {"4 MiB on symmetric memory, ring forced", all_reduce(4 << 20), sym, far, kAll, ring, Route::Schedule},
      {"8 B all-reduce, ring forced", all_reduce(8), host, far, kAll, ring, Route::Schedule},
      {"8 B broadcast", of(Collective::Broadcast, 8), host, far, kAll, two, Route::Schedule},
      {"4 MiB reduce", of(Collective::Reduce, 4 << 20), host, far, kAll, two, Route::Schedule},
      {"4 MiB all-gather", of(Collective::AllGather, 4 << 20), host, far, kAll, two, Route::Schedule},
      {"a staged device call's 4 MiB part", all_reduce(4 << 20), Buffers::Staging, far, kAll, two, Route::Schedule},
      {"a staged device call's 8 B part", all_reduce(8), Buffers::Staging, far, kAll, two, Route::Mailbox},
      {"8 B all-reduce over TCP", all_reduce(8), host, unknown, kNone, tcp, Route::Schedule},
      {"4 MiB all-reduce over TCP", all_reduce(4 << 20), host, unknown, kNone, tcp, Route::Schedule},
      {"a send", {CallKind::Send, Collective::AllReduce, 8}, host, far, kAll, two, Route::PointToPoint},
      {"a receive", {CallKind::Recv, Collective::AllReduce, 8}, host, far, kAll, two, Route::PointToPoint},
      {"a device send", {CallKind::Send, Collective::AllReduce, 8}, Buffers::Device, far, {true, true, true}, two,
       Route::DeviceStaged},
      {"a device all-reduce, devices joined", all_reduce(8), Buffers::Device, far, {true, true, true}, two,
       Route::DeviceDirect},
      {"a device all-reduce, devices apart", all_reduce(8), Buffers::Device, far, kAll, two, Route::DeviceStaged},
  };
  for (const Row& row : rows) {
    INFO(row.what);
    CHECK(name(choose_route(row.call, row.buffers, row.placement, row.paths, row.tuning)) == name(row.expected));
  }
}

TEST_CASE("a caller runs its own call only on a route that never sleeps, small, without the check", "[comm][route]") {
  Tuning t = tuning_of(2, 2);
  CHECK(runs_in_caller(Route::Mailbox, 8, false, t));
  CHECK(runs_in_caller(Route::Mailbox, 8, true, t));
  CHECK(runs_in_caller(Route::Schedule, 64 << 10, false, t));
  CHECK_FALSE(runs_in_caller(Route::Schedule, (64 << 10) + 1, false, t));
  CHECK_FALSE(runs_in_caller(Route::Schedule, 8, true, t));  // a placement probe is due
  CHECK_FALSE(runs_in_caller(Route::Staged, 8, false, t));
  CHECK_FALSE(runs_in_caller(Route::Symmetric, 8, false, t));
  CHECK_FALSE(runs_in_caller(Route::PointToPoint, 8, false, t));
  t.check = true;
  CHECK_FALSE(runs_in_caller(Route::Mailbox, 8, false, t));
  CHECK_FALSE(runs_in_caller(Route::Schedule, 8, false, t));
}
