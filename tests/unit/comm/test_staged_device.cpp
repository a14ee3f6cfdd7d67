// The device paths on an emulated device (emulated_device.hpp), staged
// and direct (GPU to GPU, emulated):
// every collective on "device" buffers, whole and in parts, against the
// serial reference; the caller's stream ordering input before the call and
// the result before what follows; several calls in flight; and the ways it
// fails (a peer that never comes, a stream that never delivers the input)
// ending the Work with the cause while the stream goes on.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <sstream>

#include <kizuna/reducer.hpp>

#include <kizuna/hash_store.hpp>

#include "collective_cases.hpp"
#include "comm/comm_impl.hpp"
#include "emulated_device.hpp"
#include "error_of.hpp"
#include "run_ranks.hpp"

using namespace kizuna;
using namespace kizuna::test;
using namespace std::chrono_literals;

namespace {

// 13 MiB of float32: three staged parts of at least 4 MiB.
constexpr std::uint64_t kPartedCount = (13u << 20) / 4;

// One collective on one rank's emulated device. The input is written by
// the stream itself, late, just before the call, and the result is read
// by the stream just after it: both must come in stream order. Returns ""
// or what was wrong.
std::string run_on_device(Communicator& comm, EmulatedStream& stream, Op o, DataType dtype, ReduceOp rop,
                          std::uint64_t count, bool in_place) {
  const CollectiveReference ref(dtype, rop);
  const int n = comm.size();
  const int r = comm.rank();
  const int root = n - 1;
  const std::size_t elem = ref.elem();
  const bool gathers = o == Op::AllGather, scatters = o == Op::ReduceScatter;
  const std::uint64_t in_count = scatters ? count * n : count;
  const std::uint64_t out_count = gathers ? count * n : count;
  const std::vector<unsigned char> source = ref.input_buffer(r, in_count);
  // In place: one device buffer, the input at this rank's slot for an
  // all-gather, the output at it for a reduce-scatter.
  std::vector<unsigned char> device_in(in_count * elem + 1, 0xCD), device_out(out_count * elem + 1, 0xAB);
  unsigned char* in = device_in.data();
  unsigned char* out = device_out.data();
  if (in_place) {
    if (gathers) in = out + r * count * elem;
    else if (scatters) out = in + r * count * elem;
    else out = in;
  }
  stream.push([&, in] {
    std::this_thread::sleep_for(std::chrono::microseconds(count == 13 ? 2000 : 0));
    std::memcpy(in, source.data(), source.size());
  });
  const DeviceStream s = stream.handle();
  Work work;
  switch (o) {
    case Op::AllReduce: work = comm.all_reduce(in, out, count, dtype, rop, s); break;
    case Op::ReduceScatter: work = comm.reduce_scatter(in, out, count, dtype, rop, s); break;
    case Op::Reduce: work = comm.reduce(in, r == root ? out : nullptr, count, dtype, rop, root, s); break;
    case Op::AllGather: work = comm.all_gather(in, out, count, dtype, s); break;
    case Op::Broadcast: work = comm.broadcast(in, out, count, dtype, root, s); break;
  }
  std::vector<unsigned char> got(out_count * elem);
  stream.push([&, out] { std::memcpy(got.data(), out, got.size()); });
  work.wait();
  if (!stream.synchronize()) return "the stream did not finish";
  if (o == Op::Reduce && r != root) return "";
  return ref.compare(got.data(), out_count,
                     [&](std::uint64_t i, unsigned char* w) { expected_output(ref, o, n, r, count, i, w); });
}

std::vector<Case> cases_for(int world) {
  std::vector<Case> cases = standard_cases(world, {DataType::Float32, DataType::BFloat16, DataType::Int64},
                                           {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Avg});
  // In parts: the splittable collectives, large enough for three; and
  // all-gather and reduce-scatter, in parts GPU to GPU (whole staged).
  for (bool in_place : {false, true}) {
    cases.push_back({Op::AllReduce, DataType::Float32, ReduceOp::Avg, kPartedCount, in_place});
    cases.push_back({Op::AllReduce, DataType::Int64, ReduceOp::Max, kPartedCount / 2, in_place});
    cases.push_back({Op::Reduce, DataType::Float32, ReduceOp::Sum, kPartedCount, in_place});
    cases.push_back({Op::Broadcast, DataType::Float32, ReduceOp::Sum, kPartedCount, in_place});
    cases.push_back({Op::AllGather, DataType::Float32, ReduceOp::Sum, kPartedCount / 4, in_place});
    cases.push_back({Op::ReduceScatter, DataType::Float32, ReduceOp::Avg, kPartedCount / 4, in_place});
  }
  return cases;
}

// Options for communicators on the emulated device (an EmulatedDevice
// must live while they are created).
CommOptions on_device(std::chrono::milliseconds timeout) {
  CommOptions options;
  options.device = "cuda";
  options.timeout = timeout;
  return options;
}

// `direct`: GPU to GPU (emulated); else staged through the host.
void sweep(int world, Transport transport, bool direct = false) {
  EmulatedDevice device(direct);
  CommOptions options = on_device(60s);
  options.transport = transport;
  const auto comms = make_comms(world, options);
  REQUIRE(comms[0]->device() ==
          (direct ? "emulated device (host memory), direct" : "emulated device (host memory)"));
  const std::vector<Case> cases = cases_for(world);
  std::mutex mutex;
  std::vector<std::string> failures;
  run_ranks(world, [&](int r) {
    EmulatedStream stream;
    for (const Case& c : cases) {
      const std::string wrong = run_on_device(*comms[r], stream, c.op, c.dtype, c.rop, c.count, c.in_place);
      if (wrong.empty()) continue;
      std::ostringstream msg;
      msg << c.str() << ", rank " << r << ": " << wrong;
      std::lock_guard lock(mutex);
      failures.push_back(msg.str());
    }
  });
  if (!failures.empty()) FAIL(failures.size() << " failures; the first: " << failures.front());
}

}  // namespace

