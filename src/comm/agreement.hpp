// comm/agreement.hpp: the survivors of a communicator agree, through its
// store, on which ranks failed (Communicator::shrink, after ULFM's
// MPIX_Comm_shrink).
//
// Every survivor appends "<rank>:<suspects>" to one key of the round
// ("<base>/arrived"), its suspects being the ranks it saw lost (a
// connection that closed without an abort notice). A rank is then in one
// of three states for each survivor: arrived (alive, whatever anyone
// suspected), known failed (suspected by an arrived survivor, or a
// process of this node and PID namespace that no longer runs), or
// unknown. While some rank is unknown the survivors wait; once none is,
// the first survivor to see it writes the failed set, every rank that had
// not arrived, under "<base>/decided" (compare-and-set: the first write
// wins, so every survivor takes the same set). A survivor that finds
// itself in the decided set came too late and is told so. A rank that
// stays unknown until the deadline (alive but not calling shrink, or dead
// where nobody could see it) ends the round with a Timeout naming it.
#pragma once

#include <kizuna/store.hpp>

#include <chrono>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "comm/bootstrap.hpp"

namespace kizuna::comm {

struct ShrinkRound {
  std::string base;       // the round's keys live under "<base>/"
  std::string comm_name;  // for messages
  int rank = 0;
  int world = 1;
  std::set<int> suspects;  // ranks this survivor saw lost
  // Whether rank r is known to be gone without asking anyone (may be empty).
  std::function<bool(int)> gone;
};

// The failed set (sorted), the same on every survivor of the round.
// Throws Timeout at `deadline` naming the ranks still unknown, Aborted when
// this rank is in the decided set, and the store's error when it fails.
std::vector<int> agree_on_failed(Store& store, const ShrinkRound& round,
                                 std::chrono::steady_clock::time_point deadline);

// Whether the process `peer` describes has ended (or is a zombie), judged
// from this process `self`: only a process of the same node and PID
// namespace can be judged; false for any other, and for this process.
bool process_gone(const PeerInfo& peer, const PeerInfo& self);

}  // namespace kizuna::comm
