// tests/support/collective_sweep.hpp: runs collective cases (collective_cases.hpp)
// on threads as ranks and compares every rank's result with the serial
// reference: run_one() one case on one rank, sweep() every case on every
// rank, failing the test case with what went wrong.
#pragma once

#include <catch2/catch.hpp>

#include <kizuna/comm.hpp>

#include <cstring>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "collective_cases.hpp"
#include "run_ranks.hpp"

namespace kizuna::test {

// Runs one collective on one rank and returns "" or what was wrong.
inline std::string run_one(Communicator& comm, Op o, DataType dtype, ReduceOp rop, std::uint64_t count,
                    bool in_place) {
  const CollectiveReference ref(dtype, rop);
  const int n = comm.size();
  const int r = comm.rank();
  const int root = n - 1;
  const std::size_t elem = ref.elem();
  const auto want = [&](std::uint64_t i, unsigned char* w) { expected_output(ref, o, n, r, count, i, w); };
  std::vector<unsigned char> in, out;
  switch (o) {
    case Op::AllReduce: {
      in = ref.input_buffer(r, count);
      out.assign(count * elem + 1, 0xAB);
      if (in_place) {
        std::memcpy(out.data(), in.data(), in.size());
        comm.all_reduce(out.data(), count, dtype, rop).wait();
      } else {
        comm.all_reduce(in.data(), out.data(), count, dtype, rop).wait();
      }
      return ref.compare(out.data(), count, want);
    }
    case Op::ReduceScatter: {
      in = ref.input_buffer(r, count * n);
      unsigned char* result;
      if (in_place) {
        comm.reduce_scatter(in.data(), in.data() + r * count * elem, count, dtype, rop).wait();
        result = in.data() + r * count * elem;
      } else {
        out.assign(count * elem + 1, 0xAB);
        comm.reduce_scatter(in.data(), out.data(), count, dtype, rop).wait();
        result = out.data();
      }
      return ref.compare(result, count, want);
    }
    case Op::Reduce: {
      in = ref.input_buffer(r, count);
      out.assign(count * elem + 1, 0xAB);
      unsigned char* result = out.data();
      if (in_place && r == root) {
        comm.reduce(in.data(), in.data(), count, dtype, rop, root).wait();
        result = in.data();
      } else {
        comm.reduce(in.data(), r == root ? out.data() : nullptr, count, dtype, rop, root).wait();
      }
      if (r != root) return "";
      return ref.compare(result, count, want);
    }
    case Op::AllGather: {
      in = ref.input_buffer(r, count);
      out.assign(count * n * elem + 1, 0xAB);
      if (in_place) {
        std::memcpy(out.data() + r * count * elem, in.data(), in.size());
        comm.all_gather(out.data() + r * count * elem, out.data(), count, dtype).wait();
      } else {
        comm.all_gather(in.data(), out.data(), count, dtype).wait();
      }
      return ref.compare(out.data(), count * n, want);
    }
    case Op::Broadcast: {
      in = ref.input_buffer(r, count);
      if (in_place) {
        comm.broadcast(in.data(), count, dtype, root).wait();
        return ref.compare(in.data(), count, want);
      }
      out.assign(count * elem + 1, 0xAB);
      comm.broadcast(in.data(), out.data(), count, dtype, root).wait();
      return ref.compare(out.data(), count, want);
    }
  }
  return "unknown collective";
}

// Runs every case on every rank of `comms` (the same order everywhere) and
// reports failures after all ranks are done, so one wrong result never
// leaves the other ranks waiting in the next collective.
inline void sweep(const std::vector<std::shared_ptr<Communicator>>& comms, const std::vector<Case>& cases,
           const std::string& what) {
  std::mutex mutex;
  std::vector<std::string> failures;
  run_ranks(static_cast<int>(comms.size()), [&](int r) {
    for (const Case& c : cases) {
      const std::string wrong = run_one(*comms[r], c.op, c.dtype, c.rop, c.count, c.in_place);
      if (!wrong.empty()) {
        std::ostringstream msg;
        msg << what << " " << c.str() << ", rank " << r << ": " << wrong;
        std::lock_guard lock(mutex);
        failures.push_back(msg.str());
      }
    }
  });
  if (!failures.empty()) FAIL(failures.size() << " failures; the first: " << failures.front());
}

}  // namespace kizuna::test
