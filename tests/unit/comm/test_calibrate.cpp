// Calibration and the profile's way to every rank (comm/calibrate.hpp,
// comm/setup.cpp), threads as ranks: what calibrate() measures, that rank
// 0's profile decides on every rank, that calls it routes stay right, and
// that a bad profile fails every rank alike.
#include <catch2/catch.hpp>

#include <kizuna/hash_store.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <vector>

#include "comm/calibrate.hpp"
#include "comm/comm_impl.hpp"
#include "comm/mailbox.hpp"
#include "error_of.hpp"
#include "run_ranks.hpp"

using namespace kizuna;
using namespace kizuna::test;
using Catch::Matchers::Contains;

namespace {

CommOptions on_shm() {
  CommOptions o;
  o.transport = Transport::Shm;
  o.store = std::make_shared<HashStore>();
  static int counter = 0;
  o.name = "test/calibrate" + std::to_string(counter++);
  return o;
}

std::string temp_file(const std::string& text) {
  char path[] = "/tmp/kizuna-profile-XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  ::close(fd);
  std::ofstream(path) << text;
  return path;
}

// calibrate() on 2 ranks over shared memory: rank 0's sections, after
// checking that rank 1 has the same.
std::vector<comm::ProfileSection> calibrate_two(const comm::CalibrateOptions& o) {
  const CommOptions base = on_shm();
  std::vector<std::vector<comm::ProfileSection>> sections(2);
  run_ranks(2, [&](int r) {
    CommOptions mine = base;
    mine.rank = r;
    mine.world_size = 2;
    sections[r] = comm::calibrate(mine, o);
  });
  CHECK(comm::Profile{sections[0], ""}.text() == comm::Profile{sections[1], ""}.text());
  return sections[0];
}

// While it lives, every placement probe finds the CPUs near (or far, as
// last set by now()): the judge gives each rank's verdict, whatever the
// cores, paired or not.
class JudgedProbes {
 public:
  explicit JudgedProbes(bool near) {
    now(near);
    comm::SymmetricMemory::judge_probes_for_tests(
        [](int, std::uint64_t) { return near_.load() ? comm::Placement::Near : comm::Placement::Far; });
  }
  ~JudgedProbes() { comm::SymmetricMemory::judge_probes_for_tests(nullptr); }
  JudgedProbes(const JudgedProbes&) = delete;
  JudgedProbes& operator=(const JudgedProbes&) = delete;
  // The host moves the CPUs: the probes from here on find them so.
  void now(bool near) { near_.store(near); }

 private:
  static inline std::atomic<bool> near_{false};
};

// Two ranks' communicators, as Impl (for their tuning and history).
std::vector<std::shared_ptr<Communicator::Impl>> impls_of_two(const CommOptions& base) {
  std::vector<std::shared_ptr<Communicator::Impl>> impls(2);
  run_ranks(2, [&](int r) {
    CommOptions mine = base;
    mine.rank = r;
    mine.world_size = 2;
    impls[r] = Communicator::Impl::create(mine);
  });
  return impls;
}

// 2 ranks on one node: the mailboxes up to 1 KiB, doubling up to 8 KiB,
// the staged route beyond.
const char* kProfile =
    "kizuna-tuning 1\n"
    "section world=2 nodes=1 local=2 transport=shm buffers=private\n"
    "candidates mailbox ring doubling staged\n"
    "8 0.3 2 1 3\n"
    "1024 0.5 2 1 3\n"
    "4096 - 4 2 5\n"
    "65536 - 20 30 10\n"
    "end\n";

// A short calibration: 8 B and 4 KiB, two rounds, rank 0's progress
// lines into `lines`.
comm::CalibrateOptions two_sizes_two_rounds(std::vector<std::string>& lines) {
  comm::CalibrateOptions o;
  o.sizes = {8, 4096};
  o.repetitions = 2;
  o.per_measurement = std::chrono::microseconds(200);
  o.progress = [&lines](const std::string& line) { lines.push_back(line); };
  return o;
}

}  // namespace

