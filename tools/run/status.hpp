// run/status.hpp: the job's failure table.
//
// A communicator that fails logs one status line (include/kizuna/comm.hpp,
// kStatusMarker): where its rank was, as key=value fields. RankOutput keeps
// the last one each rank printed; when the job fails, kizuna-run prints
// status_table(), one row per local rank, so that "which ranks are where"
// reads at a glance:
//
//   rank  exit                 comm          call                    step  waiting for    error
//   0     exited with code 21  kizuna/comm0  all_reduce #261 (ring)  5/14  rank 3, 3.3 s  Timeout
//   2     stopped by kizuna-run  -             (no status line)        -     -              -
//
// Pure functions; no state.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kizuna::run {

// The fields of a status line, or nothing when `line` is not one.
std::optional<std::map<std::string, std::string>> parse_status_line(std::string_view line);

using StatusFields = std::map<std::string, std::string>;

struct StatusRow {
  int rank = -1;
  std::string exit;                    // "exited with code 21", "was killed by signal 9 (Killed)"
  std::optional<StatusFields> status;  // its last status line, if any
};

// The table for these rows, in their order; "" when no row has a status
// line (the job did not fail in a collective). A rank without one failed
// outside a communicator, or was stopped or killed before it could tell.
std::string status_table(const std::vector<StatusRow>& rows);

}  // namespace kizuna::run
