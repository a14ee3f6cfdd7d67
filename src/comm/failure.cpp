// A failed call: the communicator becomes unusable, every peer is told
// why, a timeout names the rank that is stuck, and what is queued fails.
#include <algorithm>
#include <sstream>

#include "comm/comm_impl.hpp"
#include "core/log.hpp"

namespace kizuna {

std::string Communicator::Impl::report(std::size_t limit) const {
  return "kizuna: rank " + std::to_string(rank) + " of " + name + " (" + std::to_string(world) +
         " ranks), recent calls, oldest first:" + history.report(live, "", limit);
}

void Communicator::Impl::throw_unusable() const {
  std::lock_guard lock(error_mutex);
  try {
    std::rethrow_exception(fatal);
  } catch (const Error& e) {
    KIZUNA_THROW(ErrorCode::Aborted, "communicator ", name, " on rank ", rank,
                 " is unusable after an earlier error (create a new one): ", e.what());
  }
}

// A timeout names the rank this one waited for, but that rank may be
// waiting itself. Every rank that times out records in the store whom it
// waits for; following those records from our awaited rank leads to the
// rank that did not report: the one that is stuck (stopped, hung in user
// code). Each hop waits at most a short grace for its record, since the
// other ranks time out at about the same moment. Records are per rank, not
// per collective: ranks stuck behind one another may be one collective
// apart, and a communicator times out only once.
Error Communicator::Impl::explain_timeout(const Error& e, std::uint64_t seq) {
  const int awaited = live.awaiting.load();
  if (awaited < 0 || awaited >= world) return e;
  try {
    const auto grace = std::clamp(tuning.timeout / 10, std::chrono::milliseconds(100), std::chrono::milliseconds(1000));
    const std::string base = name + "/stuck/";
    // The store itself may be what is stuck (its host stopped, or this rank
    // cut off from it), and set() would wait KIZUNA_STORE_TIMEOUT. First
    // read back this rank's bootstrap record, which exists: a live store
    // answers at once; one that does not answer within the grace fails the
    // read and breaks the connection, so the Timeout is raised without the
    // report.
    options.store->get(name + "/peer/" + std::to_string(rank), grace);
    options.store->set(base + std::to_string(rank), std::to_string(awaited) + " " +
                                                        std::to_string(executor->last_seq_from(awaited)) + " " +
                                                        std::to_string(seq));
    std::ostringstream chain;
    std::vector<bool> seen(world, false);
    seen[rank] = true;
    int current = awaited;
    for (int hop = 0; hop < world && !seen[current]; ++hop) {
      seen[current] = true;
      Bytes entry;
      try {
        entry = options.store->get(base + std::to_string(current), grace);
      } catch (const Error& missing) {
        if (missing.code() != ErrorCode::Timeout) throw;
        chain << "; rank " << current << " has not reported: it is the one stuck";
        break;
      }
      int next = -1;
      std::uint64_t last = 0, in = 0;
      std::istringstream(std::string(entry.begin(), entry.end())) >> next >> last >> in;
      if (next < 0 || next >= world) break;
      chain << "; rank " << current << " waits for rank " << next << " in #" << in
            << " (its last message from it was in #" << last << ")";
      current = next;
    }
    // The others timed out at about the same moment and may still be
    // reading records; a store this process hosts must outlive that.
    keep_store_until.store((Clock::now() + 2 * grace).time_since_epoch().count());
    return Error(e.code(), std::string(e.what()) + chain.str());
  } catch (const std::exception& store_error) {
    // the store itself is gone: report what we know locally
    return Error(e.code(), std::string(e.what()) + "; no stuck-rank report, the store failed: " + store_error.what());
  }
}

// Marks the communicator unusable and tells every peer why, so that ranks
// not talking to the one that failed also fail at once, with the reason.
void Communicator::Impl::fail(const Error& e) {
  {
    // Under the lock: a thread that sees `broken` and takes the lock to
    // rethrow `fatal` must find it set.
    std::lock_guard lock(error_mutex);
    if (broken.exchange(true)) return;
    fatal = std::make_exception_ptr(e);
  }
  KIZUNA_LOG(Error) << e.what();
  // Sends and receives pending on the unusable communicator end with it.
  if (p2p) p2p->fail_all(std::make_exception_ptr(e));
  // The stuck-rank report: where this rank is, for the job's post-mortem
  // (kizuna-run gathers these lines).
  if (e.code() == ErrorCode::Timeout) {
    KIZUNA_LOG(Error) << report(4);
  }
  // The same, one machine-read line (kizuna-run's failure table reads it).
  std::string comm_field = name;
  std::replace(comm_field.begin(), comm_field.end(), ' ', '_');
  KIZUNA_LOG(Error) << kStatusMarker << " rank=" << rank << " world=" << world << " comm=" << comm_field << " "
                    << history.status_fields(live) << " error=" << kizuna::name(e.code());
  // Which path failed: symmetric memory's, the mailboxes', or the executor's.
  const bool on_symmetric = symmetric && (symmetric->failed_peer() >= 0 || symmetric->cause());
  const bool on_mailbox = mailbox && (mailbox->failed_peer() >= 0 || mailbox->cause());
  const int lost = on_symmetric ? symmetric->failed_peer()
                   : on_mailbox ? mailbox->failed_peer()
                   : executor   ? executor->failed_peer()
                                : -1;
  const transport::AbortNotice* cause = on_symmetric ? symmetric->cause()
                                        : on_mailbox ? mailbox->cause()
                                        : executor   ? executor->cause()
                                                     : nullptr;
  // Pass a peer's notice on unchanged (its origin saw the root cause);
  // otherwise this rank is the origin. Every live peer is told, the one
  // whose message did not match or that kept us waiting included; only a
  // lost rank is not.
  transport::AbortNotice notice{rank, e.code() == ErrorCode::PeerLost ? lost : -1, e.code(), e.what()};
  if (cause) notice = *cause;
  if (notice.lost_rank >= 0) lost_rank.store(notice.lost_rank);
  const auto deadline = Clock::now() + tuning.abort_grace;
  for (auto& link : links) {
    if (!link || link->peer() == notice.lost_rank || link->peer() == notice.origin) continue;
    // A peer whose end has closed has died or failed already: flushing
    // what is still queued for it would only wait out the grace (two ranks
    // lost at once cost the survivors it: docs/reliability.md#shrinking).
    if (link->peer_closed()) continue;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    link->send_abort(notice, std::max(left, std::chrono::milliseconds(1)));
  }
}

void Communicator::Impl::fail_queued(const std::exception_ptr& error) {
  std::deque<std::shared_ptr<comm::Task>> dropped;
  {
    std::lock_guard lock(queue_mutex);
    dropped.swap(queue);
  }
  for (auto& task : dropped) {
    if (task->staged) task->staged->release(task->part, error);
    else task->work->finish(error);
  }
}

// With device calls in flight and no host call running: a peer whose
// connection closed has died, and the kernels waiting for it would only
// see their deadline. Fail the communicator with PeerLost naming it, and
// stop the kernels; their Works end with that error.
void Communicator::Impl::watch_peers() {
  if (holding_exec == this) return;
  std::unique_lock exec(exec_mutex, std::try_to_lock);
  if (!exec || broken.load()) return;
  for (auto& link : links) {
    if (!link || !link->peer_closed()) continue;
    const Error e(ErrorCode::PeerLost, "lost rank " + std::to_string(link->peer()) + " of " + name +
                                           ": its connection closed while device collectives were in flight "
                                           "on rank " + std::to_string(rank));
    {
      std::lock_guard lock(error_mutex);
      if (broken.exchange(true)) return;
      fatal = std::make_exception_ptr(e);
    }
    lost_rank.store(link->peer());
    KIZUNA_LOG(Error) << e.what();
    device->abort();
    return;
  }
}

}  // namespace kizuna