TEST_CASE("calibrate: every candidate measured on every rank alike", "[comm][calibrate]") {
  std::vector<std::string> lines;
  const comm::CalibrateOptions o = two_sizes_two_rounds(lines);
  // One section, or two where the probes found the CPUs near in one round
  // and far in the other.
  const std::vector<comm::ProfileSection> sections = calibrate_two(o);
  REQUIRE((sections.size() == 1 || sections.size() == 2));
  for (const comm::ProfileSection& s : sections) {
    CHECK(s.key == comm::ProfileKey{2, 1, 2, true, false});
    CHECK(s.candidates == std::vector<comm::Candidate>{comm::Candidate::Mailbox, comm::Candidate::Ring,
                                                       comm::Candidate::Tree, comm::Candidate::OneShot,
                                                       comm::Candidate::TwoShot, comm::Candidate::Doubling,
                                                       comm::Candidate::Staged});
    REQUIRE(s.rows.size() == 2);
    for (std::size_t c = 0; c < s.candidates.size(); ++c) {
      CHECK(s.rows[0].us[c] > 0);
      if (s.candidates[c] == comm::Candidate::Mailbox) CHECK(std::isnan(s.rows[1].us[c]));  // over its capacity
      else CHECK(s.rows[1].us[c] > 0);
    }
  }
  // Rank 0's progress: a line a round, then a line a size of each section.
  CHECK(lines.size() == 2 + 2 * sections.size());
}

TEST_CASE("calibrate: up to twins_upto a candidate is timed on a twin too, and the faster counts",
          "[comm][calibrate]") {
  // 8 B within twins_upto, 4 KiB beyond it: rank 0's line for 8 B gives
  // every candidate's time and its twin's ("mailbox 0.3/0.31"), the line
  // for 4 KiB one time each.
  std::vector<std::string> lines;
  comm::CalibrateOptions o = two_sizes_two_rounds(lines);
  o.twins_upto = 1024;
  const std::vector<comm::ProfileSection> sections = calibrate_two(o);
  REQUIRE(lines.size() == 2 + 2 * sections.size());
  for (std::size_t s = 0; s < sections.size(); ++s) {
    const std::string& small = lines[2 + 2 * s];
    const std::string& large = lines[3 + 2 * s];
    CHECK_THAT(small, Contains("8 B"));
    for (const char* c : {" mailbox ", " ring ", " tree ", " oneshot ", " twoshot ", " doubling ", " staged "}) {
      const std::size_t at = small.find(c);
      REQUIRE(at != std::string::npos);
      const std::size_t next = small.find(' ', at + std::strlen(c));
      CHECK(small.substr(at, next - at).find('/') != std::string::npos);  // "<name> <time>/<twin's>"
    }
    CHECK_THAT(large, Contains("4096 B"));
    CHECK(large.find('/') == std::string::npos);
  }
  // twins_upto of 0: none.
  lines.clear();
  o.twins_upto = 0;
  calibrate_two(o);
  for (const std::string& line : lines) CHECK(line.find('/') == std::string::npos);
}

TEST_CASE("calibrate: faster_of keeps each candidate's faster time, and a time where the twin has none",
          "[comm][calibrate]") {
  comm::ProfileSection a;
  a.key = comm::ProfileKey{2, 1, 2, true, false};
  a.candidates = {comm::Candidate::Mailbox, comm::Candidate::OneShot, comm::Candidate::Ring};
  a.placement = comm::MeasuredPlacement::Near;
  const double none = std::nan("");
  a.rows = {{8, {0.38, 0.28, 0.45}}, {4096, {none, 1.2, 1.9}}};
  comm::ProfileSection b = a;
  b.rows = {{8, {0.27, 0.29, none}}, {4096, {none, 1.1, none}}};
  const std::vector<comm::ProfileSection> both = comm::faster_of({a}, {b});
  REQUIRE(both.size() == 1);
  CHECK(both[0].rows[0].us == std::vector<double>{0.27, 0.28, 0.45});
  CHECK(std::isnan(both[0].rows[1].us[0]));  // neither measured it
  CHECK(both[0].rows[1].us[1] == 1.1);
  CHECK(both[0].rows[1].us[2] == 1.9);  // the twin did not measure it
  // Sections that do not match are a bug, not a choice.
  comm::ProfileSection far = b;
  far.placement = comm::MeasuredPlacement::Far;
  CHECK_THROWS(comm::faster_of({a}, {far}));
  CHECK_THROWS(comm::faster_of({a}, {b, b}));
}

