// Symmetric memory (Communicator::allocate_symmetric, comm/symmetric.hpp),
// threads as ranks: the all-reduce that reads the peers' buffers in place
// against the serial reference, what happens when ranks disagree, and the
// memory's life and fallbacks.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <sstream>
#include <string>

#include "collective_cases.hpp"
#include "comm/comm_impl.hpp"
#include "error_of.hpp"
#include "every_rank_failed.hpp"
#include "run_ranks.hpp"

using namespace kizuna;
using namespace kizuna::test;

namespace {

// Every all-reduce on symmetric memory takes its path, whatever its size.
CommOptions shm_options(std::chrono::milliseconds timeout = std::chrono::milliseconds(0)) {
  CommOptions options;
  options.transport = Transport::Shm;
  options.timeout = timeout;
  options.symmetric_from = 0;
  return options;
}

// Names in /dev/shm that this process made.
std::vector<std::string> my_shm_names() {
  std::vector<std::string> names;
  const std::string prefix = "kizuna-" + std::to_string(::getpid()) + "-";
  if (DIR* dir = ::opendir("/dev/shm")) {
    while (const dirent* e = ::readdir(dir))
      if (std::string(e->d_name).rfind(prefix, 0) == 0) names.push_back(e->d_name);
    ::closedir(dir);
  }
  return names;
}

// Two ranks, each on symmetric memory, all-reduce 100 and 101 floats:
// each rank's error.
std::vector<Error> counts_100_and_101(const CommOptions& options) {
  const auto comms = make_comms(2, options);
  std::vector<Error> errors(2, Error(ErrorCode::Internal, "no error"));
  run_ranks(2, [&](int r) {
    const std::shared_ptr<void> memory = comms[r]->allocate_symmetric(4096);
    errors[r] = error_of(comms[r]->all_reduce(memory.get(), r == 0 ? 100 : 101, DataType::Float32, ReduceOp::Sum));
  });
  return errors;
}

// Runs `cases` (all-reduces) on every rank, input and output in one
// symmetric allocation at offsets that differ by rank, and fails with the
// first result that differs from the serial reference.
void check_on_symmetric_memory(const std::vector<std::shared_ptr<Communicator>>& comms, const std::vector<Case>& cases,
                               const std::string& label) {
  const int world = static_cast<int>(comms.size());
  std::uint64_t largest = 0;
  for (const Case& c : cases) largest = std::max(largest, c.count);
  std::mutex mutex;
  std::vector<std::string> failures;
  run_ranks(world, [&](int r) {
    Communicator& comm = *comms[r];
    const std::size_t room = largest * 8 + 4096;
    const std::shared_ptr<void> memory = comm.allocate_symmetric(2 * room);
    auto* bytes = static_cast<unsigned char*>(memory.get());
    for (const Case& c : cases) {
      const CollectiveReference ref(c.dtype, c.rop);
      const std::vector<unsigned char> in = ref.input_buffer(r, c.count);
      unsigned char* input = bytes + 64 * r;
      unsigned char* output = c.in_place ? input : bytes + room + 8 * r;
      std::memcpy(input, in.data(), in.size());
      comm.all_reduce(input, output, c.count, c.dtype, c.rop).wait();
      const std::string wrong = ref.compare(output, c.count, [&](std::uint64_t i, unsigned char* w) {
        expected_output(ref, Op::AllReduce, world, r, c.count, i, w);
      });
      if (!wrong.empty()) {
        std::ostringstream msg;
        msg << c.str() << ", rank " << r << " of " << world << ", " << label << ": " << wrong;
        std::lock_guard lock(mutex);
        failures.push_back(msg.str());
      }
    }
  });
  if (!failures.empty()) FAIL(failures.size() << " failures; the first: " << failures.front());
}

}  // namespace

TEST_CASE("all-reduce on symmetric memory matches the serial reference, in place and out of place", "[comm][symmetric]") {
  const int world = GENERATE(2, 3, 4, 5);
  // Ordinary stores, streaming stores (the fold goes through a block of
  // its own), and each rank its own.
  const std::string stores = GENERATE("cache", "stream", "mixed");
  const auto comms = make_comms(world, shm_options(), [&](int rank, CommOptions& options) {
    options.staged_stores = stores == "stream" || (stores == "mixed" && rank % 2 == 1) ? "stream" : "cache";
  });
  const std::uint64_t largest = 70'001;  // several fold blocks per chunk
  std::vector<Case> cases = standard_cases(world, std::vector<DataType>(std::begin(kAllDataTypes), std::end(kAllDataTypes)),
                                           std::vector<ReduceOp>(std::begin(kAllReduceOps), std::end(kAllReduceOps)));
  std::erase_if(cases, [](const Case& c) { return c.op != Op::AllReduce; });
  for (bool in_place : {false, true}) cases.push_back({Op::AllReduce, DataType::Float32, ReduceOp::Sum, largest, in_place});
  check_on_symmetric_memory(comms, cases, "stores " + stores);
}

