// Faults with ranks as threads: bad arguments, timeouts, mismatched calls,
// abort, a lost peer, and what the communicator does afterwards.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>

#include <kizuna/config.hpp>
#include <kizuna/tcp_store.hpp>
#include <kizuna/tcp_store_server.hpp>

#include "error_of.hpp"
#include "run_ranks.hpp"

using namespace kizuna;
using namespace kizuna::test;
using namespace std::chrono_literals;


TEST_CASE("invalid arguments are InvalidArgument before anything is sent", "[faults]") {
  const auto comms = make_comms(2);
  Communicator& c = *comms[0];
  float x[4] = {};
  std::int32_t i[4] = {};
  CHECK(error_of_call([&] { c.all_reduce(nullptr, x, 4, DataType::Float32, ReduceOp::Sum); }).code() == ErrorCode::InvalidArgument);
  CHECK(error_of_call([&] { c.broadcast(x, 4, DataType::Float32, 2); }).code() == ErrorCode::InvalidArgument);
  CHECK(error_of_call([&] { c.reduce(x, x, 4, DataType::Float32, ReduceOp::Sum, -1); }).code() == ErrorCode::InvalidArgument);
  const Error avg = error_of_call([&] { c.all_reduce(i, 4, DataType::Int32, ReduceOp::Avg); });
  CHECK(avg.code() == ErrorCode::InvalidArgument);
  CHECK(std::string(avg.what()).find("floating types only") != std::string::npos);
  CHECK(error_of_call([&] { c.all_reduce(x, 4, static_cast<DataType>(77), ReduceOp::Sum); }).code() == ErrorCode::InvalidArgument);
  CHECK(error_of_call([&] { c.send(x, 4, DataType::Float32, 0); }).code() == ErrorCode::InvalidArgument);
  // counts whose bytes do not fit a size (they would wrap to a few bytes)
  const std::size_t huge = SIZE_MAX / 4 + 2;
  const Error wraps = error_of_call([&] { c.all_reduce(x, x, huge, DataType::Float32, ReduceOp::Sum); });
  CHECK(wraps.code() == ErrorCode::InvalidArgument);
  CHECK(std::string(wraps.what()).find("more bytes than memory holds") != std::string::npos);
  CHECK(error_of_call([&] { c.all_gather(x, x, SIZE_MAX / 8, DataType::Float32); }).code() == ErrorCode::InvalidArgument);
  CHECK(error_of_call([&] { c.send(x, huge, DataType::Float32, 1); }).code() == ErrorCode::InvalidArgument);
  // Nothing was sent: both ranks still agree and work.
  run_ranks(2, [&](int r) {
    float v = 1;
    comms[r]->all_reduce(&v, 1, DataType::Float32, ReduceOp::Sum).wait();
    REQUIRE(v == 2);
  });
}

TEST_CASE("a completion callback that throws stops neither the other callbacks nor the thread that ran it", "[faults]") {
  CommOptions options;
  options.timeout = 30s;
  const auto comms = make_comms(2, options);
  std::vector<float> v(1 << 20, 1.0f);  // queued, not run by the caller
  Work w = comms[0]->all_reduce(v.data(), v.size(), DataType::Float32, ReduceOp::Sum);  // rank 1 never calls
  std::atomic<int> after{0};
  w.on_complete([](const Work& done) { done.wait(); });  // rethrows the failure
  w.on_complete([&](const Work&) { after.fetch_add(1); });
  comms[0]->abort("test");
  CHECK(error_of(w).code() == ErrorCode::Aborted);
  for (int i = 0; i < 200 && after.load() == 0; ++i) std::this_thread::sleep_for(10ms);
  CHECK(after.load() == 1);
  // and a later call still gets the communicator's error, not a crash
  float x = 1;
  CHECK(error_of(comms[0]->all_reduce(&x, 1, DataType::Float32, ReduceOp::Sum)).code() == ErrorCode::Aborted);
}

