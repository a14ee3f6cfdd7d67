// Communicator::grow and Communicator::join (kizuna/comm.hpp): new
// processes join a running group at a step boundary the group chooses.
//
// Keys under "<group>/join/", the group being the name of the communicator
// the job first created, which shrink() and grow() hand down (a fresh
// process's first communicator of the same store has that name too):
//   tickets      a counter: each joiner takes the next number t (from 1)
//   <t>          the joiner's process (host, boot id, namespaces, pid)
//   <t>/admit    "<name> <world> <rank>": the communicator it is admitted to
//   admitted     how many tickets the group has admitted, in order
// grow() is collective over the members. Their rank 0 reads the two
// counters and broadcasts, through the communicator, how many joiners it
// admits and the new communicator's number; with none every member returns
// nullptr at once (one small broadcast, so a trainer may ask every step).
// Otherwise rank 0 writes each admitted joiner's entry, and the members,
// keeping their ranks, and the joiners, numbered after them in ticket
// order, create "<group>/grow<g>" and commit to it together
// (comm/death_watch.hpp). A joiner whose process dies meanwhile ends that
// set-up on every member at once (seen on its node); grow() then throws
// and this communicator stays usable.
#include <kizuna/comm.hpp>
#include <kizuna/store.hpp>

#include <algorithm>
#include <climits>
#include <sstream>

#include "comm/bootstrap.hpp"
#include "comm/comm_impl.hpp"
#include "comm/death_watch.hpp"
#include "core/check.hpp"
#include "core/env.hpp"
#include "core/log.hpp"

namespace kizuna {
namespace {

using Clock = std::chrono::steady_clock;

std::string text(const Bytes& b) { return std::string(b.begin(), b.end()); }
Bytes bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }

}  // namespace

std::shared_ptr<Communicator> Communicator::grow(int most) {
  KIZUNA_CHECK_ARG(most >= 0, "grow: most is ", most, "; it must be 0 or more");
  Impl& impl = *impl_;
  if (impl.broken.load()) impl.throw_unusable();
  Store& store = *impl.options.store;
  const std::string base = impl.group + "/join/";
  // {joiners admitted, the first one's ticket, the new communicator's number}
  std::int64_t plan[3] = {0, 0, 0};
  if (impl.rank == 0) {
    const std::int64_t tickets = store.add(base + "tickets", 0);
    const std::int64_t admitted = store.add(base + "admitted", 0);
    plan[0] = std::min<std::int64_t>(std::max<std::int64_t>(tickets - admitted, 0), most);
    plan[1] = admitted + 1;
    if (plan[0] > 0) plan[2] = store.add(impl.group + "/generation", 1);
  }
  broadcast(plan, 3, DataType::Int64, 0).wait();
  if (plan[0] == 0) return nullptr;
  const auto start = Clock::now();
  const auto deadline = start + Impl::setup_timeout(impl.options);

  CommOptions options = impl.options;
  options.name = impl.group + "/grow" + std::to_string(plan[2]);
  options.world_size = impl.world + static_cast<int>(plan[0]);
  options.rank = impl.rank;
  options.timeout = impl.tuning.timeout;
  std::vector<comm::DeathWatch::Watched> joiners;
  for (std::int64_t k = 0; k < plan[0]; ++k) {
    const std::string ticket = base + std::to_string(plan[1] + k);
    const int rank = impl.world + static_cast<int>(k);
    if (impl.rank == 0)
      store.set(ticket + "/admit",
                bytes(options.name + " " + std::to_string(options.world_size) + " " + std::to_string(rank)));
    joiners.push_back({comm::decode_process(text(store.get(ticket, comm::time_left(deadline)))),
                       "rank " + std::to_string(rank) + " of " + options.name + " (joining)"});
  }
  if (impl.rank == 0) store.add(base + "admitted", plan[0]);
  options.setup_timeout = comm::time_left(deadline);
  std::shared_ptr<Communicator> grown;
  {
    comm::DeathWatch watch(store, options.name + "/failed", std::move(joiners),
                           "while the grown communicator was set up");
    grown = set_up(options, deadline);
  }
  grown->impl_->group = impl.group;
  KIZUNA_LOG(Info) << "grew " << impl.name << " to " << grown->name() << ": " << impl.world << " -> "
                   << grown->size() << " ranks in "
                   << std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count() << " ms";
  return grown;
}

std::shared_ptr<Communicator> Communicator::join(const CommOptions& options) {
  KIZUNA_CHECK_ARG(options.store != nullptr, "CommOptions.store is null");
  Store& store = *options.store;
  const std::string group = options.name.empty() ? Impl::default_name(&store) : options.name;
  const auto setup = Impl::setup_timeout(options);
  const auto deadline = Clock::now() + setup;
  const std::string base = group + "/join/";
  const std::int64_t ticket = store.add(base + "tickets", 1);
  const std::string key = base + std::to_string(ticket);
  store.set(key, bytes(comm::encode_process(comm::this_process())));
  Bytes admit;
  try {
    admit = store.get(key + "/admit", comm::time_left(deadline));
  } catch (const Error& e) {
    if (e.code() != ErrorCode::Timeout) throw;
    KIZUNA_THROW(ErrorCode::Timeout, "join ", group, ": no member admitted this process (ticket ", ticket,
                 ") within ", setup.count(), " ms; the group's ranks must call grow()");
  }
  std::string name;
  int world = 0, rank = -1;
  std::istringstream in(text(admit));
  in >> name >> world >> rank;
  if (!in || world < 1 || rank < 0 || rank >= world)
    KIZUNA_THROW(ErrorCode::Mismatch, "join ", group, ": the admission kizuna cannot read: '", text(admit), "'");
  CommOptions mine = options;
  mine.name = name;
  mine.world_size = world;
  mine.rank = rank;
  mine.setup_timeout = comm::time_left(deadline);
  std::shared_ptr<Communicator> joined = set_up(mine, deadline);
  joined->impl_->group = group;
  return joined;
}

}  // namespace kizuna