TEST_CASE("all-reduces on symmetric memory whose outputs are written past the caches (8 MiB, 2 MiB out of place) match the serial reference", "[comm][symmetric]") {
  // From 8 MiB (2 MiB out of place) the fold goes through a block of its
  // own and the output is streamed whatever the stores are set to
  // ("cache" here).
  const int world = GENERATE(2, 3);
  const auto comms = make_comms(world, shm_options(), [](int, CommOptions& options) { options.staged_stores = "cache"; });
  std::vector<Case> cases;
  for (DataType dtype : {DataType::Float32, DataType::BFloat16}) {
    for (bool in_place : {false, true})
      cases.push_back({Op::AllReduce, dtype, ReduceOp::Sum, (8u << 20) / size_of(dtype) + 7, in_place});
    cases.push_back({Op::AllReduce, dtype, ReduceOp::Sum, (2u << 20) / size_of(dtype) + 3, false});
  }
  check_on_symmetric_memory(comms, cases, "streamed outputs");
}

TEST_CASE("symmetric memory is unlinked from /dev/shm once mapped, and outlives its communicator", "[comm][symmetric]") {
  std::vector<std::shared_ptr<void>> kept(3);
  {
    const auto comms = make_comms(3, shm_options());
    run_ranks(3, [&](int r) {
      kept[r] = comms[r]->allocate_symmetric(1 << 20);
      std::memset(kept[r].get(), r + 1, 1 << 20);
    });
    CHECK(my_shm_names().empty());
    run_ranks(3, [&](int r) { comms[r]->all_reduce(kept[r].get(), (1 << 20) / 4, DataType::Int32, ReduceOp::Sum).wait(); });
  }
  // 0x01010101 + 0x02020202 + 0x03030303, in every element, on every rank.
  for (int r = 0; r < 3; ++r) {
    const auto* words = static_cast<const std::int32_t*>(kept[r].get());
    CHECK(words[0] == 0x06060606);
    CHECK(words[(1 << 18) - 1] == 0x06060606);
  }
}

