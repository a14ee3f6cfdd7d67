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

namespace {

// The profile's table for `buffers` with the CPUs at `placement`: the
// near section's where there is one and the ranks agree they are near
// (docs/tuning.md#tuner).
const std::vector<Band>* bands_for(Buffers buffers, Placement placement, const Tuning& tuning) {
  if (buffers == Buffers::Device) return nullptr;
  const bool symmetric = buffers == Buffers::Symmetric;
  const std::vector<Band>& near = symmetric ? tuning.near_symmetric_bands : tuning.near_private_bands;
  if (placement == Placement::Near && !near.empty()) return &near;
  const std::vector<Band>& bands = symmetric ? tuning.symmetric_bands : tuning.private_bands;
  return bands.empty() ? nullptr : &bands;
}

// docs/tuning.md#tuner: the measured choice, where its route exists here.
std::optional<Route> profiled_route(const CallShape& call, Buffers buffers, Placement placement, const Paths& paths,
                                    const Tuning& tuning) {
  const std::vector<Band>* bands = bands_for(buffers, placement, tuning);
  if (!bands || buffers == Buffers::Staging) return std::nullopt;
  switch (pick(*bands, call.bytes)) {
    case Candidate::Mailbox:
      if (paths.mailbox && call.bytes <= tuning.mailbox_upto) return Route::Mailbox;
      return std::nullopt;
    case Candidate::Staged: return paths.staging ? std::optional(Route::Staged) : std::nullopt;
    case Candidate::Symmetric: return buffers == Buffers::Symmetric ? std::optional(Route::Symmetric) : std::nullopt;
    default: return Route::Schedule;
  }
}

}  // namespace

std::optional<Candidate> route_candidate(Route route) {
  switch (route) {
    case Route::Mailbox: return Candidate::Mailbox;
    case Route::Staged: return Candidate::Staged;
    case Route::Symmetric: return Candidate::Symmetric;
    default: return std::nullopt;
  }
}

std::optional<Algorithm> profiled_algorithm(std::size_t bytes, Buffers buffers, Placement placement,
                                            const Tuning& tuning) {
  const std::vector<Band>* bands = bands_for(buffers, placement, tuning);
  if (!bands || tuning.algorithm != Algorithm::Auto) return std::nullopt;
  const Candidate c = pick(*bands, bytes);
  return is_schedule(c) ? std::optional(algorithm_of(c)) : std::nullopt;
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
  if (const std::optional<Route> measured = profiled_route(call, buffers, placement, paths, tuning)) return *measured;
  // docs/tuning.md#symmetric-from
  if (buffers == Buffers::Symmetric && call.bytes >= tuning.symmetric_from) return Route::Symmetric;
  // docs/tuning.md#staged-from; a device call's parts are staged already.
  if (buffers != Buffers::Staging && paths.staging && call.bytes >= tuning.staged_from) {
    // docs/tuning.md#staged-while-near
    const bool slots_near = call.bytes < tuning.staged_near_from ||
                            (tuning.staged_near_upto > 0 && call.bytes >= tuning.staged_near_upto);
    if (slots_near && placement == Placement::Near) return Route::Schedule;
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
