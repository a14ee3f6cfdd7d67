#include "run/blame.hpp"

#include <algorithm>
#include <regex>
#include <set>

namespace kizuna::run {
namespace {

// The other ranks a failure's output names as the reason: "lost rank N",
// and the rank its status line was waiting for.
std::set<int> named(const Failed& f) {
  static const std::regex lost(R"(lost rank ([0-9]+))");
  std::set<int> out;
  for (const std::string& line : f.lines)
    for (std::sregex_iterator it(line.begin(), line.end(), lost), end; it != end; ++it)
      out.insert(std::stoi((*it)[1]));
  if (const auto it = f.status.find("waiting_for"); it != f.status.end()) {
    static const std::regex number(R"([0-9]+)");
    for (std::sregex_iterator m(it->second.begin(), it->second.end(), number), end; m != end; ++m)
      out.insert(std::stoi(m->str()));
  }
  out.erase(f.rank);
  return out;
}

std::string ranks_text(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i)
    out += (i == 0 ? "" : i + 1 == ranks.size() ? " and " : ", ") + std::to_string(ranks[i]);
  return out;
}

}  // namespace

Blame blame(const std::vector<Failed>& failures) {
  std::vector<std::set<int>> names;
  for (const Failed& f : failures) names.push_back(named(f));
  Blame b;
  for (std::size_t i = 0; i < failures.size(); ++i)
    if (names[i].empty()) {
      b.rank = failures[i].rank;
      b.failed = true;
      b.how = failures[i].how;
      break;
    }
  if (b.rank < 0) {
    // Every failure names another rank: the one named most (the lowest on a
    // tie), among those that are no consequence themselves.
    std::set<int> consequences;
    for (std::size_t i = 0; i < failures.size(); ++i)
      if (!names[i].empty()) consequences.insert(failures[i].rank);
    std::map<int, int> votes;
    for (const auto& n : names)
      for (int r : n)
        if (!consequences.count(r)) ++votes[r];
    int best = -1;
    for (const auto& [r, v] : votes)
      if (best < 0 || v > votes[best]) best = r;
    b.rank = best;
    for (const Failed& f : failures)
      if (f.rank == best) {
        b.failed = true;
        b.how = f.how;
      }
    if (b.rank < 0) {  // nothing named at all: the first reaped
      b.rank = failures[0].rank;
      b.failed = true;
      b.how = failures[0].how;
    }
  }
  for (const Failed& f : failures)
    if (f.rank != b.rank) b.then.push_back(f.rank);
  std::sort(b.then.begin(), b.then.end());
  return b;
}

std::string describe(const Blame& b, const std::string& where) {
  std::string out = "rank " + std::to_string(b.rank) + where + " ";
  if (b.failed) {
    out += b.how;
    if (!b.then.empty()) out += "; " + ranks_text(b.then) + " then failed";
  } else {
    out += "stopped answering; " + ranks_text(b.then) + " then failed";
  }
  return out;
}

}  // namespace kizuna::run
