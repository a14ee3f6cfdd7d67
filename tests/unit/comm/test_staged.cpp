// The staged all-reduce (comm/symmetric.hpp, all_reduce_staged): private
// buffers of ranks on one node, through each rank's staging memory, threads
// as ranks. Results against the serial reference over one round and many,
// and what happens when ranks disagree or one goes away.
#include <catch2/catch.hpp>

#include <kizuna/hash_store.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "collective_cases.hpp"
#include "collective_sweep.hpp"
#include "comm/placement_probe.hpp"
#include "comm/symmetric.hpp"
#include "core/log.hpp"
#include "error_of.hpp"
#include "every_rank_failed.hpp"
#include "run_ranks.hpp"
#include "stderr_of.hpp"

using namespace kizuna;
using namespace kizuna::test;

namespace {

// Every all-reduce of private buffers above the mailboxes' sizes takes the
// staged path.
CommOptions staged_options(std::chrono::milliseconds timeout = std::chrono::milliseconds(0),
                           const std::string& stores = "cache") {
  CommOptions options;
  options.staged_stores = stores;
  options.transport = Transport::Shm;
  options.timeout = timeout;
  options.staged_from = 0;
  options.mailbox_upto = 0;
  return options;
}

// Two ranks all-reduce `first` and `second` floats, rank `symmetric_rank`
// (-1: none) on symmetric memory: each rank's error.
std::vector<Error> two_calls(const CommOptions& options, std::size_t first, std::size_t second,
                             int symmetric_rank = -1) {
  const auto comms = make_comms(2, options);
  std::vector<Error> errors(2, Error(ErrorCode::Internal, "no error"));
  run_ranks(2, [&](int r) {
    const std::size_t count = r == 0 ? first : second;
    std::shared_ptr<void> memory = comms[r]->allocate_symmetric(std::max(first, second) * sizeof(float));
    std::vector<float> private_values(count, 1.0f);
    float* values = r == symmetric_rank ? static_cast<float*>(memory.get()) : private_values.data();
    errors[r] = error_of(comms[r]->all_reduce(values, count, DataType::Float32, ReduceOp::Sum));
  });
  return errors;
}

// Sets the log threshold while it lives, then restores the one before.
class LogLevelFor {
 public:
  explicit LogLevelFor(core::LogLevel level) : before_(current()) { core::set_log_level(level); }
  ~LogLevelFor() { core::set_log_level(before_); }
  LogLevelFor(const LogLevelFor&) = delete;
  LogLevelFor& operator=(const LogLevelFor&) = delete;

 private:
  static core::LogLevel current() {
    for (core::LogLevel l : {core::LogLevel::Trace, core::LogLevel::Debug, core::LogLevel::Info, core::LogLevel::Warn})
      if (core::log_enabled(l)) return l;
    return core::LogLevel::Error;
  }
  core::LogLevel before_;
};

// Runs `cases` (checked against the serial reference) with the log at
// trace level, and checks that the placement probes' lines, one per probe
// on each "auto" rank, number `expected`. Nothing to count when
// KIZUNA_LOG_FILE sends the lines elsewhere.
void check_probes_logged(const std::vector<std::shared_ptr<Communicator>>& comms, const std::vector<Case>& cases,
                         const std::string& title, std::size_t expected) {
  if (std::getenv("KIZUNA_LOG_FILE") != nullptr) {
    sweep(comms, cases, title);
    SUCCEED("KIZUNA_LOG_FILE is set: the log lines go there, and the probes are not counted");
    return;
  }
  const std::string log = stderr_of([&] {
    const LogLevelFor trace(core::LogLevel::Trace);
    sweep(comms, cases, title);
  });
  std::size_t probes = 0;
  for (std::size_t at = log.find("placement probe: "); at != std::string::npos;
       at = log.find("placement probe: ", at + 1))
    ++probes;
  INFO(title);
  CHECK(probes == expected);
}

}  // namespace