TEST_CASE("staged device collectives match the serial reference, whole and in parts", "[comm][staged]") {
  const int world = GENERATE(1, 2, 3, 4);
  const Transport transport = GENERATE(Transport::Shm, Transport::Tcp);
  if (world > 2 && transport == Transport::Tcp) return;  // the transport is not what this pins down
  INFO("world " << world << (transport == Transport::Tcp ? " over TCP" : " over shared memory"));
  sweep(world, transport);
}

TEST_CASE("direct device collectives (IPC emulated with threads) match the serial reference, in parts too",
          "[comm][staged][direct]") {
  // The communicator's GPU-to-GPU path end to end: parts (up to 4 here),
  // encoded tables, the FIFO walk, Avg's division, on the caller's stream.
  const int world = GENERATE(1, 2, 3, 4);
  INFO("world " << world);
  sweep(world, Transport::Shm, true);
}

TEST_CASE("direct device calls take their algorithm under the device link, not the host's", "[comm][staged][direct]") {
  // docs/tuning.md#device-link-model: 4 ranks, 256 B: doubling GPU to GPU,
  // where the host's link would take one-shot.
  EmulatedDevice device(true);
  auto store = std::make_shared<HashStore>();
  std::vector<std::shared_ptr<Communicator::Impl>> impls(4);
  std::vector<std::string> reports(4);
  run_ranks(4, [&](int r) {
    CommOptions o = on_device(60s);
    o.store = store;
    o.name = "test/device-link";
    o.rank = r;
    o.world_size = 4;
    impls[r] = Communicator::Impl::create(o);
    comm::Call call;
    call.count = 64;
    if (impls[r]->choose(call, comm::Buffers::Host, comm::Placement::Unknown) != Algorithm::OneShot)
      reports[r] = "the host's link no longer takes one-shot: pick another case";
    Communicator c(impls[r]);
    EmulatedStream stream;
    std::vector<float> v(64, float(r));
    c.all_reduce(v.data(), v.data(), v.size(), DataType::Float32, ReduceOp::Sum, stream.handle()).wait();
    if (!stream.synchronize()) reports[r] = "the stream did not finish";
    if (reports[r].empty()) reports[r] = impls[r]->history.report(impls[r]->live, "");
  });
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r << "\n" << reports[r]);
    CHECK(reports[r].find("(doubling)") != std::string::npos);
  }
}

