// kizuna-test-ddp-worker <scenario>: one rank of a multi-process DDP test,
// started by test_ddp_multiproc with RANK, WORLD_SIZE, MASTER_ADDR and
// MASTER_PORT set. Prints what it did; the exit code is the verdict:
//   0 ok, 1 wrong result, 2 bad usage, 10 + ErrorCode for a kizuna::Error.
//
// Scenarios:
//   mean      the Reducer's mean check (ddp_scenario.hpp) without compression
//             and with float16 and bfloat16 compression, each rank marking
//             gradients in its own shuffled order, 3 iterations each
//   mismatch  rank 1 registers a parameter with another shape: every rank
//             must get the same Mismatch
#include <kizuna/comm.hpp>
#include <kizuna/ddp.hpp>

#include <cstdio>
#include <string>

#include "ddp_scenario.hpp"

using namespace kizuna;
using namespace kizuna::test;

namespace {

int mean(const std::shared_ptr<Communicator>& comm) {
  const Model model = make_model(6, 40);
  int wrong = 0;
  for (Compression c : {Compression::None, Compression::Float16, Compression::BFloat16}) {
    ReducerOptions o;
    o.first_bucket_bytes = 4000;
    o.bucket_cap_bytes = 16000;
    o.compression = c;
    const std::string e = run_mean_check(comm, model, o, MarkOrder::Shuffled, 3);
    if (!e.empty()) {
      std::printf("compression %d: %s\n", static_cast<int>(c), e.c_str());
      ++wrong;
    }
  }
  std::printf("rank %d of %d: %s\n", comm->rank(), comm->size(), wrong ? "WRONG" : "ok");
  return wrong ? 1 : 0;
}

int mismatch(const std::shared_ptr<Communicator>& comm) {
  Model model = make_model(3, 8);
  if (comm->rank() == 1) model.views[4].shape = {1, static_cast<std::int64_t>(model.views[4].count)};
  std::vector<std::byte> params(model.bytes), grads(model.bytes);
  Reducer reducer(comm, params.data(), grads.data(), model.bytes, model.views);
  std::printf("rank %d: no mismatch reported\n", comm->rank());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: kizuna-test-ddp-worker mean|mismatch\n");
    return 2;
  }
  const std::string scenario = argv[1];
  try {
    auto comm = Communicator::from_env();
    if (scenario == "mean") return mean(comm);
    if (scenario == "mismatch") return mismatch(comm);
    std::fprintf(stderr, "unknown scenario '%s'\n", scenario.c_str());
    return 2;
  } catch (const Error& e) {
    std::printf("error %s: %s\n", std::string(name(e.code())).c_str(), e.what());
    return 10 + static_cast<int>(e.code());
  }
}
