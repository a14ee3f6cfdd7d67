// Point to point (comm/p2p.hpp), threads as ranks: receives posted before
// sends, tags, any source, sizes, deadlines, a peer that leaves, abort,
// order after collectives, and the C ABI's groups.
#include <catch2/catch.hpp>

#include <kizuna/comm.hpp>
#include <kizuna/kizuna.h>
#include <kizuna/tcp_store.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "error_of.hpp"
#include "processes.hpp"
#include "run_ranks.hpp"

using namespace kizuna;
using namespace kizuna::test;

namespace {

CommOptions quick(std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  CommOptions options;
  options.timeout = timeout;
  return options;
}

std::vector<std::int64_t> pattern(int from, int to, int tag, std::size_t n) {
  std::vector<std::int64_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = (from * 1000 + to) * 1'000'000 + tag * 100'000 + static_cast<std::int64_t>(i);
  return v;
}

}  // namespace

TEST_CASE("every rank posts all its receives before its sends, and nothing waits for anything else", "[comm][p2p]") {
  const int world = GENERATE(2, 3, 4);
  const std::size_t n = GENERATE(std::size_t{1}, std::size_t{100'000});  // 8 bytes and 800 KB (more than a socket holds)
  CAPTURE(world, n);
  const auto comms = make_comms(world, quick());
  run_ranks(world, [&](int r) {
    Communicator& c = *comms[r];
    std::vector<std::vector<std::int64_t>> in(world, std::vector<std::int64_t>(n)), out(world);
    std::vector<Work> works;
    for (int p = 0; p < world; ++p)
      if (p != r) works.push_back(c.recv(in[p].data(), n, DataType::Int64, p));
    for (int p = 0; p < world; ++p) {
      if (p == r) continue;
      out[p] = pattern(r, p, 0, n);
      works.push_back(c.send(out[p].data(), n, DataType::Int64, p));
    }
    for (Work& w : works) w.wait();
    for (int p = 0; p < world; ++p)
      if (p != r) REQUIRE(in[p] == pattern(p, r, 0, n));
  });
}

TEST_CASE("a pending receive holds back neither the collectives after it nor its own rank's sends", "[comm][p2p]") {
  const auto comms = make_comms(2, quick());
  run_ranks(2, [&](int r) {
    Communicator& c = *comms[r];
    std::int64_t got = 0, mine = 10 + r;
    Work recv = c.recv(&got, 1, DataType::Int64, 1 - r, 5);
    float x = 1.0f;
    c.all_reduce(&x, 1, DataType::Float32, ReduceOp::Sum).wait();  // the receive is still pending
    REQUIRE(x == 2.0f);
    REQUIRE_FALSE(recv.done());
    c.barrier().wait();
    c.send(&mine, 1, DataType::Int64, 1 - r, 5).wait();
    recv.wait();
    REQUIRE(got == 10 + (1 - r));
  });
}

TEST_CASE("messages with one tag arrive in order, and tags are matched whatever order they are received in",
          "[comm][p2p]") {
  const auto comms = make_comms(2, quick());
  run_ranks(2, [&](int r) {
    Communicator& c = *comms[r];
    const std::size_t n = 1000;
    if (r == 0) {
      auto a = pattern(0, 1, 1, n), b = pattern(0, 1, 2, n), d = pattern(0, 1, 3, n);
      c.send(a.data(), n, DataType::Int64, 1, 1).wait();
      c.send(b.data(), n, DataType::Int64, 1, 2).wait();
      c.send(d.data(), n, DataType::Int64, 1, 1).wait();
    } else {
      std::vector<std::int64_t> x(n), y(n), z(n);
      // tag 2 first: it arrives after a tag-1 message, which waits for its receive
      Work second = c.recv(y.data(), n, DataType::Int64, 0, 2);
      second.wait();
      c.recv(x.data(), n, DataType::Int64, 0, 1).wait();
      c.recv(z.data(), n, DataType::Int64, 0, 1).wait();
      REQUIRE(second.source() == 0);
      REQUIRE(x == pattern(0, 1, 1, n));
      REQUIRE(y == pattern(0, 1, 2, n));
      REQUIRE(z == pattern(0, 1, 3, n));
    }
  });
}

TEST_CASE("a receive from any source takes each rank's message once and says whose it was", "[comm][p2p]") {
  const int world = 4;
  const auto comms = make_comms(world, quick());
  run_ranks(world, [&](int r) {
    Communicator& c = *comms[r];
    if (r != 0) {
      std::int64_t v = 100 + r;
      c.send(&v, 1, DataType::Int64, 0, 7).wait();
      return;
    }
    std::vector<std::int64_t> got(world - 1);
    std::vector<Work> works;
    for (int i = 0; i < world - 1; ++i) works.push_back(c.recv(&got[i], 1, DataType::Int64, kAnySource, 7));
    std::set<int> sources;
    for (int i = 0; i < world - 1; ++i) {
      works[i].wait();
      const int s = works[i].source();
      REQUIRE(got[i] == 100 + s);
      sources.insert(s);
    }
    REQUIRE(sources == std::set<int>{1, 2, 3});
  });
}

TEST_CASE("a receive of another size fails with Mismatch and the communicator stays usable", "[comm][p2p]") {
  const auto comms = make_comms(2, quick());
  run_ranks(2, [&](int r) {
    Communicator& c = *comms[r];
    std::vector<float> v(10, 1.0f);
    if (r == 0) {
      c.send(v.data(), 10, DataType::Float32, 1, 3).wait();
    } else {
      const Error e = error_of(c.recv(v.data(), 4, DataType::Float32, 0, 3));
      CHECK(e.code() == ErrorCode::Mismatch);
      CHECK_THAT(e.what(), Catch::Contains("recv from rank 0 (tag 3, 16 bytes)") && Catch::Contains("sent 40 bytes"));
    }
    float x = 1.0f;
    c.all_reduce(&x, 1, DataType::Float32, ReduceOp::Sum).wait();
    REQUIRE(x == 2.0f);
    std::int64_t a = r, b = -1;
    Work s = c.send(&a, 1, DataType::Int64, 1 - r, 3);
    c.recv(&b, 1, DataType::Int64, 1 - r, 3).wait();
    s.wait();
    REQUIRE(b == 1 - r);
  });
}

TEST_CASE("a receive that no rank sends to times out, naming it, and the communicator stays usable",
          "[comm][p2p]") {
  const auto comms = make_comms(2, quick(std::chrono::milliseconds(300)));
  std::atomic<bool> timed_out{false};
  run_ranks(2, [&](int r) {
    Communicator& c = *comms[r];
    if (r == 1) {
      std::int64_t v = 0;
      const auto t0 = std::chrono::steady_clock::now();
      const Error e = error_of(c.recv(&v, 1, DataType::Int64, 0, 9));
      CHECK(e.code() == ErrorCode::Timeout);
      CHECK_THAT(e.what(), Catch::Contains(" timed out ") && Catch::Contains("recv from rank 0 (tag 9"));
      CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
      timed_out = true;
    }
    while (!timed_out) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    float x = 1.0f;
    c.all_reduce(&x, 1, DataType::Float32, ReduceOp::Sum).wait();
    REQUIRE(x == 2.0f);
  });
}

TEST_CASE("a send starts after the collectives called before it, and sees their result", "[comm][p2p]") {
  const auto comms = make_comms(2, quick());
  run_ranks(2, [&](int r) {
    Communicator& c = *comms[r];
    std::vector<float> x(50'000, 1.0f + r);
    Work sum = c.all_reduce(x.data(), x.size(), DataType::Float32, ReduceOp::Sum);  // not waited for
    std::vector<float> got(x.size());
    Work s = c.send(x.data(), x.size(), DataType::Float32, 1 - r);
    Work g = c.recv(got.data(), got.size(), DataType::Float32, 1 - r);
    s.wait();
    g.wait();
    REQUIRE(sum.done());
    REQUIRE(std::all_of(got.begin(), got.end(), [](float v) { return v == 3.0f; }));
  });
}

TEST_CASE("receives from a rank whose communicator ended fail with PeerLost", "[comm][p2p]") {
  auto comms = make_comms(2, quick());
  std::int64_t v = 42, got = 0;
  comms[1]->send(&v, 1, DataType::Int64, 0).wait();
  comms[0]->recv(&got, 1, DataType::Int64, 1).wait();
  REQUIRE(got == 42);
  Work pending = comms[0]->recv(&got, 1, DataType::Int64, 1);
  comms[1].reset();
  const Error e = error_of(pending);
  CHECK(e.code() == ErrorCode::PeerLost);
  CHECK_THAT(e.what(), Catch::Contains("rank 1"));
}

TEST_CASE("abort fails pending sends and receives at once", "[comm][p2p]") {
  const auto comms = make_comms(2, quick(std::chrono::seconds(60)));
  std::int64_t got = 0;
  Work pending = comms[0]->recv(&got, 1, DataType::Int64, 1, 4);
  const auto t0 = std::chrono::steady_clock::now();
  comms[0]->abort("the test says so");
  CHECK(error_of(pending).code() == ErrorCode::Aborted);
  CHECK(error_of(comms[0]->send(&got, 1, DataType::Int64, 1)).code() == ErrorCode::Aborted);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  comms[1]->abort("the test is over");
}

TEST_CASE("point-to-point arguments are checked at the call", "[comm][p2p]") {
  const auto comms = make_comms(2, quick());
  std::int64_t v = 0;
  CHECK(error_of_call([&] { comms[0]->send(&v, 1, DataType::Int64, kAnySource); }).code() ==
        ErrorCode::InvalidArgument);
  CHECK(error_of_call([&] { comms[0]->recv(&v, 1, DataType::Int64, 0); }).code() == ErrorCode::InvalidArgument);
  CHECK(error_of_call([&] { comms[0]->recv(&v, 1, DataType::Int64, 2); }).code() == ErrorCode::InvalidArgument);
  CHECK(error_of_call([&] { comms[0]->recv(nullptr, 1, DataType::Int64, 1); }).code() ==
        ErrorCode::InvalidArgument);
}

TEST_CASE("kzGroupStart and kzGroupEnd: both ranks post their receive first, and neither deadlocks",
          "[comm][p2p][c_api]") {
  // Rank 0 through the C ABI (it hosts the store), rank 1 through C++ in
  // this process under the name the C ABI gives its first communicator.
  const int port = free_port();
  const std::string store = "127.0.0.1:" + std::to_string(port);
  kzComm_t comm = nullptr;
  kzResult_t made = kzInternalError;
  std::thread init([&] { made = kzCommInitRank(&comm, 2, store.c_str(), 0); });
  TcpStoreOptions client;
  client.port = port;
  CommOptions options;
  options.store = std::make_shared<TcpStore>(client);
  options.rank = 1;
  options.world_size = 2;
  options.name = "kizuna/comm0";
  options.timeout = std::chrono::seconds(20);
  std::shared_ptr<Communicator> other = Communicator::create(options);
  init.join();
  REQUIRE(made == kzSuccess);

  std::vector<float> mine(100'000, 1.0f), theirs(100'000, 0.0f);
  std::thread peer([&] {
    std::vector<float> out(100'000, 2.0f), in(100'000);
    Work r = other->recv(in.data(), in.size(), DataType::Float32, 0);
    Work s = other->send(out.data(), out.size(), DataType::Float32, 0);
    r.wait();
    s.wait();
    CHECK(in.front() == 1.0f);
  });
  CHECK(kzGroupStart() == kzSuccess);
  CHECK(kzRecv(theirs.data(), theirs.size(), kzFloat32, KZ_ANY_SOURCE, comm, nullptr) == kzSuccess);
  CHECK(kzSend(mine.data(), mine.size(), kzFloat32, 1, comm, nullptr) == kzSuccess);
  CHECK(kzGroupEnd() == kzSuccess);
  peer.join();
  CHECK(theirs.back() == 2.0f);
  CHECK(kzGroupEnd() == kzInvalidArgument);
  CHECK(kzCommDestroy(comm) == kzSuccess);
}