TEST_CASE("a direct device call whose peer never comes times out, and its stream goes on",
          "[comm][staged][direct][faults]") {
  EmulatedDevice device(true);
  const auto comms = make_comms(2, on_device(300ms));
  EmulatedStream stream;
  std::vector<float> buffer(kPartedCount, 1.0f);
  const auto start = std::chrono::steady_clock::now();
  const Error e = error_of(comms[0]->all_reduce(buffer.data(), buffer.data(), buffer.size(), DataType::Float32,
                                                ReduceOp::Sum, stream.handle()));
  CHECK(e.code() == ErrorCode::Timeout);
  CHECK(std::string(e.what()).find("on device") != std::string::npos);
  CHECK(stream.synchronize(10s));
  CHECK(std::chrono::steady_clock::now() - start < 20s);
  // The communicator is unusable afterwards, and says so.
  CHECK(error_of(comms[0]->barrier()).code() == ErrorCode::Aborted);
}

TEST_CASE("a peer whose communicator goes away mid direct call: PeerLost long before the deadline",
          "[comm][staged][direct][faults]") {
  // The kernels see only their deadline; the idle worker's watch on the
  // links (every 100 ms while device calls are in flight) must notice the
  // closed connection, fail the communicator and stop the walk.
  EmulatedDevice device(true);
  auto comms = make_comms(2, on_device(30s));
  EmulatedStream stream;
  std::vector<float> buffer(kPartedCount, 1.0f);
  const auto start = std::chrono::steady_clock::now();
  Work w = comms[0]->all_reduce(buffer.data(), buffer.data(), buffer.size(), DataType::Float32, ReduceOp::Sum,
                                stream.handle());
  std::this_thread::sleep_for(200ms);
  comms[1].reset();  // rank 1 never calls, and goes
  const Error e = error_of(w);
  CHECK(e.code() == ErrorCode::PeerLost);
  CHECK(std::string(e.what()).find("rank 1") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - start < 10s);
  CHECK(stream.synchronize(10s));
}

TEST_CASE("device calls in flight together finish in call order with their own results", "[comm][staged]") {
  const bool direct = GENERATE(false, true);
  INFO((direct ? "direct" : "staged"));
  EmulatedDevice device(direct);
  const CommOptions options = on_device(60s);
  const int world = 3;
  const auto comms = make_comms(world, options);
  const std::uint64_t counts[] = {kPartedCount, 7, kPartedCount / 3, 0, 100000, kPartedCount};
  std::vector<std::string> problems(world);  // per rank: Catch's macros are for the main thread
  run_ranks(world, [&](int r) {
    EmulatedStream stream;
    std::vector<std::vector<float>> buffers;
    std::vector<Work> works;
    for (std::size_t k = 0; k < std::size(counts); ++k)
      buffers.emplace_back(counts[k], static_cast<float>(r + 1) * static_cast<float>(k + 1));
    for (std::size_t k = 0; k < std::size(counts); ++k)
      works.push_back(comms[r]->all_reduce(buffers[k].data(), buffers[k].data(), counts[k], DataType::Float32,
                                           ReduceOp::Sum, stream.handle()));
    // The stream runs on behind the calls: each call's copy back waits for
    // its own collective, never a later one's.
    for (Work& w : works) w.wait();
    if (!stream.synchronize()) problems[r] += "the stream did not finish; ";
    for (std::size_t k = 0; k < std::size(counts); ++k) {
      const float want = 6.0f * static_cast<float>(k + 1);  // (1 + 2 + 3) * (k + 1)
      const auto right = std::count(buffers[k].begin(), buffers[k].end(), want);
      if (right != static_cast<std::ptrdiff_t>(counts[k]))
        problems[r] += "call " + std::to_string(k) + ": " + std::to_string(right) + " of " +
                       std::to_string(counts[k]) + " right; ";
    }
  });
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r);
    CHECK(problems[r].empty());
  }
}

