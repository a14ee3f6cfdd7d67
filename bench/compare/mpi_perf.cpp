// mpi-perf: Open MPI's MPI_Allreduce, measured and printed exactly as
// kizuna-perf measures and prints kizuna's (same flags, same columns, same
// closed-form check), for the side-by-side comparison of
// scripts/bench_compare.sh.
//
//   mpirun -np 4 mpi-perf -b 4 -e 64M -f 2                    default path (shared memory)
//   mpirun -np 4 --mca btl tcp,self mpi-perf -b 4 -e 64M -f 2  forced to TCP
//
// Out-of-place calls pass separate buffers; in-place calls pass MPI_IN_PLACE.
// The buffers are allocated once at the largest size and touched before any
// timing, as kizuna-perf's are; Open MPI's own temporaries are its business
// (that is part of what is measured). The transport column says what the
// MCA settings asked for (OMPI_MCA_btl, which mpirun --mca btl sets), or
// --transport names it.
//
// Exit status: 0 every element right, 1 a wrong element or a failure, 2 bad usage.
#include <mpi.h>

#include <kizuna/error.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "perf/args.hpp"
#include "perf/collective.hpp"
#include "perf/data.hpp"
#include "perf/driver.hpp"
#include "perf/report.hpp"
#include "perf/timing.hpp"

namespace {

using namespace kizuna::perf;
using kizuna::DataType;
using kizuna::ReduceOp;

struct Options {
  CommonOptions common;
  DataType dtype = DataType::Float32;
  ReduceOp op = ReduceOp::Sum;
  std::string transport;
};

MPI_Datatype mpi_type(DataType t) {
  switch (t) {
    case DataType::Int8: return MPI_INT8_T;
    case DataType::UInt8: return MPI_UINT8_T;
    case DataType::Int32: return MPI_INT32_T;
    case DataType::UInt32: return MPI_UINT32_T;
    case DataType::Int64: return MPI_INT64_T;
    case DataType::UInt64: return MPI_UINT64_T;
    case DataType::Float32: return MPI_FLOAT;
    case DataType::Float64: return MPI_DOUBLE;
    default: throw UsageError("-d: MPI has no " + std::string(kizuna::name(t)) + " type");
  }
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return MPI_SUM;
    case ReduceOp::Prod: return MPI_PROD;
    case ReduceOp::Min: return MPI_MIN;
    case ReduceOp::Max: return MPI_MAX;
    default: throw UsageError("-o avg: MPI has no average operator");
  }
}

std::string transport_label(const Options& o) {
  if (!o.transport.empty()) return o.transport;
  const char* btl = std::getenv("OMPI_MCA_btl");
  return btl && *btl ? std::string("btl=") + btl : "default";
}