TEST_CASE("calibrate: rounds near and far make a section of each, from its own rounds", "[comm][calibrate]") {
  comm::ProfileSection blank;
  blank.key = comm::ProfileKey{2, 1, 2, true, false};
  blank.candidates = {comm::Candidate::Mailbox, comm::Candidate::OneShot};
  // [size][candidate] -> a time per round; rounds near, far, far, unknown.
  const std::vector<std::vector<std::vector<double>>> runs{{{1, 9, 8, 5}, {2, 4, 5, 5}}, {{}, {7, 30, 20, 5}}};
  const std::vector<comm::Placement> rounds{comm::Placement::Near, comm::Placement::Far, comm::Placement::Far,
                                            comm::Placement::Unknown};
  const auto split = comm::sections_from(blank, {8, 4096}, runs, rounds);
  REQUIRE(split.size() == 2);
  CHECK(split[0].placement == comm::MeasuredPlacement::Near);
  CHECK(split[0].rows[0].us == std::vector<double>{1, 2});
  CHECK(std::isnan(split[0].rows[1].us[0]));
  CHECK(split[0].rows[1].us[1] == 7);
  CHECK(split[1].placement == comm::MeasuredPlacement::Far);
  CHECK(split[1].rows[0].us == std::vector<double>{8.5, 4.5});  // the far rounds' medians
  CHECK(split[1].rows[1].us[1] == 25);

  // Rounds of one placement, or none told: one section of every round.
  for (const comm::Placement p : {comm::Placement::Far, comm::Placement::Unknown}) {
    const auto one = comm::sections_from(blank, {8, 4096}, runs, {p, p, comm::Placement::Unknown, p});
    REQUIRE(one.size() == 1);
    CHECK(one[0].placement == (p == comm::Placement::Far ? comm::MeasuredPlacement::Far
                                                           : comm::MeasuredPlacement::Unknown));
    CHECK(one[0].rows[0].us == std::vector<double>{6.5, 4.5});
  }
}

TEST_CASE("calibrate: the section says where the probes found the CPUs, round by round", "[comm][calibrate]") {
  // Every probe finds the CPUs near (or far). The staged candidate's first
  // two calls, before the first round, probe, and every rank goes by the
  // first one's verdict from then on (docs/tuning.md#probe-cadence).
  const bool near = GENERATE(true, false);
  const JudgedProbes judged(near);
  std::vector<std::string> lines;
  const comm::CalibrateOptions o = two_sizes_two_rounds(lines);
  const std::vector<comm::ProfileSection> sections = calibrate_two(o);
  const std::string cpus = near ? "(CPUs near)" : "(CPUs far)";
  REQUIRE(lines.size() == 4);
  CHECK_THAT(lines[0], Contains("round 1 of 2 done " + cpus));
  CHECK_THAT(lines[1], Contains("round 2 of 2 done " + cpus));
  for (const comm::ProfileSection& s : sections)
    CHECK(s.placement == (near ? comm::MeasuredPlacement::Near : comm::MeasuredPlacement::Far));
  CHECK_THAT(comm::Profile({{sections[0]}, ""}).text(),
             Contains(std::string("buffers=private placement=") + (near ? "near" : "far") + "\n"));
}

TEST_CASE("calibrate: more rounds are due while near or far lacks rounds, and only then", "[comm][calibrate]") {
  using P = comm::Placement;
  CHECK(comm::placements_short({P::Near, P::Near}, 2));                  // far never seen
  CHECK(comm::placements_short({P::Far, P::Near, P::Far}, 2));           // near once
  CHECK(comm::placements_short({P::Unknown, P::Far, P::Unknown}, 1));    // near never seen
  CHECK_FALSE(comm::placements_short({P::Near, P::Far, P::Far, P::Near}, 2));
  CHECK_FALSE(comm::placements_short({P::Near, P::Unknown, P::Far}, 1));
  CHECK_FALSE(comm::placements_short({P::Unknown, P::Unknown}, 2));  // no probe tells: nothing to wait for
  CHECK_FALSE(comm::placements_short({}, 2));
}

