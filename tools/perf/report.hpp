// perf/report.hpp: nccl-tests' table, and the same results as JSON and CSV.
//
// Every tool that measures a collective (kizuna-perf, the Gloo and Open MPI
// harnesses in bench/compare/) prints through Report, so their outputs have
// the same columns and can be compared line by line:
//
//   #                                                      out-of-place                       in-place
//   #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
//   #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
//          1024           256     float     sum      -1    41.53    0.02    0.04      0    40.11    0.03    0.04      0
//   # Out of bounds values : 0 OK
//   # Avg bus bandwidth    : 0.04
//
// Times in microseconds, bandwidths in GB/s (1e9 bytes per second), as
// nccl-tests prints them. A placement a tool cannot run (Gloo's algorithms
// are in-place only) prints N/A and is left out of the average; #wrong is
// N/A when the check is off.
//
// Report holds no locks: the one rank that prints owns it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace kizuna::perf {

struct Measurement {
  bool measured = false;   // false: this placement was not run (N/A)
  double time_us = 0;
  double algbw = 0;        // GB/s
  double busbw = 0;        // GB/s
  std::int64_t wrong = -1; // wrong elements over every rank; -1: not checked
};

struct Row {
  std::size_t size = 0;    // bytes (the size column)
  std::size_t count = 0;   // elements (the count column)
  std::string type;        // nccl-tests' name: "float", "half", ...
  std::string redop;       // "sum", ... or "none"
  int root = -1;
  Measurement out_of_place, in_place;
};

// Describes the run, for the header and the JSON/CSV files.
struct RunInfo {
  std::string tool;         // "kizuna-perf", "gloo-perf", "mpi-perf"
  std::string collective;   // "all_reduce", ...
  std::string algorithm;    // "auto", "ring", "halving_doubling", ...
  std::string transport;    // "auto", "tcp", "shm", ...
  std::string buffers = "private";  // or "symmetric" (kizuna-perf -R 2)
  std::string launcher;     // "threads", "RANK/WORLD_SIZE", "Open MPI", ...
  int world_size = 0;
  std::size_t min_bytes = 0, max_bytes = 0, step_bytes = 0, step_factor = 1;
  int iters = 0, warmup = 0;
  int check = 1;  // checks per result (0: none)
  int average = 1;
  std::vector<std::string> rank_lines;  // "#  Rank  0 Pid 123 on host ..." lines, one per rank
  // kizuna-perf: the communicator's tuning table (Communicator::tuning()),
  // printed in the header as comment lines and kept in the JSON; empty for
  // the other tools.
  std::string tuning;
};

// nccl-tests' spelling of kizuna's type names ("float32" -> "float").
std::string nccl_type_name(std::string_view kizuna_name);

// algbw and busbw of `bytes` moved in `seconds` with bus factor `factor`.
Measurement measurement(std::size_t bytes, double seconds, double factor, std::int64_t wrong);

class Report {
 public:
  // out may be null (a rank that does not print); rows are still kept.
  Report(RunInfo info, std::FILE* out);

  void header();
  void row(const Row& r);
  // Prints the closing lines; returns the total of #wrong.
  std::int64_t footer();

  const RunInfo& info() const { return info_; }
  const std::vector<Row>& rows() const { return rows_; }
  // Mean busbw over every measured placement of every row (nccl-tests' "Avg
  // bus bandwidth").
  double average_busbw() const;
  std::int64_t total_wrong() const;

  // Throw std::runtime_error when the file cannot be written.
  void write_json(const std::string& path) const;
  void write_csv(const std::string& path) const;

 private:
  RunInfo info_;
  std::FILE* out_;
  std::vector<Row> rows_;
};

// nccl-tests' time column: "%7.0f" from 10 ms, "%7.1f" from 100 us, else "%7.2f".
std::string format_time(double us);

}  // namespace kizuna::perf
