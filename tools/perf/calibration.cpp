#include "calibration.hpp"

#include <kizuna/comm.hpp>
#include <kizuna/error.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "comm/calibrate.hpp"
#include "comm/profile.hpp"

namespace kizuna::perf {
namespace {

// Adds `sections` to the profile at `path` (created when missing), through
// a temporary file renamed over it. "" on success, else why not.
std::string write_sections(const std::string& path, const std::vector<comm::ProfileSection>& sections) {
  try {
    comm::Profile profile;
    if (std::filesystem::exists(path)) {
      std::ifstream in(path);
      std::stringstream text;
      text << in.rdbuf();
      if (!in) return "cannot read " + path;
      profile = comm::Profile::parse(text.str(), path);
    }
    for (const comm::ProfileSection& section : sections) profile.put(section);
    const std::string temporary = path + ".tmp";
    {
      std::ofstream out(temporary, std::ios::trunc);
      out << profile.text();
      out.close();
      if (!out) return "cannot write " + temporary;
    }
    std::filesystem::rename(temporary, path);
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

}  // namespace

int run_calibration(const CommOptions& base, const CalibrationArgs& args) {
  comm::CalibrateOptions options;
  for (std::size_t bytes : args.sizes)
    if (bytes >= 4 && (options.sizes.empty() || bytes / 4 * 4 > options.sizes.back()))
      options.sizes.push_back(bytes / 4 * 4);
  if (options.sizes.empty()) throw Error(ErrorCode::InvalidArgument, "--calibrate: no size of 4 bytes or more");
  options.symmetric = args.symmetric;
  options.repetitions = args.rounds;
  options.placement_wait = args.placement_wait;
  const bool printing = base.rank == 0;
  if (printing) {
    char more[96] = "";
    if (args.placement_wait.count() > 0)
      std::snprintf(more, sizeof more, ", then more for up to %g s while the CPUs were near or far in fewer",
                    static_cast<double>(args.placement_wait.count()) / 1000);
    std::printf("# kizuna-perf --calibrate %s: all-reduce, float32, sum, in place, %zu sizes, %s buffers, "
                "medians of %d rounds%s; up to %llu KiB each candidate on two communicators (time/twin's)\n",
                args.path.c_str(), options.sizes.size(), args.symmetric ? "symmetric" : "private", args.rounds,
                more, static_cast<unsigned long long>(options.twins_upto / 1024));
    std::fflush(stdout);
  }
  options.progress = [](const std::string& line) {
    std::printf("#   %s\n", line.c_str());
    std::fflush(stdout);
  };
  const std::vector<comm::ProfileSection> sections = comm::calibrate(base, options);

  // Rank 0 writes; every rank learns whether it could, over one more
  // communicator (the calibration's are gone).
  const std::string failure = printing ? write_sections(args.path, sections) : "";
  CommOptions verdict = base;
  verdict.name = (base.name.empty() ? std::string("kizuna") : base.name) + "/calibrate/verdict";
  const auto comm = Communicator::create(verdict);
  std::int64_t failed = failure.empty() ? 0 : 1;
  comm->all_reduce(&failed, 1, DataType::Int64, ReduceOp::Max).wait();
  if (printing) {
    if (!failure.empty()) {
      std::fprintf(stderr, "kizuna-perf: --calibrate: %s\n", failure.c_str());
    } else {
      for (const comm::ProfileSection& section : sections) {
        std::string written = comm::describe(section.key);
        if (section.placement != comm::MeasuredPlacement::Unknown)
          written += " placement=" + std::string(comm::name(section.placement));
        std::printf("# wrote section %s to %s; auto takes:", written.c_str(), args.path.c_str());
        for (const comm::Band& b : comm::decide(section))
          std::printf(" %s from %llu B;", std::string(comm::name(b.candidate)).c_str(),
                      static_cast<unsigned long long>(b.from));
        std::printf("\n");
      }
    }
  }
  return failed ? 1 : 0;
}

}  // namespace kizuna::perf