TEST_CASE("calibrate: with a placement wait, rounds go on until near and far each have theirs",
          "[comm][calibrate]") {
  JudgedProbes judged(true);
  std::vector<std::string> lines;
  comm::CalibrateOptions o = two_sizes_two_rounds(lines);
  o.placement_wait = std::chrono::seconds(60);
  // The host moves the CPUs apart once the first two rounds are done.
  o.progress = [&](const std::string& line) {
    lines.push_back(line);
    if (line.starts_with("round 2 of 2 done")) judged.now(false);
  };
  const std::vector<comm::ProfileSection> sections = calibrate_two(o);
  REQUIRE(sections.size() == 2);
  CHECK(sections[0].placement == comm::MeasuredPlacement::Near);
  CHECK(sections[1].placement == comm::MeasuredPlacement::Far);
  const auto rounds_seen = [&](const std::string& cpus) {
    return std::count_if(lines.begin(), lines.end(), [&](const std::string& l) {
      return l.starts_with("round ") && l.ends_with("done (CPUs " + cpus + ")");
    });
  };
  CHECK(rounds_seen("near") >= 2);
  CHECK(rounds_seen("far") == 2);  // the calibration stops at the round that completes the pair
  CHECK_THAT(lines.at(2), Contains("round 3 done"));
}

TEST_CASE("calibrate: a placement wait ends when its time is up, though the CPUs never moved",
          "[comm][calibrate]") {
  JudgedProbes judged(true);
  std::vector<std::string> lines;
  comm::CalibrateOptions o = two_sizes_two_rounds(lines);
  o.placement_wait = std::chrono::milliseconds(300);
  const auto start = std::chrono::steady_clock::now();
  const std::vector<comm::ProfileSection> sections = calibrate_two(o);
  CHECK(std::chrono::steady_clock::now() - start >= o.placement_wait);
  REQUIRE(sections.size() == 1);
  CHECK(sections[0].placement == comm::MeasuredPlacement::Near);
  const auto rounds = std::count_if(lines.begin(), lines.end(), [](const std::string& l) {
    return l.starts_with("round ");
  });
  CHECK(rounds > 2);
}

TEST_CASE("calibrate: symmetric buffers add the symmetric route", "[comm][calibrate]") {
  comm::CalibrateOptions o;
  o.sizes = {1 << 20};
  o.repetitions = 1;
  o.per_measurement = std::chrono::microseconds(100);
  o.symmetric = true;
  const std::vector<comm::ProfileSection> sections = calibrate_two(o);
  CHECK(sections[0].key.symmetric);
  CHECK(sections[0].candidates.back() == comm::Candidate::Symmetric);
}

TEST_CASE("race: every entrant timed at its sizes in every round, on every rank alike", "[comm][calibrate]") {
  const CommOptions base = on_shm();
  std::vector<std::vector<std::vector<std::vector<double>>>> runs(2);
  std::vector<comm::Candidate> first(2);
  run_ranks(2, [&](int r) {
    CommOptions mine = base;
    mine.rank = r;
    mine.world_size = 2;
    const std::vector<comm::Forced> forced = comm::forced_communicators(mine, false, "race");
    if (forced.size() < 3) throw std::runtime_error(std::to_string(forced.size()) + " candidates, not 3 or more");
    first[r] = forced[0].candidate;
    std::vector<float> buffer(1024, 0.0f);
    // The mailboxes up to 8 bytes only, two schedules everywhere.
    const std::vector<comm::Entrant> entrants{{forced[0].comm.get(), buffer.data(), 8},
                                              {forced[1].comm.get(), buffer.data()},
                                              {forced[2].comm.get(), buffer.data()}};
    runs[r] = comm::race(entrants, {8, 4096}, 3, std::chrono::microseconds(100), nullptr);
  });
  CHECK(first[0] == comm::Candidate::Mailbox);
  CHECK(first[1] == comm::Candidate::Mailbox);
  for (const auto& mine : runs) {
    REQUIRE(mine.size() == 2);
    REQUIRE(mine[0].size() == 3);
    for (std::size_t e = 0; e < 3; ++e) CHECK(mine[0][e].size() == 3);
    CHECK(mine[1][0].empty());
    CHECK(mine[1][1].size() == 3);
    CHECK(mine[1][2].size() == 3);
  }
  CHECK(runs[0] == runs[1]);  // the slowest rank's times, on both
}