TEST_CASE("ranks that disagree on a call on symmetric memory all fail with Mismatch, naming both calls", "[comm][symmetric]") {
  const std::vector<Error> errors = counts_100_and_101(shm_options(std::chrono::milliseconds(20'000)));
  check_every_rank_failed(errors, ErrorCode::Mismatch,
                          Catch::Contains("(symmetric)") && Catch::Contains("100 of float32") &&
                              Catch::Contains("101 of float32"));
}

TEST_CASE("a rank that aborts fails its peer's all-reduce on symmetric memory well before the deadline", "[comm][symmetric]") {
  const auto comms = make_comms(2, shm_options(std::chrono::milliseconds(120'000)));
  std::vector<std::shared_ptr<void>> memory(2);
  run_ranks(2, [&](int r) { memory[r] = comms[r]->allocate_symmetric(4096); });
  Work waiting = comms[0]->all_reduce(memory[0].get(), 1000, DataType::Float32, ReduceOp::Sum);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  comms[1]->abort("the test stops rank 1");
  const Error e = error_of(waiting);
  INFO(e.what());
  CHECK((e.code() == ErrorCode::PeerLost || e.code() == ErrorCode::Aborted));
}

TEST_CASE("symmetric memory is ordinary memory over TCP and for one rank, and all-reduces on it still run", "[comm][symmetric]") {
  const int world = GENERATE(1, 3);
  CommOptions options;
  options.transport = Transport::Tcp;
  const auto comms = make_comms(world, options);
  run_ranks(world, [&](int r) {
    const std::shared_ptr<void> memory = comms[r]->allocate_symmetric(4 * 1000);
    REQUIRE(reinterpret_cast<std::uintptr_t>(memory.get()) % 4096 == 0);
    auto* values = static_cast<float*>(memory.get());
    CHECK(values[999] == 0.0f);
    for (int i = 0; i < 1000; ++i) values[i] = static_cast<float>(r + i);
    comms[r]->all_reduce(values, 1000, DataType::Float32, ReduceOp::Sum).wait();
    for (int i = 0; i < 1000; i += 333) CHECK(values[i] == static_cast<float>(world * i + world * (world - 1) / 2));
  });
  CHECK(my_shm_names().empty());
}

TEST_CASE("a forced algorithm, or an all-reduce below symmetric_from, runs through the slots on symmetric memory", "[comm][symmetric]") {
  CommOptions options = shm_options(std::chrono::milliseconds(20'000));
  const bool forced = GENERATE(true, false);
  if (forced) options.algorithm = Algorithm::Ring;
  else options.symmetric_from = 1 << 20;
  const std::vector<Error> errors = counts_100_and_101(options);
  // The slots see the sizes differ in their messages and say so; the rank
  // that sees it first tells the other (also the one whose message did not
  // match), which fails with the same Mismatch.
  check_every_rank_failed(errors, ErrorCode::Mismatch, !Catch::Contains("symmetric"));
}

TEST_CASE("with KIZUNA_CHECK, ranks whose calls fall on both sides of symmetric_from fail with Mismatch", "[comm][symmetric]") {
  // Rank 1's call (404 bytes) takes the symmetric path, rank 0's (400) the
  // slots: without the check both would wait for the other until their
  // deadline; the fingerprints, exchanged first either way, tell at once.
  CommOptions options = shm_options(std::chrono::milliseconds(20'000));
  options.symmetric_from = 404;
  options.check = true;
  const std::vector<Error> errors = counts_100_and_101(options);
  check_every_rank_failed(errors, ErrorCode::Mismatch, Catch::Contains("KIZUNA_CHECK"));
}

TEST_CASE("with KIZUNA_CHECK, a rank passing ordinary memory where its peer passes symmetric memory is a Mismatch", "[comm][symmetric]") {
  // The same call, one path each: without the check both would wait for
  // the other until their deadline.
  CommOptions options = shm_options(std::chrono::milliseconds(20'000));
  options.check = true;
  const auto comms = make_comms(2, options);
  std::vector<Error> errors(2, Error(ErrorCode::Internal, "no error"));
  run_ranks(2, [&](int r) {
    const std::shared_ptr<void> memory = comms[r]->allocate_symmetric(4096);
    std::vector<float> ordinary(100);
    float* buffer = r == 0 ? ordinary.data() : static_cast<float*>(memory.get());
    errors[r] = error_of(comms[r]->all_reduce(buffer, 100, DataType::Float32, ReduceOp::Sum));
  });
  check_every_rank_failed(errors, ErrorCode::Mismatch,
                          Catch::Contains("#1 on symmetric memory") && Catch::Contains("rank 0 called"));
}

TEST_CASE("an all-reduce from one symmetric allocation into another, with the memory let go before the wait", "[comm][symmetric]") {
  // The queued call keeps both allocations mapped until it has run, on
  // every rank, though the caller has dropped them.
  const int world = 3;
  const auto comms = make_comms(world, shm_options());
  std::vector<std::int64_t> results(world);
  run_ranks(world, [&](int r) {
    std::shared_ptr<void> input = comms[r]->allocate_symmetric(8 * 1000);
    std::shared_ptr<void> output = comms[r]->allocate_symmetric(8 * 1000);
    auto* in = static_cast<std::int64_t*>(input.get());
    auto* out = static_cast<std::int64_t*>(output.get());
    for (int i = 0; i < 1000; ++i) in[i] = (r + 1) * i;
    Work work = comms[r]->all_reduce(in, out, 1000, DataType::Int64, ReduceOp::Sum);
    std::int64_t* keep = out;
    std::shared_ptr<void> held = r == 0 ? output : nullptr;  // rank 0 reads its result; the others let go
    input.reset();
    output.reset();
    work.wait();
    results[r] = held ? keep[999] : -1;
  });
  CHECK(results[0] == 6 * 999);
}

TEST_CASE("an all-reduce whose buffers overlap in symmetric memory without being the same is an InvalidArgument", "[comm][symmetric]") {
  const auto comms = make_comms(2, shm_options());
  run_ranks(2, [&](int r) {
    const std::shared_ptr<void> memory = comms[r]->allocate_symmetric(4096);
    auto* f = static_cast<float*>(memory.get());
    const Error e = error_of_call([&] { comms[r]->all_reduce(f, f + 1, 100, DataType::Float32, ReduceOp::Sum); });
    CHECK(e.code() == ErrorCode::InvalidArgument);
    comms[r]->all_reduce(f, 100, DataType::Float32, ReduceOp::Sum).wait();  // and it is still usable
  });
}

TEST_CASE("symmetric memory holds its bytes at any offset, none past an allocation's end, none once let go",
          "[comm][symmetric]") {
  // holds() is what a small call on symmetric memory asks (comm/dispatch.cpp,
  // try_small): it must say exactly what pin() would.
  CommOptions options = shm_options();
  options.store = std::make_shared<HashStore>();
  options.name = "test/symmetric-holds";
  std::vector<std::shared_ptr<Communicator::Impl>> impls(2);
  run_ranks(2, [&](int r) {
    CommOptions mine = options;
    mine.rank = r;
    mine.world_size = 2;
    impls[r] = Communicator::Impl::create(mine);
  });
  run_ranks(2, [&](int r) {
    Communicator c(impls[r]);
    std::shared_ptr<void> memory = c.allocate_symmetric(4096);
    std::shared_ptr<void> other = c.allocate_symmetric(8192);
    REQUIRE(impls[r]->symmetric);
    const comm::SymmetricMemory& sym = *impls[r]->symmetric;
    auto* p = static_cast<unsigned char*>(memory.get());
    CHECK(sym.holds(p, 4096));
    CHECK(sym.holds(p + 100, 3996));
    CHECK_FALSE(sym.holds(p + 100, 3997));
    CHECK_FALSE(sym.holds(p + 4096, 1));
    CHECK(sym.holds(other.get(), 8192));
    std::vector<unsigned char> ordinary(64);
    CHECK_FALSE(sym.holds(ordinary.data(), 64));
    for (std::size_t at : {std::size_t{0}, std::size_t{100}, std::size_t{4000}})
      for (std::size_t n : {std::size_t{1}, std::size_t{96}, std::size_t{97}})
        CHECK(sym.holds(p + at, n) == (sym.pin(p + at, n) != nullptr));
    memory.reset();
    CHECK_FALSE(sym.holds(p, 8));
    CHECK(sym.holds(other.get(), 8));
  });
}

TEST_CASE("symmetric memory: what one communicator's memory was found to hold is not held by another's",
          "[comm][symmetric]") {
  // holds() remembers, per thread, the allocations it last found; another
  // communicator's memory, or an allocation let go, must not be answered
  // from that.
  CommOptions options = shm_options();
  options.store = std::make_shared<HashStore>();
  std::vector<std::shared_ptr<Communicator::Impl>> a(2), b(2);
  run_ranks(2, [&](int r) {
    CommOptions mine = options;
    mine.rank = r;
    mine.world_size = 2;
    mine.name = "test/symmetric-hints-a";
    a[r] = Communicator::Impl::create(mine);
    mine.name = "test/symmetric-hints-b";
    b[r] = Communicator::Impl::create(mine);
  });
  // Per rank: A holds its own, B not A's, B its own, A not B's, again
  // A its own, and A not its own once let go.
  std::vector<std::vector<bool>> seen(2);
  run_ranks(2, [&](int r) {
    Communicator ca(a[r]), cb(b[r]);
    std::shared_ptr<void> in_a = ca.allocate_symmetric(4096);
    std::shared_ptr<void> in_b = cb.allocate_symmetric(4096);
    if (!a[r]->symmetric || !b[r]->symmetric) throw std::runtime_error("no symmetric memory");
    const comm::SymmetricMemory& sa = *a[r]->symmetric;
    const comm::SymmetricMemory& sb = *b[r]->symmetric;
    seen[r] = {sa.holds(in_a.get(), 64), sb.holds(in_a.get(), 64), sb.holds(in_b.get(), 64),
               sa.holds(in_b.get(), 64), sa.holds(in_a.get(), 4096)};
    const void* was_a = in_a.get();
    in_a.reset();
    seen[r].push_back(sa.holds(was_a, 64));
  });
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    REQUIRE(seen[r].size() == 6);
    CHECK(seen[r][0]);
    CHECK_FALSE(seen[r][1]);
    CHECK(seen[r][2]);
    CHECK_FALSE(seen[r][3]);
    CHECK(seen[r][4]);
    CHECK_FALSE(seen[r][5]);
  }
}
