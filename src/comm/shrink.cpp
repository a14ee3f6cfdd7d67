// Communicator::shrink (kizuna/comm.hpp): the survivors agree on the
// failed ranks (comm/agreement.hpp), then create a communicator of the
// others, numbered in the old order, through the same store, and commit
// to it together (Communicator::set_up, setup.cpp). A rank that dies
// meanwhile ends that attempt on every survivor: a survivor of its node
// sees its process gone and publishes it under the new communicator's
// "failed" key, which set-up and the commit watch
// (comm/death_watch.hpp); a member whose
// set-up fails publishes why there too. The survivors then agree again,
// with that rank known failed, until the set-up deadline
// (CommOptions.setup_timeout, else KIZUNA_STORE_TIMEOUT) from the call.
// One that dies after the commit fails a later call on the new
// communicator, which is shrunk in turn.
#include <kizuna/comm.hpp>
#include <kizuna/store.hpp>

#include <algorithm>
#include <set>
#include <thread>

#include "comm/agreement.hpp"
#include "comm/death_watch.hpp"
#include "comm/comm_impl.hpp"
#include "core/check.hpp"
#include "core/log.hpp"

namespace kizuna {
namespace {

using Clock = std::chrono::steady_clock;

std::string list(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : " ") + std::to_string(r);
  return out.empty() ? "none" : out;
}

}  // namespace

std::shared_ptr<Communicator> Communicator::shrink() {
  Impl& impl = *impl_;
  const auto start = Clock::now();
  const auto setup = Impl::setup_timeout(impl.options);
  const auto deadline = start + setup;
  const int id = impl.shrink_count++;
  // The old communicator ends here: whatever is still pending on it fails.
  if (!impl.broken.load()) abort("shrink() called");

  std::set<int> suspects;
  if (const int lost = impl.lost_rank.load(); lost >= 0) suspects.insert(lost);
  const std::vector<comm::PeerInfo>& peers = impl.topology.peers;
  const auto gone = [&peers, self = peers.at(impl.rank)](int r) { return comm::process_gone(peers.at(r), self); };
  Store& store = *impl.options.store;

  std::string why;
  for (int attempt = 0; attempt < impl.world && Clock::now() < deadline; ++attempt) {
    comm::ShrinkRound round;
    round.base = impl.name + "/shrink" + std::to_string(id) + "." + std::to_string(attempt);
    round.comm_name = impl.name;
    round.rank = impl.rank;
    round.world = impl.world;
    round.suspects = suspects;
    round.gone = gone;
    std::vector<int> failed;
    try {
      failed = comm::agree_on_failed(store, round, deadline);
    } catch (const Error& e) {
      throw Error(e.code(), std::string(e.what()) + (why.empty() ? "" : "; the attempt before: " + why));
    }
    std::vector<int> members;
    for (int r = 0; r < impl.world; ++r)
      if (!std::binary_search(failed.begin(), failed.end(), r)) members.push_back(r);

    CommOptions options = impl.options;
    options.name = round.base + "/comm";
    options.world_size = static_cast<int>(members.size());
    options.rank = static_cast<int>(std::find(members.begin(), members.end(), impl.rank) - members.begin());
    options.timeout = impl.tuning.timeout;
    options.setup_timeout = comm::time_left(deadline);
    std::vector<comm::DeathWatch::Watched> watched;
    for (std::size_t i = 0; i < members.size(); ++i)
      watched.push_back({peers.at(members[i]), "rank " + std::to_string(i) + " of " + options.name + " (rank " +
                                                   std::to_string(members[i]) + " before the shrink)"});
    comm::DeathWatch watch(store, options.name + "/failed", std::move(watched),
                           "while the shrunk communicator was set up");
    std::shared_ptr<Communicator> shrunk;
    why.clear();
    try {
      shrunk = set_up(options, deadline);  // a failure here is every member's at once
      shrunk->impl_->group = impl.group;
    } catch (const Error& e) {
      why = e.what();
    }
    if (why.empty()) {
      KIZUNA_LOG(Info) << "shrunk " << impl.name << " to " << shrunk->name() << ": rank " << impl.rank << " of "
                       << impl.world << " is rank " << shrunk->rank() << " of " << shrunk->size() << " (failed: "
                       << list(failed) << ") in "
                       << std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count()
                       << " ms";
      return shrunk;
    }
    if (const int i = watch.dead(); i >= 0) suspects.insert(members[i]);
    KIZUNA_LOG(Warn) << "shrink of " << impl.name << ", attempt " << attempt + 1 << " (failed: " << list(failed)
                     << ") did not hold, trying again: " << why;
  }
  KIZUNA_THROW(ErrorCode::Timeout, "shrink of ", impl.name, " on rank ", impl.rank, " found no group that held within ",
               setup.count(), " ms: ", why.empty() ? "no attempt finished" : why);
}

}  // namespace kizuna
