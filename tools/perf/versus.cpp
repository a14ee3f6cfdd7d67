#include "versus.hpp"

#include <kizuna/comm.hpp>
#include <kizuna/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>

#include "comm/calibrate.hpp"
#include "comm/comm_impl.hpp"
#include "comm/mailbox.hpp"
#include "core/median.hpp"
#include "data.hpp"

namespace kizuna::perf {
namespace {

struct Contender {
  std::string name;
  std::shared_ptr<Communicator> comm;
  std::shared_ptr<Communicator::Impl> impl;  // auto's and the rules': what they take
  std::shared_ptr<void> memory;  // its buffer, where it has one of its own
  float* buffer = nullptr;
  std::uint64_t upto = UINT64_MAX;
};

// The wrong elements of one in-place sum of `count` closed-form inputs on
// `c`; leaves the buffer zeroed for the race.
std::uint64_t check(Contender& c, const ClosedForm& data, std::size_t count) {
  const int rank = c.comm->rank();
  data.input(rank, 0, count, c.buffer);
  c.comm->all_reduce(c.buffer, c.buffer, count, DataType::Float32, ReduceOp::Sum).wait();
  std::string first;
  const std::uint64_t wrong = data.wrong_reduced(c.buffer, 0, count, &first);
  if (wrong)
    std::fprintf(stderr, "kizuna-perf --versus: rank %d: %s at %zu B: %llu wrong, first at %s\n", rank,
                 c.name.c_str(), count * 4, static_cast<unsigned long long>(wrong), first.c_str());
  std::memset(c.buffer, 0, count * 4);
  return wrong;
}

std::string write_json(const VersusArgs& a, int world, std::int64_t wrong, const std::vector<Contender>& contenders,
                       const std::vector<std::vector<std::vector<double>>>& runs,
                       const std::vector<std::string>& placements) {
  std::ofstream out(a.json, std::ios::trunc);
  out << "{\"world\": " << world << ", \"transport\": \"" << a.transport << "\", \"buffers\": \""
      << (a.symmetric ? "symmetric" : "private") << "\", \"rounds\": " << a.rounds << ", \"wrong\": " << wrong
      << ",\n \"sizes\": [";
  for (std::size_t i = 0; i < a.sizes.size(); ++i) out << (i ? ", " : "") << a.sizes[i];
  out << "],\n \"contenders\": {";
  char number[32];
  for (std::size_t w = 0; w < contenders.size(); ++w) {
    out << (w ? ",\n  " : "\n  ") << '"' << contenders[w].name << "\": [";
    for (std::size_t i = 0; i < a.sizes.size(); ++i) {
      out << (i ? ", " : "") << '[';
      for (std::size_t k = 0; k < runs[i][w].size(); ++k) {
        std::snprintf(number, sizeof number, "%.4g", runs[i][w][k]);
        out << (k ? ", " : "") << number;
      }
      out << ']';
    }
    out << ']';
  }
  out << "},\n \"took\": {";
  bool first = true;
  for (const Contender& c : contenders) {
    if (!c.impl) continue;
    out << (first ? "\n  " : ",\n  ") << '"' << c.name << "\": [";
    first = false;
    for (std::size_t i = 0; i < a.sizes.size(); ++i)
      out << (i ? ", " : "") << '"' << comm::name(comm::taken(*c.impl, a.sizes[i], a.symmetric)) << '"';
    out << ']';
  }
  out << "},\n \"placement\": [";
  for (std::size_t k = 0; k < placements.size(); ++k) out << (k ? ", " : "") << '"' << placements[k] << '"';
  out << "]}\n";
  out.close();
  return out ? "" : "cannot write " + a.json;
}

}  // namespace

int run_versus(const CommOptions& base, const VersusArgs& a) {
  if (std::getenv("KIZUNA_TUNING_FILE") && *std::getenv("KIZUNA_TUNING_FILE"))
    throw Error(ErrorCode::InvalidArgument,
                "--versus: KIZUNA_TUNING_FILE is set, so \"rules\" would not be auto without a profile; unset it "
                "(--versus names the profile auto loads)");
  // The forced candidates first: their communicators tell what applies here.
  std::vector<comm::Forced> forced = comm::forced_communicators(base, a.symmetric, "versus");
  const std::uint64_t largest = a.sizes.back();
  // The forced candidates' buffers, as calibrate() has them.
  const std::vector<std::shared_ptr<void>> buffers = comm::buffers_of(forced, largest);
  const bool symmetric = a.symmetric && forced.back().candidate == comm::Candidate::Symmetric;

  std::vector<Contender> contenders;
  for (const char* name : {"auto", "rules"}) {
    CommOptions o = base;
    o.name = (base.name.empty() ? std::string("kizuna") : base.name) + "/versus/" + name;
    if (std::string(name) == "auto") o.tuning_file = a.profile;
    Contender c;
    c.name = name;
    c.impl = Communicator::Impl::create(o);
    c.comm = std::make_shared<Communicator>(c.impl);
    // Auto's own symmetric memory: symmetric memory of another
    // communicator is ordinary memory to it. Private buffers: the forced
    // candidates' one, so that no contender's figures differ by where its
    // pages happen to lie.
    c.memory = symmetric ? c.comm->allocate_symmetric(largest) : buffers.front();
    c.buffer = static_cast<float*>(c.memory.get());
    contenders.push_back(std::move(c));
  }
  for (std::size_t w = 0; w < forced.size(); ++w)
    contenders.push_back({std::string(comm::name(forced[w].candidate)), forced[w].comm, nullptr, nullptr,
                          static_cast<float*>(buffers[w].get()),
                          forced[w].candidate == comm::Candidate::Mailbox ? comm::Mailbox::capacity() : UINT64_MAX});
  Communicator& first = *contenders.front().comm;
  const bool printing = first.rank() == 0;
  if (printing) {
    std::printf("# kizuna-perf --versus %s: all-reduce, float32, sum, in place, %zu sizes, %s buffers, medians of "
                "%d rounds; contenders:",
                a.profile.c_str(), a.sizes.size(), symmetric ? "symmetric" : "private", a.rounds);
    for (const Contender& c : contenders) std::printf(" %s", c.name.c_str());
    std::printf("\n");
    std::fflush(stdout);
  }

  const ClosedForm data(DataType::Float32, ReduceOp::Sum, first.size());
  std::int64_t wrong = 0;
  for (Contender& c : contenders)
    for (std::uint64_t bytes : a.sizes)
      if (bytes <= c.upto) wrong += static_cast<std::int64_t>(check(c, data, bytes / 4));
  first.all_reduce(&wrong, 1, DataType::Int64, ReduceOp::Sum).wait();

  std::vector<comm::Entrant> entrants;
  for (const Contender& c : contenders) entrants.push_back({c.comm.get(), c.buffer, c.upto});
  // Where the CPUs were, round by round (as calibrate() records it for the
  // profile).
  std::vector<std::string> placements;
  auto placement_seen = [&]() -> std::string {
    const comm::Placement p = comm::agreed_placement(forced);
    placements.emplace_back(comm::name(p));
    return p == comm::Placement::Unknown ? "" : "CPUs " + placements.back();
  };
  const auto runs = comm::race(
      entrants, a.sizes, a.rounds, a.per_measurement,
      [](const std::string& line) {
        std::printf("#   %s\n", line.c_str());
        std::fflush(stdout);
      },
      placement_seen);
  if (printing) {
    std::printf("# %10s", "size (B)");
    for (const Contender& c : contenders) std::printf(" %10s", c.name.c_str());
    std::printf("   (us, median of rounds)\n");
    for (std::size_t i = 0; i < a.sizes.size(); ++i) {
      std::printf("  %10llu", static_cast<unsigned long long>(a.sizes[i]));
      for (std::size_t w = 0; w < contenders.size(); ++w)
        if (runs[i][w].empty()) std::printf(" %10s", "-");
        else std::printf(" %10.4g", core::median(runs[i][w]));
      std::printf("\n");
    }
    std::printf("# wrong elements: %lld\n", static_cast<long long>(wrong));
  }
  std::string failure = printing && !a.json.empty() ? write_json(a, first.size(), wrong, contenders, runs, placements) : "";
  std::int64_t failed = failure.empty() ? 0 : 1;
  first.all_reduce(&failed, 1, DataType::Int64, ReduceOp::Max).wait();
  if (printing && !failure.empty()) std::fprintf(stderr, "kizuna-perf --versus: %s\n", failure.c_str());
  return failed || wrong ? 1 : 0;
}

}  // namespace kizuna::perf