int run(const Options& o) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const MPI_Datatype type = mpi_type(o.dtype);
  const MPI_Op op = mpi_op(o.op);
  const ClosedForm data(o.dtype, o.op, world);
  const std::size_t elem = kizuna::size_of(o.dtype);
  const auto sizes = o.common.sizes();
  PerfBuffers buffers(sizes.empty() ? 0 : sizes.back());

  char host[64] = {};
  ::gethostname(host, sizeof host - 1);
  char line[160] = {};
  std::snprintf(line, sizeof line, "#  Rank %2d Group  0 Pid %6d on %10s device cpu transport %s", rank,
                static_cast<int>(::getpid()), host, transport_label(o).c_str());
  std::vector<char> lines(sizeof line * static_cast<std::size_t>(world));
  MPI_Allgather(line, sizeof line, MPI_CHAR, lines.data(), sizeof line, MPI_CHAR, MPI_COMM_WORLD);

  RunInfo info;
  info.tool = "mpi-perf";
  info.collective = "all_reduce";
  info.algorithm = "MPI_Allreduce";
  info.transport = transport_label(o);
  info.launcher = "Open MPI";
  info.world_size = world;
  info.min_bytes = o.common.min_bytes;
  info.max_bytes = o.common.max_bytes;
  info.step_bytes = o.common.step_bytes;
  info.step_factor = o.common.step_factor;
  info.iters = o.common.iters;
  info.warmup = o.common.warmup;
  info.check = o.common.check;
  info.average = o.common.average;
  for (int r = 0; r < world; ++r) info.rank_lines.emplace_back(lines.data() + r * sizeof line);
  Report report(info, rank == 0 ? stdout : nullptr);
  report.header();

  for (const std::size_t bytes : sizes) {
    const Sizing s = size_for(Collective::AllReduce, bytes, elem, world);
    const int count = static_cast<int>(s.count);
    Row row;
    row.size = s.bytes;
    row.count = s.count;
    row.type = nccl_type_name(kizuna::name(o.dtype));
    row.redop = std::string(kizuna::name(o.op));
    row.root = -1;
    for (const bool in_place : {false, true}) {
      unsigned char* recv = buffers.recv();
      unsigned char* input = in_place ? recv : buffers.send();
      const void* send = in_place ? MPI_IN_PLACE : input;
      data.input(rank, 0, s.count, input);
      const double local = time_calls(
          o.common.warmup, o.common.iters, [&] { MPI_Allreduce(send, recv, count, type, op, MPI_COMM_WORLD); },
          [&] { MPI_Barrier(MPI_COMM_WORLD); });
      double seconds = local;
      switch (time_reduction(o.common.average)) {
        case TimeReduction::None: break;
        case TimeReduction::Sum: MPI_Allreduce(&local, &seconds, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); break;
        case TimeReduction::Min: MPI_Allreduce(&local, &seconds, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD); break;
        case TimeReduction::Max: MPI_Allreduce(&local, &seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD); break;
      }
      seconds = finish_time(o.common.average, seconds, world);
      long long wrong = -1;  // not checked
      for (int k = 0; k < o.common.check && wrong <= 0; ++k) {
        if (!in_place) std::fill(recv, recv + s.count * elem, static_cast<unsigned char>(0xa5));
        data.input(rank, 0, s.count, input);
        MPI_Allreduce(send, recv, count, type, op, MPI_COMM_WORLD);
        std::string first;
        const long long mine = static_cast<long long>(data.wrong_reduced(recv, 0, s.count, &first));
        if (mine)
          std::fprintf(stderr, "mpi-perf: rank %d: count %zu (%s): %lld wrong, first at %s\n", rank, s.count,
                       in_place ? "in-place" : "out-of-place", mine, first.c_str());
        MPI_Allreduce(&mine, &wrong, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
      }
      (in_place ? row.in_place : row.out_of_place) =
          measurement(s.bytes, seconds, bus_factor(Collective::AllReduce, world), wrong);
    }
    report.row(row);
  }
  const std::int64_t wrong = report.footer();
  if (rank == 0 && !o.common.json_path.empty()) report.write_json(o.common.json_path);
  if (rank == 0 && !o.common.csv_path.empty()) report.write_csv(o.common.csv_path);
  return wrong ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  Options o;
  ArgParser p("mpi-perf",
              "Open MPI's MPI_Allreduce with kizuna-perf's flags and columns; run under mpirun.");
  add_common_options(p, o.common);
  p.value("-o", "--op", "OP", "sum (default), prod, min or max", [&](std::string_view v) {
    o.op = kizuna::parse_reduce_op(v);
    mpi_op(o.op);
  });
  p.value("-d", "--datatype", "TYPE", "float32 (default), float64 or an integer type", [&](std::string_view v) {
    o.dtype = kizuna::parse_data_type(v);
    mpi_type(o.dtype);
  });
  p.value("", "--transport", "LABEL", "what to call the transport in the output (default: from OMPI_MCA_btl)",
          [&](std::string_view v) { o.transport = std::string(v); });
  int status = 0;
  try {
    if (!p.parse(argc, argv)) {
      std::fputs(p.usage().c_str(), stdout);
      MPI_Finalize();
      return 0;
    }
    validate(o.common);
    if (o.common.max_bytes / kizuna::size_of(o.dtype) > static_cast<std::size_t>(INT32_MAX))
      throw UsageError("-e: MPI counts elements in an int");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpi-perf: %s\nrun 'mpi-perf --help' for the options\n", e.what());
    MPI_Finalize();
    return 2;
  }
  try {
    status = run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpi-perf: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return status;
}
