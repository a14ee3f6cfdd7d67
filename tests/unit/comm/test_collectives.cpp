// Threads as ranks over loopback TCP: every collective x algorithm x dtype x
// op against the serial reference, in place and out of place, counts 0, 1,
// fewer than the ranks, prime, and many slices.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <sstream>
#include <thread>

#include "collective_cases.hpp"
#include "collective_sweep.hpp"
#include "run_ranks.hpp"

using namespace kizuna;
using namespace kizuna::test;

namespace {

std::vector<Case> cases_for(int world, bool all_types) {
  const std::vector<DataType> dtypes = all_types ? std::vector<DataType>(std::begin(kAllDataTypes), std::end(kAllDataTypes))
                                                 : std::vector<DataType>{DataType::Int64, DataType::BFloat16, DataType::Float32};
  return standard_cases(world, dtypes, std::vector<ReduceOp>(std::begin(kAllReduceOps), std::end(kAllReduceOps)));
}

// Rank r of 2 sums `count` floats on communicators a and b, issuing both
// calls before it waits: rank 0 a then b, rank 1 b then a.
void all_reduce_in_opposite_orders(const std::vector<std::shared_ptr<Communicator>>& a,
                                   const std::vector<std::shared_ptr<Communicator>>& b, int r, std::size_t count) {
  std::vector<float> x(count, 1.0f), y(count, 2.0f);
  Work first, second;
  if (r == 0) {
    first = a[r]->all_reduce(x.data(), x.size(), DataType::Float32, ReduceOp::Sum);
    second = b[r]->all_reduce(y.data(), y.size(), DataType::Float32, ReduceOp::Sum);
  } else {
    first = b[r]->all_reduce(y.data(), y.size(), DataType::Float32, ReduceOp::Sum);
    second = a[r]->all_reduce(x.data(), x.size(), DataType::Float32, ReduceOp::Sum);
  }
  first.wait();
  second.wait();
  REQUIRE((x.back() == 2.0f && y.front() == 4.0f));
}

}  // namespace

TEST_CASE("collectives match the serial reference: ring, tree, one-shot, two-shot, doubling, over TCP and shared memory", "[comm]") {
  const int world = GENERATE(1, 2, 3, 4, 5, 7, 8);
  const Algorithm algorithm = GENERATE(Algorithm::Ring, Algorithm::Tree, Algorithm::OneShot, Algorithm::TwoShot,
                                       Algorithm::Doubling);
  const Transport transport = GENERATE(Transport::Tcp, Transport::Shm);
  CAPTURE(world, static_cast<int>(algorithm), static_cast<int>(transport));
  CommOptions options;
  options.algorithm = algorithm;
  options.transport = transport;
  options.slice_bytes = 4096;  // many slices even for small buffers
  options.timeout = std::chrono::seconds(60);
  const auto comms = make_comms(world, options);
  sweep(comms, cases_for(world, world <= 4), "world " + std::to_string(world));
}

TEST_CASE("large buffers with the default slice size", "[comm]") {
  const int world = GENERATE(2, 3, 4);
  const Transport transport = GENERATE(Transport::Tcp, Transport::Shm);
  CommOptions options;
  options.transport = transport;
  const auto comms = make_comms(world, options);
  std::vector<Case> cases;
  for (Op o : {Op::AllReduce, Op::ReduceScatter, Op::Reduce, Op::AllGather, Op::Broadcast})
    cases.push_back({o, DataType::Float32, ReduceOp::Sum, 1'000'003, false});
  cases.push_back({Op::AllReduce, DataType::BFloat16, ReduceOp::Avg, 3'000'017, true});
  sweep(comms, cases, "world " + std::to_string(world));
}

TEST_CASE("barrier, send and recv", "[comm]") {
  const int world = 4;
  CommOptions options;
  options.transport = GENERATE(Transport::Tcp, Transport::Shm);
  const auto comms = make_comms(world, options);
  run_ranks(world, [&](int r) {
    Communicator& c = *comms[r];
    for (int i = 0; i < 10; ++i) c.barrier().wait();
    // a ring of point-to-point messages, then the reverse
    std::vector<std::int64_t> out(1000), in(1000);
    for (int i = 0; i < 1000; ++i) out[i] = r * 1000 + i;
    Work s = c.send(out.data(), out.size(), DataType::Int64, (r + 1) % world);
    c.recv(in.data(), in.size(), DataType::Int64, (r + world - 1) % world).wait();
    s.wait();
    for (int i = 0; i < 1000; ++i) REQUIRE(in[i] == ((r + world - 1) % world) * 1000 + i);
    // collectives still agree on sequence numbers after point-to-point traffic
    float x = 1.0f;
    c.all_reduce(&x, 1, DataType::Float32, ReduceOp::Sum).wait();
    REQUIRE(x == static_cast<float>(world));
  });
}