TEST_CASE("staged all-reduces of private buffers match the serial reference, in place and out of place", "[comm][staged]") {
  const int world = GENERATE(2, 3, 4, 5);
  // Ordinary stores, streaming stores, and each rank its own.
  const std::string stores = GENERATE("cache", "stream", "mixed");
  const auto comms = make_comms(world, staged_options(), [&](int rank, CommOptions& options) {
    if (stores == "stream" || (stores == "mixed" && rank % 2 == 1)) options.staged_stores = "stream";
  });
  std::vector<Case> cases;
  for (DataType dtype : kAllDataTypes)
    for (ReduceOp rop : kAllReduceOps) {
      if (rop == ReduceOp::Avg && !is_floating(dtype)) continue;
      // Fewer elements than ranks, uneven chunks, several fold blocks.
      for (std::uint64_t count : {std::uint64_t{1}, std::uint64_t{3}, std::uint64_t{1001}, std::uint64_t{20'011}})
        for (bool in_place : {false, true}) cases.push_back({Op::AllReduce, dtype, rop, count, in_place});
    }
  // Many rounds: the staging memory's halves hold 256 KiB each.
  for (DataType dtype : {DataType::Float32, DataType::BFloat16, DataType::Int64})
    for (bool in_place : {false, true})
      cases.push_back({Op::AllReduce, dtype, ReduceOp::Sum, (1 << 20) / size_of(dtype) + 13, in_place});
  sweep(comms, cases, "world " + std::to_string(world) + ", stores " + stores);
}

TEST_CASE("staged all-reduces whose outputs are written past the caches (8 MiB, 2 MiB out of place) match the serial reference", "[comm][staged]") {
  const int world = GENERATE(2, 3);
  const auto comms = make_comms(world, staged_options());
  std::vector<Case> cases;
  for (DataType dtype : {DataType::Float32, DataType::BFloat16}) {
    for (bool in_place : {false, true})
      cases.push_back({Op::AllReduce, dtype, ReduceOp::Sum, (8u << 20) / size_of(dtype) + 7, in_place});
    cases.push_back({Op::AllReduce, dtype, ReduceOp::Sum, (2u << 20) / size_of(dtype) + 3, false});
  }
  sweep(comms, cases, "streamed outputs, world " + std::to_string(world));
}

TEST_CASE("staged all-reduces that probe how far apart the ranks are, at the first two and every 64th, keep every result", "[comm][staged]") {
  // The first two staged calls and every 64th after (these are small: no 32 MiB
  // between two) probe on every rank (a meeting, then a bounce with a rank
  // on another CPU, comm/placement_probe.hpp); an "auto" rank logs what
  // each probe found, or that it found no rank to pair with. "mixed": the
  // odd ranks write through the caches ("cache"), and still take part, as
  // partners, in the probes of the others.
  const int world = GENERATE(2, 3);
  const bool mixed = GENERATE(false, true);
  const auto comms = make_comms(world, staged_options(std::chrono::milliseconds(0), "auto"),
                                [&](int rank, CommOptions& options) {
                                  if (mixed && rank % 2 == 1) options.staged_stores = "cache";
                                });
  std::vector<Case> cases;
  for (int k = 0; k < 140; ++k) {
    cases.push_back({Op::AllReduce, DataType::Float32, ReduceOp::Sum, 1000u + 37u * k, k % 2 == 0});
    if (k % 50 == 0) cases.push_back({Op::AllReduce, DataType::Int32, ReduceOp::Max, (300u << 10) + k, false});
  }
  // 143 staged calls: probes at the 1st, 2nd, 66th and 130th.
  const unsigned timing = mixed ? (world + 1) / 2 : world;  // the "auto" ranks
  check_probes_logged(comms, cases, std::string(mixed ? "auto and cache" : "auto") + ", world " + std::to_string(world),
                      4u * timing);
}

TEST_CASE("large staged all-reduces probe once 32 MiB have gone through since the last probe", "[comm][staged]") {
  // 10 calls of 8 MiB: probes at the 1st and the 2nd (the first two calls
  // always do), the 6th and the 10th, each after 4 calls, 32 MiB, since the
  // last.
  const auto comms = make_comms(2, staged_options(std::chrono::milliseconds(0), "auto"));
  std::vector<Case> cases(10, {Op::AllReduce, DataType::Float32, ReduceOp::Sum, (8u << 20) / 4, true});
  check_probes_logged(comms, cases, "8 MiB", 4u * 2u);
}

TEST_CASE("collectives through the slots, written with streaming stores, match the serial reference", "[comm][staged]") {
  // staged_stores also says how the slots (transport/shm) are written:
  // payloads of 16 KiB and more with streaming stores under "stream".
  const int world = GENERATE(2, 3);
  const std::string stores = GENERATE("stream", "mixed");
  CommOptions options = staged_options();
  options.staged_from = std::size_t{1} << 40;  // nothing staged: every all-reduce on the slots
  const auto comms = make_comms(world, options, [&](int rank, CommOptions& o) {
    o.staged_stores = stores == "stream" || rank % 2 == 1 ? "stream" : "cache";
  });
  std::vector<Case> cases;
  for (Op op : {Op::AllReduce, Op::ReduceScatter, Op::Reduce, Op::AllGather, Op::Broadcast})
    for (std::uint64_t count : {std::uint64_t{1000}, std::uint64_t{5000}, std::uint64_t{300'001}})
      for (bool in_place : {false, true}) cases.push_back({op, DataType::Float32, ReduceOp::Sum, count, in_place});
  sweep(comms, cases, "slots, world " + std::to_string(world) + ", stores " + stores);
}

TEST_CASE("collectives through the slots probe once 32 MiB have gone through them since the last probe", "[comm][staged]") {
  // 10 all-reduces of 8 MiB through the slots: probes at the 1st, the
  // 2nd, the 6th and the 10th, as on the staged path. Runs of small calls
  // through the slots never probe after the first two.
  CommOptions options = staged_options(std::chrono::milliseconds(0), "auto");
  options.staged_from = std::size_t{1} << 40;
  const auto comms = make_comms(2, options);
  std::vector<Case> cases(10, {Op::AllReduce, DataType::Float32, ReduceOp::Sum, (8u << 20) / 4, true});
  for (int k = 0; k < 200; ++k) cases.push_back({Op::AllGather, DataType::Float32, ReduceOp::Sum, 1000, true});
  check_probes_logged(comms, cases, "slots", 4u * 2u);
}

TEST_CASE("a staged_stores that is not auto, cache or stream fails creation with InvalidArgument, naming it", "[comm][staged]") {
  CommOptions options = staged_options(std::chrono::milliseconds(0), "nt");
  options.store = std::make_shared<HashStore>();
  options.name = "test/bad-stores";
  options.rank = 0;
  options.world_size = 2;  // no peer: it fails before it would wait for one
  const Error e = error_of_call([&] { Communicator::create(options); });
  CHECK(e.code() == ErrorCode::InvalidArgument);
  CHECK_THAT(e.what(), Catch::Contains("staged_stores") && Catch::Contains("'nt'"));
}

TEST_CASE("staged all-reduces between other collectives, on several communicators, keep every result", "[comm][staged]") {
  // The halves alternate across calls: a call that follows another
  // directly writes the half its peers may still be reading from the last.
  const int world = 3;
  const auto comms = make_comms(world, staged_options());
  std::vector<Case> cases;
  for (int k = 0; k < 6; ++k) {
    cases.push_back({Op::AllReduce, DataType::Float32, ReduceOp::Sum, 70'000u + k, k % 2 == 0});
    if (k % 3 == 0) cases.push_back({Op::Broadcast, DataType::Int32, ReduceOp::Sum, 5000, false});
    cases.push_back({Op::AllReduce, DataType::Int32, ReduceOp::Max, 3u + k, false});
  }
  sweep(comms, cases, "interleaved");
}

TEST_CASE("ranks whose staged all-reduces differ in count fail with Mismatch, naming both calls", "[comm][staged]") {
  const std::vector<Error> errors = two_calls(staged_options(std::chrono::milliseconds(20'000)), 1000, 1001);
  check_every_rank_failed(errors, ErrorCode::Mismatch,
                          Catch::Contains("staged") && Catch::Contains("1000 of float32") &&
                              Catch::Contains("1001 of float32"));
}

TEST_CASE("a rank on symmetric memory where its peer's buffers are private fails with Mismatch, as does the peer", "[comm][staged]") {
  CommOptions options = staged_options(std::chrono::milliseconds(20'000));
  options.symmetric_from = 0;
  const std::vector<Error> errors = two_calls(options, 1000, 1000, 1);
  check_every_rank_failed(errors, ErrorCode::Mismatch,
                          Catch::Contains("private") && Catch::Contains("symmetric memory"));
}

TEST_CASE("below staged_from, or with a forced algorithm, all-reduces of private buffers run through the slots", "[comm][staged]") {
  CommOptions options = staged_options(std::chrono::milliseconds(20'000));
  const bool forced = GENERATE(true, false);
  if (forced) options.algorithm = Algorithm::Ring;
  else options.staged_from = 4005;
  const std::vector<Error> errors = two_calls(options, 1000, 1001);  // 4000 bytes and 4004
  check_every_rank_failed(errors, ErrorCode::Mismatch, !Catch::Contains("staged"));
}

TEST_CASE("a rank that aborts fails its peer's staged all-reduce well before the deadline", "[comm][staged]") {
  const auto comms = make_comms(2, staged_options(std::chrono::milliseconds(120'000)));
  std::vector<float> values(100'000, 1.0f);
  const auto start = std::chrono::steady_clock::now();
  Work waiting = comms[0]->all_reduce(values.data(), values.size(), DataType::Float32, ReduceOp::Sum);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  comms[1]->abort("the test stops rank 1");
  const Error e = error_of(waiting);
  INFO(e.what());
  CHECK((e.code() == ErrorCode::PeerLost || e.code() == ErrorCode::Aborted));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(30));
}

TEST_CASE("under staged_from auto, an all-reduce below 256 KiB takes the slots while rank 0's probes find the CPUs near, on every rank alike", "[comm][staged]") {
  if (std::thread::hardware_concurrency() < 2) {
    WARN("one core: two ranks outnumber it, and every all-reduce from 64 KiB is staged");
    return;
  }
  // Rank 0 finds the CPUs near (or far) at every probe, rank 1 the other:
  // a rank that went by its own verdict would take another path than its
  // peer.
  const bool near = GENERATE(true, false);
  static bool rank0_near;
  rank0_near = near;
  comm::SymmetricMemory::judge_probes_for_tests([](int rank, std::uint64_t) {
    return (rank == 0) == rank0_near ? comm::Placement::Near : comm::Placement::Far;
  });
  struct Restore {
    ~Restore() { comm::SymmetricMemory::judge_probes_for_tests(nullptr); }
  } restore;
  CAPTURE(near);
  CommOptions options = staged_options(std::chrono::milliseconds(20'000));
  options.staged_from.reset();  // auto: 64 KiB, or 256 KiB up to 6 MiB while near
  const auto comms = make_comms(2, options);
  std::vector<Error> errors(2, Error(ErrorCode::Internal, "no error"));
  std::vector<int> wrong(2, 0);  // results other than 1 + 2, by rank
  auto count_wrong = [&](int r, const std::vector<float>& v) {
    wrong[r] += static_cast<int>(std::count_if(v.begin(), v.end(), [](float x) { return x != 3.0f; }));
  };
  run_ranks(2, [&](int r) {
    // 2 staged calls of 512 KiB: probes at the 1st and the 2nd, after
    // which every rank goes by rank 0's verdict of the 1st.
    std::vector<float> large(128 << 10);
    for (int i = 0; i < 2; ++i) {
      std::fill(large.begin(), large.end(), 1.0f + r);
      comms[r]->all_reduce(large.data(), large.size(), DataType::Float32, ReduceOp::Sum).wait();
      count_wrong(r, large);
    }
    // 64 KiB and 128 KiB: through the slots while near, staged while far.
    for (std::size_t count : {16u << 10, 32u << 10}) {
      std::vector<float> values(count, 1.0f + r);
      comms[r]->all_reduce(values.data(), count, DataType::Float32, ReduceOp::Sum).wait();
      count_wrong(r, values);
    }
    // A mismatched call tells which: the staged path's error names itself.
    std::vector<float> values((16 << 10) + r, 1.0f);
    errors[r] = error_of(comms[r]->all_reduce(values.data(), values.size(), DataType::Float32, ReduceOp::Sum));
  });
  CHECK(wrong == std::vector<int>{0, 0});
  if (near) check_every_rank_failed(errors, ErrorCode::Mismatch, !Catch::Contains("staged"));
  else check_every_rank_failed(errors, ErrorCode::Mismatch, Catch::Contains("staging memory"));
}
