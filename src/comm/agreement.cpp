#include "comm/agreement.hpp"

#include <kizuna/error.hpp>

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/check.hpp"

namespace kizuna::comm {
namespace {

using Clock = std::chrono::steady_clock;

// How often a waiting survivor reads the round's keys again: a round ends
// within about this after the last survivor arrives.
constexpr std::chrono::milliseconds kPoll{10};

std::string text(const Bytes& b) { return std::string(b.begin(), b.end()); }
Bytes bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }

std::string list(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : " ") + std::to_string(r);
  return out;
}

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> out;
  std::istringstream in(s);
  int r;
  while (in >> r) out.push_back(r);
  return out;
}

// "<rank>:<suspect> <suspect>;" per arrival, in the order they came.
struct Arrivals {
  std::set<int> arrived;
  std::set<int> suspected;
};

Arrivals parse_arrivals(const std::string& s, int world) {
  Arrivals a;
  std::istringstream in(s);
  std::string entry;
  while (std::getline(in, entry, ';')) {
    const std::size_t colon = entry.find(':');
    if (colon == std::string::npos) continue;
    const int r = std::atoi(entry.substr(0, colon).c_str());
    if (r >= 0 && r < world) a.arrived.insert(r);
    for (int q : parse_list(entry.substr(colon + 1)))
      if (q >= 0 && q < world) a.suspected.insert(q);
  }
  return a;
}

}  // namespace

std::vector<int> agree_on_failed(Store& store, const ShrinkRound& round, Clock::time_point deadline) {
  const std::string arrived_key = round.base + "/arrived";
  const std::string decided_key = round.base + "/decided";
  std::string mine = std::to_string(round.rank) + ":";
  for (int q : round.suspects) mine += " " + std::to_string(q);
  store.append(arrived_key, bytes(mine + ";"));

  std::vector<int> failed;
  for (;;) {
    if (store.check({decided_key})) {
      failed = parse_list(text(store.get(decided_key, std::chrono::milliseconds(1000))));
      break;
    }
    Arrivals a = parse_arrivals(text(store.get(arrived_key, std::chrono::milliseconds(1000))), round.world);
    a.suspected.insert(round.suspects.begin(), round.suspects.end());
    std::vector<int> unknown, missing;
    for (int q = 0; q < round.world; ++q) {
      if (a.arrived.count(q)) continue;
      missing.push_back(q);
      if (!a.suspected.count(q) && !(round.gone && round.gone(q))) unknown.push_back(q);
    }
    if (unknown.empty()) {
      // The first proposal stands: every survivor adopts what is stored.
      failed = parse_list(text(store.compare_set(decided_key, {}, bytes(list(missing)))));
      break;
    }
    if (Clock::now() >= deadline) {
      std::vector<int> joined(a.arrived.begin(), a.arrived.end());
      KIZUNA_THROW(ErrorCode::Timeout, "shrink of ", round.comm_name, " on rank ", round.rank, ": rank(s) ",
                   list(unknown), " neither joined nor were seen to fail (joined: ", list(joined),
                   "); every survivor must call shrink()");
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(kPoll, deadline - Clock::now()));
  }
  if (std::find(failed.begin(), failed.end(), round.rank) != failed.end())
    KIZUNA_THROW(ErrorCode::Aborted, "shrink of ", round.comm_name, ": rank ", round.rank,
                 " is left out: the others had decided without it (failed: ", list(failed), ")");
  return failed;
}

bool process_gone(const PeerInfo& peer, const PeerInfo& self) {
  if (!same_node(peer, self) || peer.pidns != self.pidns || peer.pidns == "unknown" || peer.pid <= 0 ||
      peer.pid == self.pid)
    return false;
  std::ifstream stat("/proc/" + std::to_string(peer.pid) + "/stat");
  if (!stat) return true;
  // "pid (comm) S ...": the state follows the last ')'.
  std::string line;
  std::getline(stat, line);
  const std::size_t close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return false;
  const char state = line[close + 2];
  return state == 'Z' || state == 'X';
}

}  // namespace kizuna::comm
