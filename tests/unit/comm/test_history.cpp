// comm::History: the records of the stuck-rank report, written without
// locks by the thread running each call and read at any time.
#include <catch2/catch.hpp>

#include <atomic>
#include <string>
#include <thread>

#include "comm/history.hpp"

using namespace kizuna;
using kizuna::comm::History;
using kizuna::comm::LiveProgress;

namespace {

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("History: queued, running, done and failed calls, oldest first", "[history]") {
  History h;
  LiveProgress live;
  const auto a = h.queued(1, "all_reduce", DataType::Float32, 10, -1);
  const auto b = h.queued(2, "broadcast", DataType::Int64, 20, 3);
  const auto c = h.queued(0, "send to", DataType::UInt8, 30, 1);
  const auto d = h.queued(3, "all_gather", DataType::Float32, 40, -1);
  h.started(a, "ring", 6);
  h.ended(a, true);
  h.started(b, "tree", 4);
  h.ended(b, false);
  h.started(c, "", 1);
  live.step = 0;
  live.steps = 1;
  const std::string report = h.report(live, "head");
  INFO(report);
  CHECK(report.rfind("head", 0) == 0);
  CHECK(report.find("#1 all_reduce float32 x10 (ring): done in ") != std::string::npos);
  CHECK(report.find("#2 broadcast root 3 int64 x20 (tree): FAILED after ") != std::string::npos);
  CHECK(report.find("send to 1 uint8 x30: running, step 1 of 1") != std::string::npos);
  CHECK(report.find("#3 all_gather float32 x40: queued ") != std::string::npos);
  CHECK(report.find("#1 ") < report.find("#2 "));
  CHECK(report.find("#2 ") < report.find("#3 "));
  CHECK(h.last_completed_seq() == 1);
  CHECK(h.status_fields(live) == "call=send to step=1/1 last_done=1");
  (void)d;
}

TEST_CASE("History: a call recorded as running at once shows its algorithm, then its end", "[history]") {
  // running(): queued() and started() in one, as a small call run by its
  // caller records itself.
  History h;
  LiveProgress live;
  live.step = 0;
  live.steps = 1;
  const auto a = h.running(7, "all_reduce", DataType::Float32, 2, -1, "mailbox", 1, std::chrono::steady_clock::now());
  std::string report = h.report(live, "head");
  INFO(report);
  CHECK(report.find("#7 all_reduce float32 x2 (mailbox): running, step 1 of 1") != std::string::npos);
  CHECK(h.status_fields(live) == "call=all_reduce seq=7 algo=mailbox step=1/1 last_done=0");
  h.ended(a, true, std::chrono::steady_clock::now());
  report = h.report(live, "head");
  CHECK(report.find("#7 all_reduce float32 x2 (mailbox): done in ") != std::string::npos);
  CHECK(h.last_completed_seq() == 7);
}

TEST_CASE("History: a small call that repeats the newest record's is counted into it", "[history]") {
  History h;
  LiveProgress live;
  live.step = 0;
  live.steps = 1;
  const auto now = std::chrono::steady_clock::now();
  const auto first = h.running(5, "all_reduce", DataType::Float32, 2, -1, "mailbox", 1, now);
  h.ended(first, true, now);
  const auto second = h.running(6, "all_reduce", DataType::Float32, 2, -1, "mailbox", 1, now);
  CHECK(second == first);
  std::string report = h.report(live, "head");
  INFO(report);
  CHECK(report.find("#5..#6 all_reduce float32 x2 (mailbox), 2 calls, the last: running, step 1 of 1") !=
        std::string::npos);
  CHECK(h.last_completed_seq() == 5);
  CHECK(h.status_fields(live) == "call=all_reduce seq=6 algo=mailbox step=1/1 last_done=5");
  h.ended(second, true, now);
  CHECK(h.running(7, "all_reduce", DataType::Float32, 2, -1, "mailbox", 1, now) == first);
  h.ended(first, true, now);
  report = h.report(live, "head");
  CHECK(report.find("#5..#7 all_reduce float32 x2 (mailbox), 3 calls, the last: done in ") != std::string::npos);
  CHECK(count_of(report, "\n") == 1);
  CHECK(h.last_completed_seq() == 7);

  // Another count, a gap in the sequence, or a call after a failure: a record of its own.
  const auto other = h.running(8, "all_reduce", DataType::Float32, 3, -1, "mailbox", 1, now);
  CHECK(other != first);
  h.ended(other, true, now);
  const auto gap = h.running(10, "all_reduce", DataType::Float32, 3, -1, "mailbox", 1, now);
  CHECK(gap != other);
  h.ended(gap, false, now);
  const auto after_failure = h.running(11, "all_reduce", DataType::Float32, 3, -1, "mailbox", 1, now);
  CHECK(after_failure != gap);
  report = h.report(live, "head");
  CHECK(report.find("#8 all_reduce float32 x3 (mailbox): done in ") != std::string::npos);
  CHECK(report.find("#10 all_reduce float32 x3 (mailbox): FAILED after ") != std::string::npos);
  CHECK(report.find("#11 all_reduce float32 x3 (mailbox): running") != std::string::npos);
}

TEST_CASE("History: a record of several calls, overwritten while its last runs, leaves the one before done",
          "[history]") {
  History h;
  const auto now = std::chrono::steady_clock::now();
  const auto id = h.running(1, "all_reduce", DataType::Float32, 2, -1, "mailbox", 1, now);
  h.ended(id, true, now);
  CHECK(h.running(2, "all_reduce", DataType::Float32, 2, -1, "mailbox", 1, now) == id);
  for (std::uint64_t seq = 3; seq < 3 + History::kSize; ++seq) h.queued(seq, "broadcast", DataType::Int8, 1, 0);
  CHECK(h.last_completed_seq() == 1);
}

TEST_CASE("History: the last completed call outlives its record", "[history]") {
  History h;
  LiveProgress live;
  for (std::uint64_t seq = 1; seq <= 3 * History::kSize; ++seq) {
    const auto id = h.queued(seq, "all_reduce", DataType::Float32, 1, -1);
    h.started(id, "ring", 2);
    h.ended(id, true);
  }
  CHECK(h.last_completed_seq() == 3 * History::kSize);
  // kSize calls queued behind: every completed record is overwritten.
  for (std::uint64_t seq = 3 * History::kSize + 1; seq <= 4 * History::kSize; ++seq)
    h.queued(seq, "all_reduce", DataType::Float32, 1, -1);
  CHECK(h.last_completed_seq() == 3 * History::kSize);
  CHECK(count_of(h.report(live, ""), ": queued ") == History::kSize);
  CHECK(count_of(h.report(live, "", 5), "\n") == 5);
}

// Readers take no lock: a report taken while calls are recorded shows only
// whole records (each call's count is its seq here, its kind fixed).
TEST_CASE("History: reports read while calls are recorded show whole records", "[history]") {
  History h;
  LiveProgress live;
  std::atomic<bool> done{false}, reading{false};
  std::thread writer([&] {
    // Not before the reader is there: on a loaded machine the writer could
    // otherwise record all its calls before the reader reads once.
    while (!reading.load()) std::this_thread::yield();
    for (std::uint64_t seq = 1; seq <= 100'000; ++seq) {
      const auto id = h.queued(seq, "all_reduce", DataType::Float32, seq, -1);
      h.started(id, "ring", 2);
      h.ended(id, true);
    }
    done = true;
  });
  std::size_t reports = 0, torn = 0;
  reading = true;
  do {
    const std::string report = h.report(live, "");
    ++reports;
    for (std::size_t at = report.find("\n  #"); at != std::string::npos; at = report.find("\n  #", at + 1)) {
      const std::size_t end = report.find('\n', at + 1);
      const std::string line = report.substr(at + 4, end == std::string::npos ? std::string::npos : end - at - 4);
      const std::string seq = line.substr(0, line.find(' '));
      if (line.find(" all_reduce float32 x" + seq + " ") == std::string::npos &&
          line.find(" all_reduce float32 x" + seq + ":") == std::string::npos)
        ++torn;
    }
  } while (!done.load());
  writer.join();
  CHECK(reports > 0);
  CHECK(torn == 0);
  CHECK(h.last_completed_seq() == 100'000);
}
