#include "report.hpp"

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>
#include <stdexcept>

namespace kizuna::perf {

std::string nccl_type_name(std::string_view n) {
  if (n == "float16") return "half";
  if (n == "float32") return "float";
  if (n == "float64") return "double";
  return std::string(n);
}

Measurement measurement(std::size_t bytes, double seconds, double factor, std::int64_t wrong) {
  Measurement m;
  m.measured = true;
  m.time_us = seconds * 1e6;
  m.algbw = seconds > 0 ? static_cast<double>(bytes) / 1e9 / seconds : 0.0;
  m.busbw = m.algbw * factor;
  m.wrong = wrong;
  return m;
}

std::string format_time(double us) {
  char s[32];
  if (us >= 10000.0) std::snprintf(s, sizeof s, "%7.0f", us);
  else if (us >= 100.0) std::snprintf(s, sizeof s, "%7.1f", us);
  else std::snprintf(s, sizeof s, "%7.2f", us);
  return s;
}

Report::Report(RunInfo info, std::FILE* out) : info_(std::move(info)), out_(out) {}

void Report::header() {
  if (!out_) return;
  const RunInfo& i = info_;
  std::fprintf(out_, "# %s: %s, %d ranks (%s), algorithm %s, transport %s, %s buffers\n", i.tool.c_str(),
               i.collective.c_str(), i.world_size, i.launcher.c_str(), i.algorithm.c_str(),
               i.transport.c_str(), i.buffers.c_str());
  const bool by_factor = i.step_factor > 1;
  std::fprintf(out_,
               "# nThread 1 nGpus 0 minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d "
               "iters: %d agg iters: 1 validation: %d graph: 0\n",
               i.min_bytes, i.max_bytes, by_factor ? i.step_factor : i.step_bytes,
               by_factor ? "factor" : "bytes", i.warmup, i.iters, i.check);
  std::fprintf(out_, "#\n# Using devices\n");
  for (const std::string& line : i.rank_lines) std::fprintf(out_, "%s\n", line.c_str());
  std::fprintf(out_, "#\n");
  if (!i.tuning.empty()) {
    std::istringstream lines(i.tuning);
    for (std::string line; std::getline(lines, line);) std::fprintf(out_, "# %s\n", line.c_str());
    std::fprintf(out_, "#\n");
  }
  std::fprintf(out_,
               "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place"
               "          \n",
               "", "", "", "", "");
  std::fprintf(out_, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n", "size",
               "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
               "busbw", "#wrong");
  std::fprintf(out_, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n", "(B)",
               "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  std::fflush(out_);
}

void Report::row(const Row& r) {
  rows_.push_back(r);
  if (!out_) return;
  std::fprintf(out_, "%12zu  %12zu  %8s  %6s  %6d", r.size, r.count, r.type.c_str(), r.redop.c_str(),
               r.root);
  for (const Measurement* m : {&r.out_of_place, &r.in_place}) {
    if (!m->measured) {
      std::fprintf(out_, "  %7s  %6s  %6s  %5s", "N/A", "N/A", "N/A", "N/A");
      continue;
    }
    std::fprintf(out_, "  %7s  %6.2f  %6.2f", format_time(m->time_us).c_str(), m->algbw, m->busbw);
    if (m->wrong >= 0) std::fprintf(out_, "  %5g", static_cast<double>(m->wrong));
    else std::fprintf(out_, "  %5s", "N/A");
  }
  std::fprintf(out_, "\n");
  std::fflush(out_);
}

double Report::average_busbw() const {
  double sum = 0;
  int n = 0;
  for (const Row& r : rows_)
    for (const Measurement* m : {&r.out_of_place, &r.in_place})
      if (m->measured) sum += m->busbw, ++n;
  return n ? sum / n : 0.0;
}

std::int64_t Report::total_wrong() const {
  std::int64_t wrong = 0;
  for (const Row& r : rows_)
    for (const Measurement* m : {&r.out_of_place, &r.in_place})
      if (m->measured && m->wrong > 0) wrong += m->wrong;
  return wrong;
}

std::int64_t Report::footer() {
  const std::int64_t wrong = total_wrong();
  if (out_) {
    std::fprintf(out_, "# Out of bounds values : %lld %s\n", static_cast<long long>(wrong),
                 wrong ? "FAILED" : "OK");
    std::fprintf(out_, "# Avg bus bandwidth    : %g \n#\n", average_busbw());
    std::fflush(out_);
  }
  return wrong;
}

namespace {

// Keys in the order written, so that the file reads like the table.
using Json = nlohmann::ordered_json;

// null for a placement not run; "wrong" is null when unchecked.
Json json_of(const Measurement& m) {
  if (!m.measured) return nullptr;
  return {{"time_us", m.time_us},
          {"algbw", m.algbw},
          {"busbw", m.busbw},
          {"wrong", m.wrong >= 0 ? Json(m.wrong) : Json(nullptr)}};
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw std::runtime_error("cannot write " + path);
  f << text;
  f.close();
  if (!f) throw std::runtime_error("cannot write " + path);
}

}  // namespace

void Report::write_json(const std::string& path) const {
  const RunInfo& i = info_;
  Json results = Json::array();
  for (const Row& r : rows_)
    results.push_back({{"size", r.size},
                       {"count", r.count},
                       {"type", r.type},
                       {"redop", r.redop},
                       {"root", r.root},
                       {"out_of_place", json_of(r.out_of_place)},
                       {"in_place", json_of(r.in_place)}});
  Json doc = {{"tool", i.tool},
                    {"collective", i.collective},
                    {"algorithm", i.algorithm},
                    {"transport", i.transport},
                    {"buffers", i.buffers},
                    {"launcher", i.launcher},
                    {"world_size", i.world_size},
                    {"iters", i.iters},
                    {"warmup", i.warmup},
                    {"check", i.check != 0},
                    {"checks", i.check},
                    {"average", i.average},
                    {"results", std::move(results)},
                    {"wrong", total_wrong()},
                    {"avg_busbw", average_busbw()}};
  if (!i.tuning.empty()) doc["tuning"] = i.tuning;
  // Numbers that are not finite are written as null; bytes that are not
  // UTF-8 (a name from the environment) as U+FFFD.
  write_file(path, doc.dump(2, ' ', false, Json::error_handler_t::replace) + "\n");
}

void Report::write_csv(const std::string& path) const {
  const RunInfo& i = info_;
  std::string s =
      "tool,collective,algorithm,transport,world_size,size,count,type,redop,root,placement,"
      "time_us,algbw_GBps,busbw_GBps,wrong\n";
  for (const Row& r : rows_) {
    for (const auto& [placement, m] :
         {std::pair<const char*, const Measurement*>{"out_of_place", &r.out_of_place},
          std::pair<const char*, const Measurement*>{"in_place", &r.in_place}}) {
      if (!m->measured) continue;
      char nums[160];
      std::snprintf(nums, sizeof nums, "%.9g,%.9g,%.9g", m->time_us, m->algbw, m->busbw);
      s += i.tool + "," + i.collective + "," + i.algorithm + "," + i.transport + "," +
           std::to_string(i.world_size) + "," + std::to_string(r.size) + "," +
           std::to_string(r.count) + "," + r.type + "," + r.redop + "," + std::to_string(r.root) +
           "," + placement + "," + nums + "," + (m->wrong >= 0 ? std::to_string(m->wrong) : "") +
           "\n";
    }
  }
  write_file(path, s);
}

}  // namespace kizuna::perf