TEST_CASE("a rank that never arrives is a Timeout naming it", "[faults]") {
  CommOptions options;
  options.transport = GENERATE(Transport::Tcp, Transport::Shm);
  options.timeout = 1500ms;
  options.algorithm = Algorithm::Ring;
  const auto comms = make_comms(3, options);
  std::vector<std::string> messages(2);
  run_ranks(2, [&](int r) {  // rank 2 never calls
    float v = 1;
    const Error e = error_of(comms[r]->all_reduce(&v, 1, DataType::Float32, ReduceOp::Sum));
    CHECK(e.code() == ErrorCode::Timeout);
    messages[r] = e.what();
  });
  // rank 0 waits for its ring predecessor, rank 2
  CHECK(messages[0].find("waiting for rank 2") != std::string::npos);
  CHECK(messages[0].find("all_reduce #1") != std::string::npos);
  CHECK(messages[0].find(", step ") != std::string::npos);
  // afterwards the communicator says it is unusable
  float v = 1;
  const Error again = error_of(comms[0]->all_reduce(&v, 1, DataType::Float32, ReduceOp::Sum));
  CHECK(again.code() == ErrorCode::Aborted);
  CHECK(std::string(again.what()).find("unusable after an earlier error") != std::string::npos);
}

TEST_CASE("KIZUNA_CHECK: mismatched calls are a Mismatch on every rank, naming both calls", "[faults]") {
  CommOptions options;
  options.check = true;
  options.timeout = 30s;
  const auto comms = make_comms(3, options);
  std::vector<std::string> messages(3);
  run_ranks(3, [&](int r) {
    std::vector<float> v(1000, 1.0f);
    // a matching call first: the check passes silently
    comms[r]->all_reduce(v.data(), 1000, DataType::Float32, ReduceOp::Sum).wait();
    const std::size_t count = r == 1 ? 999 : 1000;
    const Error e = error_of(comms[r]->all_reduce(v.data(), count, DataType::Float32, ReduceOp::Sum));
    CHECK(e.code() == ErrorCode::Mismatch);
    messages[r] = e.what();
  });
  for (const std::string& m : messages) {
    CHECK(m.find("ranks 0, 2 called all_reduce(count 1000, float32, sum) #2") != std::string::npos);
    CHECK(m.find("rank 1 called all_reduce(count 999, float32, sum) #2") != std::string::npos);
  }
}

TEST_CASE("a lost peer fails the collective on every survivor with PeerLost naming it", "[faults]") {
  CommOptions options;
  options.transport = GENERATE(Transport::Tcp, Transport::Shm);
  options.timeout = 60s;  // a Timeout here would mean the loss went unnoticed
  options.algorithm = Algorithm::Ring;
  const auto comms = make_comms(4, options);
  std::vector<std::string> messages(3);
  std::atomic<int> started{0};
  run_ranks(4, [&](int r) {
    if (r == 3) {
      // rank 3 "dies": it never joins and its connections go away
      while (started.load() < 3) std::this_thread::sleep_for(1ms);
      std::this_thread::sleep_for(50ms);
      comms[3]->abort("simulated crash");
      return;
    }
    std::vector<float> v(1 << 16, 1.0f);
    Work w = comms[r]->all_reduce(v.data(), v.size(), DataType::Float32, ReduceOp::Sum);
    ++started;
    const Error e = error_of(w);
    CHECK(e.code() == ErrorCode::PeerLost);
    messages[r] = e.what();
  });
  for (const std::string& m : messages) {
    CAPTURE(m);
    CHECK(m.find("lost rank 3") != std::string::npos);
  }
}