TEST_CASE("many asynchronous collectives in flight complete in call order", "[comm]") {
  const int world = 3;
  const auto comms = make_comms(world);
  run_ranks(world, [&](int r) {
    std::vector<std::vector<std::int32_t>> bufs(50, std::vector<std::int32_t>(1000));
    std::vector<Work> works;
    for (int k = 0; k < 50; ++k) {
      for (auto& v : bufs[k]) v = r + k;
      works.push_back(comms[r]->all_reduce(bufs[k].data(), 1000, DataType::Int32, ReduceOp::Sum));
    }
    for (int k = 49; k >= 0; --k) works[k].wait();
    for (int k = 0; k < 50; ++k) REQUIRE(bufs[k][999] == 0 + 1 + 2 + 3 * k);
    int called = 0;
    works[0].on_complete([&](const Work& w) { called += w.done(); });
    REQUIRE(called == 1);
  });
}

TEST_CASE("a completion callback may call and wait on the same communicator, on the worker or inline", "[comm]") {
  // As a torch future's callback does (DDP's PowerSGD hook): the callback
  // runs on the thread that finished the call, which still runs the
  // communicator's calls; its own call runs there too. Small and large
  // calls (direct path or queued), waited for at once or left to the worker.
  const int world = 2;
  const auto comms = make_comms(world);
  const bool wait_first = GENERATE(true, false);
  const std::size_t count = GENERATE(std::size_t{4}, std::size_t{200'000});
  CAPTURE(wait_first, count);
  run_ranks(world, [&](int r) {
    std::vector<std::int32_t> a(count, r + 1), b(count, 10 * (r + 1));
    std::atomic<bool> inner_done{false};
    Work outer = comms[r]->all_reduce(a.data(), count, DataType::Int32, ReduceOp::Sum);
    outer.on_complete([&](const Work&) {
      comms[r]->all_reduce(b.data(), count, DataType::Int32, ReduceOp::Sum).wait();
      inner_done = true;
    });
    if (wait_first) outer.wait();
    while (!inner_done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    REQUIRE(a[count - 1] == 3);
    REQUIRE(b[count - 1] == 30);
    // And the communicator goes on as usual.
    std::int32_t x = r;
    comms[r]->all_reduce(&x, 1, DataType::Int32, ReduceOp::Sum).wait();
    REQUIRE(x == 1);
  });
}

namespace {

// `calls` one-element all-reduces on rank r of 2, each waited for as soon
// as it is made: a blocking caller's pattern, which the communicator learns.
void wait_at_once(Communicator& c, int r, int calls) {
  for (int k = 0; k < calls; ++k) {
    std::int32_t x = r + k;
    c.all_reduce(&x, 1, DataType::Int32, ReduceOp::Sum).wait();
    REQUIRE(x == 1 + 2 * k);
  }
}

}  // namespace

TEST_CASE("a call nobody waits for completes on its own after callers ran theirs inline", "[comm]") {
  // Callers that wait at once run their calls themselves and the worker
  // thread stops being woken per call; a later call that is only polled
  // must still be run by the worker, and done() must turn true.
  const int world = 2;
  CommOptions options;
  options.transport = GENERATE(Transport::Tcp, Transport::Shm);
  const auto comms = make_comms(world, options);
  run_ranks(world, [&](int r) {
    Communicator& c = *comms[r];
    wait_at_once(c, r, 200);
    std::int32_t y = 10 * r;
    const Work w = c.all_reduce(&y, 1, DataType::Int32, ReduceOp::Sum);
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!w.done() && std::chrono::steady_clock::now() < give_up)
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    REQUIRE(w.done());
    REQUIRE(y == 10);
    // Waiting on the last of several queued calls runs all of them, in order.
    std::vector<std::int32_t> v(8);
    std::vector<Work> works;
    for (int k = 0; k < 8; ++k) {
      v[k] = r * k;
      works.push_back(c.all_reduce(&v[k], 1, DataType::Int32, ReduceOp::Sum));
    }
    works.back().wait();
    for (int k = 0; k < 8; ++k) {
      REQUIRE(works[k].done());
      REQUIRE(v[k] == k);
    }
  });
}

TEST_CASE("a caller that runs its small calls itself is not held when a peer is late", "[comm]") {
  // After a run of calls waited for at once, a small call runs directly in
  // its caller's thread; with the peer 300 ms late it must still return at
  // once (queued, part-run) and complete on wait().
  const int world = 2;
  CommOptions options;
  options.transport = GENERATE(Transport::Tcp, Transport::Shm);
  const auto comms = make_comms(world, options);
  run_ranks(world, [&](int r) {
    Communicator& c = *comms[r];
    wait_at_once(c, r, 50);
    std::int64_t y = r + 1;
    if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const auto before = std::chrono::steady_clock::now();
    const Work w = c.all_reduce(&y, 1, DataType::Int64, ReduceOp::Sum);
    const auto held = std::chrono::steady_clock::now() - before;
    if (r == 0) {
      REQUIRE(held < std::chrono::milliseconds(150));
      REQUIRE(!w.done());
    }
    w.wait();
    REQUIRE(y == 3);
  });
}

TEST_CASE("ranks may issue small calls on two communicators in different orders", "[comm]") {
  // Rank 0 calls a then b, rank 1 calls b then a, and only then do they
  // wait: each call is run by its caller only while its peer is there, so
  // neither rank holds the other's first call hostage (a deadlock would
  // end in the 5 s timeout).
  const int world = 2;
  CommOptions options;
  options.transport = GENERATE(Transport::Tcp, Transport::Shm);
  options.timeout = std::chrono::milliseconds(5000);
  const auto a = make_comms(world, options);
  const auto b = make_comms(world, options);
  run_ranks(world, [&](int r) {
    for (int k = 0; k < 20; ++k) {
      std::int32_t x = 1, y = 2;
      a[r]->all_reduce(&x, 1, DataType::Int32, ReduceOp::Sum).wait();
      b[r]->all_reduce(&y, 1, DataType::Int32, ReduceOp::Sum).wait();
      REQUIRE((x == 2 && y == 4));
    }
    for (int k = 0; k < 20; ++k) all_reduce_in_opposite_orders(a, b, r, 100);
  });
}

TEST_CASE("the first calls through the slots, which hold the placement probes, may be issued on two communicators in different orders", "[comm]") {
  // 16 KiB: past the mailboxes, short of the staged path. The first two
  // such calls on a communicator meet every peer for the placement probe
  // (comm/symmetric.hpp): they are queued, not run by the caller, who
  // would otherwise wait in the probe for a peer that waits in the other
  // communicator's (a deadlock would end in the 5 s timeout).
  const int world = 2;
  CommOptions options;
  options.transport = Transport::Shm;
  options.timeout = std::chrono::milliseconds(5000);
  const auto a = make_comms(world, options);
  const auto b = make_comms(world, options);
  run_ranks(world, [&](int r) {
    const auto start = std::chrono::steady_clock::now();
    for (int k = 0; k < 3; ++k) all_reduce_in_opposite_orders(a, b, r, 4096);
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::milliseconds(2500));
  });
}

TEST_CASE("split makes independent groups that run different collectives at once", "[comm]") {
  const int world = 4;
  const auto comms = make_comms(world);
  run_ranks(world, [&](int r) {
    auto sub = comms[r]->split(r % 2, -r);  // key -r: reversed order inside each group
    REQUIRE(sub);
    REQUIRE(sub->size() == 2);
    REQUIRE(sub->rank() == (r < 2 ? 1 : 0));
    if (r % 2 == 0) {
      double x = r;
      sub->all_reduce(&x, 1, DataType::Float64, ReduceOp::Sum).wait();
      REQUIRE(x == 2.0);  // ranks 0 and 2
    } else {
      std::int32_t v[2] = {r, r};
      std::int32_t all[4];
      sub->all_gather(v, all, 2, DataType::Int32).wait();
      // group {3, 1}: rank 3 is sub-rank 0
      REQUIRE(all[0] == 3);
      REQUIRE(all[2] == 1);
    }
    auto none = comms[r]->split(r == 0 ? -1 : 0, r);
    REQUIRE((r == 0) == (none == nullptr));
    if (none) REQUIRE(none->size() == 3);
  });
}
