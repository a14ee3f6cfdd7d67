// perf/driver.hpp: the one shared benchmark loop of kizuna-perf (nccl-tests'
// common.cu), run by every rank with its own communicator.
//
// For each data type, operator and size, and for out-of-place then
// in-place, run_sweep():
//   1. fills the inputs in closed form (perf/data.hpp),
//   2. runs `warmup` untimed calls, then a barrier,
//   3. times `iters` calls, each waited for before the next (a blocking
//      call, as MPI_Allreduce and Gloo's run() are; with --device cuda,
//      Work::wait returns once the result is on the GPU), and reduces the
//      per-call time across ranks as -a asks (mean, min, max or rank 0's),
//   4. with the check on: refills the inputs, poisons the outputs, runs one
//      more call and counts the wrong elements on every rank, summed over
//      ranks with one more all_reduce.
// Buffers are allocated once at the largest size, page-aligned, and touched
// before any timing, so no call pays for page faults (PerfBuffers).
//
// Threading: one call per rank, on any thread; ranks-as-threads each call it
// with their own communicator and buffers. Throws kizuna::Error when a
// collective fails.
#pragma once

#include <kizuna/comm.hpp>
#include <kizuna/types.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "args.hpp"
#include "collective.hpp"
#include "device_memory.hpp"
#include "report.hpp"

namespace kizuna::perf {

struct PerfConfig {
  CommonOptions common;
  Collective collective = Collective::AllReduce;
  std::vector<DataType> types{DataType::Float32};
  std::vector<ReduceOp> ops{ReduceOp::Sum};
  int root = 0;
};

// Two page-aligned buffers of `bytes` each (send and receive), every page
// written once at construction: in memory of their own, or in `memory`
// (of span_bytes(bytes), page-aligned, as Communicator::allocate_symmetric
// gives it; kizuna-perf -R 2).
class PerfBuffers {
 public:
  explicit PerfBuffers(std::size_t bytes);
  PerfBuffers(std::size_t bytes, std::shared_ptr<void> memory);
  unsigned char* send() { return send_; }
  unsigned char* recv() { return recv_; }
  std::size_t bytes() const { return bytes_; }
  // What both buffers take together.
  static std::size_t span_bytes(std::size_t bytes);

 private:
  std::size_t bytes_;
  std::shared_ptr<void> memory_;
  unsigned char* send_;
  unsigned char* recv_;
};

// "#  Rank  0 Group  0 Pid  1234 on     host device cpu transport shm" for
// this process, gathered from every rank (a collective; every rank gets all
// lines).
std::vector<std::string> gather_rank_lines(Communicator& comm, const std::string& device,
                                           const std::string& transport);

// Runs the sweep of `config`; every rank adds the same rows to its report
// (only the printing rank's report has an output). Returns the number of
// wrong elements over every rank. With `device` (--device cuda) the calls
// run on its buffers, ordered on its stream; `buffers` still hold the
// inputs and the results being checked.
std::int64_t run_sweep(Communicator& comm, const PerfConfig& config, PerfBuffers& buffers, DeviceMemory* device,
                       Report& report);

// What `config` needs per rank: the largest size of the sweep.
std::size_t buffer_bytes(const PerfConfig& config);

}  // namespace kizuna::perf