TEST_CASE("race: a measurement holds 3 calls or more, alike on every rank, however long a call", "[comm][calibrate]") {
  const CommOptions base = on_shm();
  std::vector<int> shortest(2), longer(2);
  run_ranks(2, [&](int r) {
    CommOptions mine = base;
    mine.rank = r;
    mine.world_size = 2;
    const std::vector<comm::Forced> forced = comm::forced_communicators(mine, false, "fill");
    std::vector<float> buffer(1 << 16, 0.0f);
    Communicator& ring = *forced[1].comm;  // a schedule through the links
    // Every call outlasts a measurement of 1 us.
    shortest[r] = comm::calls_to_fill(ring, buffer.data(), buffer.size(), std::chrono::microseconds(1));
    longer[r] = comm::calls_to_fill(ring, buffer.data(), 1, std::chrono::microseconds(20'000));
  });
  CHECK(shortest[0] == 3);
  CHECK(shortest[1] == 3);
  CHECK(longer[0] == longer[1]);
  CHECK(longer[0] > 3);  // 20 ms of 4-byte sums: far more than the floor
}

TEST_CASE("calibrate: on symmetric memory each candidate has a buffer of its own, on private one for all",
          "[comm][calibrate]") {
  const CommOptions base = on_shm();
  // Per rank, per buffer kind: the candidates, their buffers' addresses.
  std::vector<std::vector<std::vector<comm::Candidate>>> candidates(2, std::vector<std::vector<comm::Candidate>>(2));
  std::vector<std::vector<std::vector<const void*>>> where(2, std::vector<std::vector<const void*>>(2));
  run_ranks(2, [&](int r) {
    CommOptions mine = base;
    mine.rank = r;
    mine.world_size = 2;
    for (const bool symmetric : {false, true}) {
      std::vector<comm::Forced> ways = comm::forced_communicators(mine, symmetric, symmetric ? "sym" : "private");
      const std::vector<std::shared_ptr<void>> buffers = comm::buffers_of(ways, 1 << 20);
      for (std::size_t w = 0; w < ways.size(); ++w) {
        candidates[r][symmetric].push_back(ways[w].candidate);
        where[r][symmetric].push_back(w < buffers.size() ? buffers[w].get() : nullptr);
        // Every byte of it can be written, and it starts zeroed.
        const std::size_t bytes = ways[w].candidate == comm::Candidate::Mailbox ? comm::Mailbox::capacity() : 1 << 20;
        auto* bytes_of = static_cast<unsigned char*>(buffers[w].get());
        if (bytes_of[0] != 0 || bytes_of[bytes - 1] != 0) throw std::runtime_error("a buffer not zeroed");
        bytes_of[bytes - 1] = 1;
        bytes_of[bytes - 1] = 0;
      }
    }
  });
  for (int r = 0; r < 2; ++r) {
    const auto& shared = where[r][0];
    REQUIRE(shared.size() == candidates[r][0].size());
    CHECK(std::count(shared.begin(), shared.end(), shared.front()) == static_cast<long>(shared.size()));
    CHECK(shared.front() != nullptr);
    const auto& own = where[r][1];
    REQUIRE(candidates[r][1].back() == comm::Candidate::Symmetric);
    REQUIRE(own.size() == candidates[r][1].size());
    for (std::size_t w = 0; w < own.size(); ++w) {
      CHECK(own[w] != nullptr);
      CHECK(std::count(own.begin(), own.end(), own[w]) == 1);
    }
  }
}

TEST_CASE("race: a measurement's calls spread over its slices, evenly and all of them", "[comm][calibrate]") {
  for (int calls = 0; calls <= 1000; ++calls) {
    int total = 0, least = calls, most = 0;
    for (int slice = 0; slice < comm::kRaceSlices; ++slice) {
      const int n = comm::calls_in_slice(calls, slice);
      total += n;
      least = std::min(least, n);
      most = std::max(most, n);
    }
    INFO(calls << " calls");
    CHECK(total == calls);
    CHECK(most - least <= 1);
  }
  // Fewer calls than slices: slices of one call, the rest empty.
  CHECK(comm::calls_in_slice(1, comm::kRaceSlices - 1) == 1);
  CHECK(comm::calls_in_slice(1, 0) == 0);
  CHECK(comm::calls_in_slice(1'000'000, 0) == 100'000);
}

TEST_CASE("calibrate: bad sizes are refused", "[comm][calibrate]") {
  comm::CalibrateOptions o;
  o.sizes = {8, 6};
  CommOptions base = on_shm();
  CHECK(error_of_call([&] { comm::calibrate(base, o); }).code() == ErrorCode::InvalidArgument);
  o.sizes = {};
  CHECK(error_of_call([&] { comm::calibrate(base, o); }).code() == ErrorCode::InvalidArgument);
}

TEST_CASE("tuning profile: rank 0's decides on every rank, and results stay right", "[comm][calibrate]") {
  const std::string path = temp_file(kProfile);
  const auto comms = make_comms(2, on_shm(), [&](int r, CommOptions& o) {
    o.tuning_file = r == 0 ? path : "/nonexistent/only-rank-0-is-read";
  });
  for (const auto& c : comms) {
    CHECK_THAT(c->tuning(), Contains("profile      " + path));
    CHECK_THAT(c->tuning(), Contains("mailbox from 0 B, doubling from 2 KiB, staged from 16 KiB"));
  }
  for (std::size_t count : {1u, 200u, 1000u, 4000u, 100000u}) {
    INFO(count);
    std::vector<std::size_t> wrong(2, 0);  // checked here, not on the rank threads
    run_ranks(2, [&](int r) {
      std::vector<float> v(count);
      for (std::size_t i = 0; i < count; ++i) v[i] = float(r + 1) * float(i % 7);
      comms[r]->all_reduce(v.data(), count, DataType::Float32, ReduceOp::Sum).wait();
      for (std::size_t i = 0; i < count; ++i) wrong[r] += v[i] != 3.0f * float(i % 7);
    });
    CHECK(wrong[0] == 0);
    CHECK(wrong[1] == 0);
  }
  std::remove(path.c_str());
}

TEST_CASE("tuning profile: a bad one fails every rank, naming it", "[comm][calibrate]") {
  const std::string bad = temp_file("kizuna-tuning 1\nsection world=2 nodes=1 local=2 transport=shm buffers=private\n"
                                    "candidates ring\n8 fast\nend\n");
  for (const std::string& path : {bad, std::string("/nonexistent/profile.txt")}) {
    INFO(path);
    CommOptions base = on_shm();
    std::vector<Error> errors(2, Error(ErrorCode::Internal, "no error"));
    run_ranks(2, [&](int r) {
      CommOptions mine = base;
      mine.rank = r;
      mine.world_size = 2;
      if (r == 0) mine.tuning_file = path;
      errors[r] = error_of_call([&] { Communicator::create(mine); });
    });
    for (const Error& e : errors) {
      CHECK(e.code() == ErrorCode::InvalidArgument);
      CHECK_THAT(e.what(), Contains("tuning profile " + path));
    }
    CHECK_THAT(errors[1].what(), Contains("rank 0's"));
  }
  std::remove(bad.c_str());
}

TEST_CASE("tuning profile: one with no section for this world is left aside", "[comm][calibrate]") {
  const std::string path = temp_file(kProfile);
  const auto comms = make_comms(3, on_shm(), [&](int, CommOptions& o) { o.tuning_file = path; });
  for (const auto& c : comms) CHECK(c->tuning().find("profile ") == std::string::npos);
  std::remove(path.c_str());
}

TEST_CASE("tuning profile: a small call on symmetric memory takes the symmetric table, run by its caller",
          "[comm][calibrate]") {
  // The tables part at 4 KiB (doubling for private buffers, ring for
  // symmetric ones), so calls there look their buffers up; a loop of them
  // waited for at once still runs in the caller (try_small, whose calls
  // share one history record), on the symmetric table's choice.
  const std::string path = temp_file(
      "kizuna-tuning 1\n"
      "section world=2 nodes=1 local=2 transport=shm buffers=private\n"
      "candidates mailbox ring doubling\n"
      "8 0.3 2 1\n"
      "4096 - 4 2\n"
      "end\n"
      "section world=2 nodes=1 local=2 transport=shm buffers=symmetric\n"
      "candidates mailbox ring doubling symmetric\n"
      "8 0.3 2 1 9\n"
      "4096 - 2 4 9\n"
      "end\n");
  CommOptions base = on_shm();
  base.tuning_file = path;
  const auto impls = impls_of_two(base);
  constexpr std::size_t kCount = 1024;  // 4 KiB of float32
  constexpr int kCalls = 50;
  // Catch's INFO and failing assertions are not safe on the rank threads:
  // each rank writes down what it saw, and the checks run on this thread.
  std::vector<std::string> wrong(2), reports(2);
  std::vector<std::size_t> symmetric_from(2);
  run_ranks(2, [&](int r) {
    Communicator c(impls[r]);
    symmetric_from[r] = impls[r]->tuning.symmetric_from;
    const std::shared_ptr<void> memory = c.allocate_symmetric(kCount * sizeof(float));
    auto* v = static_cast<float*>(memory.get());
    if (!memory) throw std::runtime_error("allocate_symmetric gave no memory");
    for (int k = 0; k < kCalls; ++k) {
      for (std::size_t i = 0; i < kCount; ++i) v[i] = float(r + 1) * float((i + k) % 5);
      c.all_reduce(v, kCount, DataType::Float32, ReduceOp::Sum).wait();
      for (std::size_t i = 0; i < kCount && wrong[r].empty(); ++i)
        if (v[i] != 3.0f * float((i + k) % 5))
          wrong[r] = "call " + std::to_string(k) + ", element " + std::to_string(i) + ": " + std::to_string(v[i]);
    }
    reports[r] = impls[r]->history.report(impls[r]->live, "");
  });
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << "\n" << reports[r]);
    CHECK(wrong[r].empty());
    CHECK(symmetric_from[r] > 8);
    CHECK(symmetric_from[r] <= 4096);
    CHECK_THAT(reports[r], Contains("all_reduce float32 x1024 (ring), "));
    CHECK_THAT(reports[r], Contains(" calls, the last: done"));
    CHECK(reports[r].find("(doubling)") == std::string::npos);
  }
  std::remove(path.c_str());
}

TEST_CASE("tuning profile: measured near and far, the table of the placement the ranks agree on decides",
          "[comm][calibrate]") {
  // Both sections take the staged route from 2896 B; below, the mailboxes
  // with the CPUs near and doubling with them far.
  const std::string path = temp_file(
      "kizuna-tuning 1\n"
      "section world=2 nodes=1 local=2 transport=shm buffers=private placement=near\n"
      "candidates mailbox ring doubling staged\n"
      "8 0.3 2 1 9\n"
      "1048576 - 90 90 10\n"
      "end\n"
      "section world=2 nodes=1 local=2 transport=shm buffers=private placement=far\n"
      "candidates mailbox ring doubling staged\n"
      "8 2 2 0.5 9\n"
      "1048576 - 90 90 10\n"
      "end\n");
  const bool near = GENERATE(true, false);
  const JudgedProbes judged(near);
  CommOptions base = on_shm();
  base.tuning_file = path;
  const auto impls = impls_of_two(base);
  std::vector<std::string> reports(2);
  std::vector<std::size_t> wrong(2, 0);
  run_ranks(2, [&](int r) {
    Communicator c(impls[r]);
    // Two staged calls probe (docs/tuning.md#probe-cadence): from the
    // third call on, every rank goes by rank 0's verdict of the first.
    std::vector<float> large(1 << 18);
    for (int k = 0; k < 2; ++k) {
      std::fill(large.begin(), large.end(), float(r + 1));
      c.all_reduce(large.data(), large.size(), DataType::Float32, ReduceOp::Sum).wait();
      wrong[r] += static_cast<std::size_t>(std::count_if(large.begin(), large.end(), [](float x) { return x != 3; }));
    }
    for (int k = 0; k < 20; ++k) {
      float small[2] = {float(r + 1), float(k)};
      c.all_reduce(small, 2, DataType::Float32, ReduceOp::Sum).wait();
      wrong[r] += (small[0] != 3) + (small[1] != 2.0f * float(k));
    }
    reports[r] = impls[r]->history.report(impls[r]->live, "");
  });
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << "\n" << reports[r]);
    CHECK(wrong[r] == 0);
    CHECK_THAT(reports[r], Contains("(symmetric, staged)"));
    CHECK_THAT(reports[r], Contains(near ? "all_reduce float32 x2 (mailbox)" : "all_reduce float32 x2 (doubling)"));
    CHECK(reports[r].find(near ? "(doubling)" : "(mailbox)") == std::string::npos);
    CHECK_THAT(impls[r]->tuning.describe(), Contains("measured with the CPUs near") &&
                                                Contains("measured with the CPUs far apart"));
  }
  std::remove(path.c_str());
}