TEST_CASE("abort fails pending and queued work at once", "[faults]") {
  CommOptions options;
  options.timeout = 60s;
  const auto comms = make_comms(2, options);
  float a = 1, b = 1;
  Work first = comms[0]->all_reduce(&a, 1, DataType::Float32, ReduceOp::Sum);  // rank 1 never joins
  Work second = comms[0]->all_reduce(&b, 1, DataType::Float32, ReduceOp::Sum);
  std::thread aborter([&] {
    std::this_thread::sleep_for(100ms);
    comms[0]->abort("test");
  });
  CHECK(error_of(first).code() != ErrorCode::Internal);
  CHECK(error_of(second).code() == ErrorCode::Aborted);
  aborter.join();
  CHECK(comms[0]->async_error() != nullptr);
  CHECK(error_of(comms[0]->barrier()).code() == ErrorCode::Aborted);
}

TEST_CASE("stream calls on a CPU communicator, and CUDA where there is none, are clear errors", "[faults]") {
  const auto comms = make_comms(1);
  float x = 1;
  const Error cpu = error_of_call([&] {
    comms[0]->all_reduce(&x, &x, 1, DataType::Float32, ReduceOp::Sum, DeviceStream{reinterpret_cast<void*>(0x1)});
  });
  CHECK(cpu.code() == ErrorCode::InvalidArgument);
  CHECK(std::string(cpu.what()).find("KIZUNA_DEVICE = cuda") != std::string::npos);
  CHECK(comms[0]->device() == "cpu");
  CommOptions options;
  options.store = std::make_shared<HashStore>();
  options.rank = 0;
  options.world_size = 1;
  options.device = "cuda";
#if KIZUNA_HAS_CUDA
  // Where there is a GPU the communicator gets it; where there is none the
  // cause is named.
  try {
    const auto gpu = Communicator::create(options);
    CHECK(gpu->device().rfind("cuda:", 0) == 0);
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::CudaError);
    CHECK(std::string(e.what()).find("a CUDA device was asked for") != std::string::npos);
  }
#else
  const Error no_gpu = error_of_call([&] { Communicator::create(options); });
  CHECK(no_gpu.code() == ErrorCode::InvalidArgument);
  CHECK(std::string(no_gpu.what()).find("built without CUDA") != std::string::npos);
#endif
  options.device = "tpu:0";
  CHECK(error_of_call([&] { Communicator::create(options); }).code() == ErrorCode::InvalidArgument);
}

TEST_CASE("default names go on counting for a store re-created against the same server", "[faults]") {
  TcpStoreOptions so;
  so.port = 0;
  so.token = "";
  TcpStoreServer server(so);
  std::vector<std::string> names;
  for (int i = 0; i < 2; ++i) {  // as kzCommInitFromEnv then kzCommDestroy, twice
    TcpStoreOptions co;
    co.port = server.port();
    co.token = "";
    CommOptions options;
    options.store = std::make_shared<TcpStore>(co);
    options.rank = 0;
    options.world_size = 1;
    names.push_back(Communicator::create(options)->name());
  }
  CHECK(names[0] != names[1]);  // the second would otherwise read the first's keys
  CHECK(names[1].rfind("kizuna/comm", 0) == 0);
}

TEST_CASE("a completion callback may hold the last reference to its communicator", "[faults]") {
  auto comms = make_comms(2);
  std::vector<float> a(1 << 20, 1.0f), b(1 << 20, 2.0f);  // queued, for the worker to run
  Work w = comms[0]->all_reduce(a.data(), a.size(), DataType::Float32, ReduceOp::Sum);
  std::atomic<bool> ran{false};
  // Released on rank 0's worker once it has run the call: the communicator
  // is destroyed there, on the thread it would otherwise wait for.
  w.on_complete([c = comms[0], &ran](const Work&) { ran = true; });
  comms[0].reset();
  comms[1]->all_reduce(b.data(), b.size(), DataType::Float32, ReduceOp::Sum).wait();
  w.wait();
  // Callbacks run after the Work is published finished (work.hpp): the
  // worker may still be on its way to this one when wait() returns.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!ran.load() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(ran.load());
  CHECK(a[0] == 3.0f);
  CHECK(b[12345] == 3.0f);
}