TEST_CASE("staged device send and recv arrive on the receiver's stream", "[comm][staged]") {
  EmulatedDevice device;
  const CommOptions options = on_device(60s);
  const auto comms = make_comms(2, options);
  std::vector<std::ptrdiff_t> right(2, -1);
  const std::size_t count = kPartedCount / 4;
  run_ranks(2, [&](int r) {
    EmulatedStream stream;
    std::vector<std::int32_t> buffer(count, r == 0 ? 42 : 0);
    Work w = r == 0 ? comms[0]->send(buffer.data(), buffer.size(), DataType::Int32, 1, stream.handle())
                    : comms[1]->recv(buffer.data(), buffer.size(), DataType::Int32, 0, stream.handle());
    w.wait();
    if (stream.synchronize()) right[r] = std::count(buffer.begin(), buffer.end(), 42);
  });
  CHECK(right[0] == static_cast<std::ptrdiff_t>(count));
  CHECK(right[1] == static_cast<std::ptrdiff_t>(count));
}

TEST_CASE("a staged device send to a host recv leaves both ranks' collectives in step", "[comm][staged]") {
  // Point-to-point calls take no collective sequence number, staged or not:
  // a collective after them must carry the same one on both ranks.
  EmulatedDevice device;
  const auto comms = make_comms(2, on_device(10s));
  std::vector<float> sum(2);
  run_ranks(2, [&](int r) {
    EmulatedStream stream;
    std::vector<std::int32_t> buffer(1000, r == 0 ? 7 : 0);
    if (r == 0) comms[0]->send(buffer.data(), buffer.size(), DataType::Int32, 1, stream.handle()).wait();
    else comms[1]->recv(buffer.data(), buffer.size(), DataType::Int32, 0).wait();
    float x = static_cast<float>(r + 1);
    comms[r]->all_reduce(&x, 1, DataType::Float32, ReduceOp::Sum).wait();
    sum[r] = x;
  });
  CHECK(sum[0] == 3.0f);
  CHECK(sum[1] == 3.0f);
}

TEST_CASE("a staged device call whose peer never comes times out, and its stream goes on", "[comm][staged][faults]") {
  EmulatedDevice device;
  const CommOptions options = on_device(500ms);
  const auto comms = make_comms(2, options);
  EmulatedStream stream;
  std::vector<float> buffer(kPartedCount, 1.0f);
  const auto start = std::chrono::steady_clock::now();
  Work w = comms[0]->all_reduce(buffer.data(), buffer.data(), buffer.size(), DataType::Float32, ReduceOp::Sum,
                                stream.handle());
  const Error e = error_of(w);
  CHECK(e.code() == ErrorCode::Timeout);
  CHECK(std::string(e.what()).find("part 1 of 3 of a staged device call") != std::string::npos);
  // The stream is not held by the failed call: what follows it runs.
  CHECK(stream.synchronize(10s));
  CHECK(std::chrono::steady_clock::now() - start < 20s);
}

TEST_CASE("a staged device call whose stream never delivers its input times out", "[comm][staged][faults]") {
  EmulatedDevice device;
  const CommOptions options = on_device(300ms);
  const auto comms = make_comms(2, options);
  std::vector<Error> errors(2, Error(ErrorCode::Internal, "no error"));
  std::vector<char> drained(2, 0);  // not vector<bool>: ranks write their own element at once
  run_ranks(2, [&](int r) {
    EmulatedStream stream;
    // Rank 0's stream is busy with something else for 1.5 s. Its Work
    // ends only once the stream has passed the call (the call's copies
    // are done with the buffers then), but with the Timeout from 300 ms.
    if (r == 0) stream.push([] { std::this_thread::sleep_for(1500ms); });
    float x = 1.0f;
    errors[r] = error_of(comms[r]->all_reduce(&x, &x, 1, DataType::Float32, ReduceOp::Sum, stream.handle()));
    drained[r] = stream.synchronize(10s);
  });
  CHECK(drained[0]);
  CHECK(drained[1]);
  CHECK(errors[0].code() == ErrorCode::Timeout);
  CHECK(std::string(errors[0].what()).find("did not deliver its input") != std::string::npos);
  CHECK(errors[1].code() != ErrorCode::Internal);  // it failed too, for its own reason
}

