// run/status.cpp: see status.hpp.
#include "status.hpp"

#include <kizuna/comm.hpp>

#include <algorithm>
#include <cstring>

namespace kizuna::run {
namespace {

std::string field(const std::map<std::string, std::string>& f, const char* key, const char* fallback = "-") {
  const auto it = f.find(key);
  return it == f.end() || it->second.empty() ? fallback : it->second;
}

// Columns padded to their widest cell; the last one is not padded.
std::string format(const std::vector<std::vector<std::string>>& cells) {
  std::vector<std::size_t> width;
  for (const auto& row : cells)
    for (std::size_t c = 0; c < row.size(); ++c) {
      if (width.size() <= c) width.push_back(0);
      width[c] = std::max(width[c], row[c].size());
    }
  std::string out;
  for (const auto& row : cells) {
    out += "  ";
    for (std::size_t c = 0; c < row.size(); ++c) {
      out += row[c];
      if (c + 1 < row.size()) out.append(width[c] - row[c].size() + 2, ' ');
    }
    out += "\n";
  }
  return out;
}

}  // namespace

std::optional<std::map<std::string, std::string>> parse_status_line(std::string_view line) {
  const auto at = line.find(kStatusMarker);
  if (at == std::string_view::npos) return std::nullopt;
  line.remove_prefix(at + std::strlen(kStatusMarker));
  std::map<std::string, std::string> fields;
  while (!line.empty()) {
    const auto space = line.find(' ');
    const std::string_view word = line.substr(0, space);
    line.remove_prefix(space == std::string_view::npos ? line.size() : space + 1);
    const auto eq = word.find('=');
    if (eq == std::string_view::npos || eq == 0) continue;
    fields[std::string(word.substr(0, eq))] = std::string(word.substr(eq + 1));
  }
  return fields;
}

std::string status_table(const std::vector<StatusRow>& rows) {
  if (std::none_of(rows.begin(), rows.end(), [](const StatusRow& r) { return r.status.has_value(); })) return "";
  std::vector<std::vector<std::string>> cells{{"rank", "exit", "comm", "call", "step", "waiting for", "error"}};
  for (const StatusRow& row : rows) {
    if (!row.status) {
      cells.push_back({std::to_string(row.rank), row.exit, "-", "(no status line)", "-", "-", "-"});
      continue;
    }
    const StatusFields& f = *row.status;
    std::string call = field(f, "call", "(idle)");
    if (f.count("seq")) call += " #" + f.at("seq");
    if (f.count("algo")) call += " (" + f.at("algo") + ")";
    if (!f.count("call")) call += ", last done #" + field(f, "last_done", "0");
    std::string waiting = "-";
    if (f.count("waiting_for")) waiting = "rank " + f.at("waiting_for") + ", " + field(f, "waited_s", "?") + " s";
    cells.push_back({std::to_string(row.rank), row.exit, field(f, "comm"), call, field(f, "step"), waiting,
                     field(f, "error")});
  }
  return format(cells);
}

}  // namespace kizuna::run
