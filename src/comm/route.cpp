#include "comm/route.hpp"

namespace kizuna::comm {

std::string_view name(Route route) {
  switch (route) {
    case Route::Mailbox: return "mailbox";
    case Route::Schedule: return "schedule";
    case Route::Symmetric: return "symmetric";
    case Route::Staged: return "symmetric, staged";
    case Route::PointToPoint: return "point-to-point";
    case Route::DeviceDirect: return "device, direct";
    case Route::DeviceStaged: return "device, staged";
  }
  return "?";
}

Route choose_route(const CallShape& call, Buffers buffers, Placement placement, const Paths& paths,
                   const Tuning& tuning) {
  if (call.kind != CallKind::Collective) return buffers == Buffers::Device ? Route::DeviceStaged : Route::PointToPoint;
  if (buffers == Buffers::Device) return paths.device_direct ? Route::DeviceDirect : Route::DeviceStaged;
  // A forced algorithm runs as forced, through the links.
  if (tuning.algorithm != Algorithm::Auto) return Route::Schedule;
  const bool mailbox = paths.mailbox && tuning.mailbox_upto > 0;
  if (call.collective == algo::Collective::Barrier) return mailbox ? Route::Mailbox : Route::Schedule;
  if (call.collective != algo::Collective::AllReduce) return Route::Schedule;
  // docs/tuning.md#symmetric-from
  if (buffers == Buffers::Symmetric && call.bytes >= tuning.symmetric_from) return Route::Symmetric;
  // docs/tuning.md#staged-from; a device call's parts are staged already.
  if (buffers != Buffers::Staging && paths.staging && call.bytes >= tuning.staged_from) {
    // docs/tuning.md#staged-while-near
    if (call.bytes < tuning.staged_near_from && placement == Placement::Near) return Route::Schedule;
    return Route::Staged;
  }
  // docs/tuning.md#mailbox-limit
  if (mailbox && call.bytes <= tuning.mailbox_upto) return Route::Mailbox;
  return Route::Schedule;
}

bool runs_in_caller(Route route, std::size_t bytes, bool probe_due, const Tuning& tuning) {
  if (tuning.check || bytes > tuning.direct_bytes) return false;
  return route == Route::Mailbox || (route == Route::Schedule && !probe_due);
}

}  // namespace kizuna::comm