TEST_CASE("a staged device call whose device stops running its queue ends in an error, never hangs",
          "[comm][staged][faults]") {
  // As a GPU whose context failed: CUDA then never runs what was queued
  // behind, host functions included, so the call's end must be found by
  // polling with a deadline (core/completion_poller.hpp).
  EmulatedDevice device;
  const auto comms = make_comms(2, on_device(500ms));
  EmulatedQueue::stalled = true;
  std::vector<ErrorCode> codes(2, ErrorCode::Internal);
  std::vector<std::chrono::steady_clock::duration> took(2);
  std::atomic<int> ended{0};
  std::vector<char> finished(2, false);
  run_ranks(2, [&](int r) {
    EmulatedStream stream;
    std::vector<float> buffer(1000, 1.0f);
    const auto start = std::chrono::steady_clock::now();
    codes[r] = error_of(comms[r]->all_reduce(buffer.data(), buffer.data(), buffer.size(), DataType::Float32,
                                             ReduceOp::Sum, stream.handle()))
                   .code();
    took[r] = std::chrono::steady_clock::now() - start;
    // Both have their answer: the device may run again, and the streams
    // finish before they go.
    if (ended.fetch_add(1) == 1) EmulatedQueue::stalled = false;
    while (EmulatedQueue::stalled) std::this_thread::sleep_for(1ms);
    finished[r] = stream.synchronize(60s);  // the copies back are done before the buffer goes
  });
  EmulatedQueue::stalled = false;
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    CHECK(codes[r] == ErrorCode::Timeout);
    CHECK(took[r] < 30s);  // the stall lasts 60 s
    CHECK(finished[r]);
  }
}

TEST_CASE("the DDP Reducer averages device gradients on the caller's stream", "[comm][staged][ddp]") {
  const bool direct = GENERATE(false, true);
  INFO((direct ? "direct" : "staged"));
  EmulatedDevice device(direct);
  const int world = 3;
  const auto comms = make_comms(world, on_device(60s));
  // Views back to back; the last one is large enough to be staged in parts.
  std::vector<Parameter> views;
  std::size_t bytes = 0;
  for (std::size_t count : {1000u, 3u, 70000u, 17u, 2500000u}) {
    Parameter p;
    p.name = "p" + std::to_string(views.size());
    p.offset = bytes;
    p.count = count;
    views.push_back(p);
    bytes += p.bytes();
  }
  std::vector<std::string> problems(world);  // per rank: Catch's macros are for the main thread
  run_ranks(world, [&](int r) {
    EmulatedStream stream;
    std::vector<float> params(bytes / 4, static_cast<float>(10 * (r + 1)));
    std::vector<float> grads(bytes / 4);
    ReducerOptions options;
    options.stream = stream.handle();
    Reducer reducer(comms[r], params.data(), grads.data(), bytes, views, options);  // broadcasts rank 0's parameters
    for (int step = 0; step < 2; ++step) {
      // Backward on the stream: gradient i of rank r is (r + 1) * (i % 7 + step).
      stream.push([&, step] {
        for (std::size_t i = 0; i < grads.size(); ++i)
          grads[i] = static_cast<float>(r + 1) * static_cast<float>(i % 7 + step);
      });
      for (std::size_t p = views.size(); p-- > 0;) reducer.mark_ready(p);
      reducer.finalize();
      if (!stream.synchronize()) problems[r] += "the stream did not finish; ";
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < grads.size(); ++i)
        wrong += grads[i] != 2.0f * static_cast<float>(i % 7 + step);  // mean of 1, 2, 3 times it
      if (wrong) problems[r] += "step " + std::to_string(step) + ": " + std::to_string(wrong) + " gradients wrong; ";
    }
    if (std::count(params.begin(), params.end(), 10.0f) != static_cast<std::ptrdiff_t>(params.size()))
      problems[r] += "parameters are not rank 0's; ";
  });
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r);
    CHECK(problems[r].empty());
  }
}
