// libFuzzer target: the checked decoder of a rank's step table
// (comm/device_steps.hpp), the table the CUDA executor uploads and its
// kernel interprets (kernels/step_table.cuh).
//
// Input layout: byte 0 the world size (0..63); bytes 1..3 the element
// counts of the Input, Output and Scratch buffers (0..255 each); byte 4
// picks the element codec; the rest is the table, 40-byte entries.
//
// Checked beyond "no crash, no leak, no undefined behaviour": every table
// that decodes runs, step by step, through run_step() (the interpreter the
// kernel runs) on buffers of exactly the stated sizes, so AddressSanitizer
// proves that the decoder's checks keep every step inside its buffers; and
// the decoded steps re-encode to the same table, apart from its reserved
// fields.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include <kizuna/error.hpp>

#include "comm/device_steps.hpp"

using namespace kizuna;

namespace {

void check(bool condition) {
  if (!condition) std::abort();
}

template <typename Codec, typename Op>
void execute(const std::vector<kernels::DeviceStep>& table, const std::uint64_t counts[3],
             const std::uint8_t* fill, std::size_t fill_size) {
  using S = typename Codec::Storage;
  std::unique_ptr<S[]> buffers[3];
  kernels::StepBuffers<S> b{};
  for (int i = 0; i < 3; ++i) {
    buffers[i] = std::make_unique<S[]>(counts[i]);  // exactly the size the decoder was told
    if (fill_size) std::memcpy(buffers[i].get(), fill, std::min<std::size_t>(fill_size, counts[i] * sizeof(S)));
    b.buffer[i] = buffers[i].get();
  }
  for (const kernels::DeviceStep& step : table) {
    auto in = std::make_unique<S[]>(step.count);  // the received slice
    auto out = std::make_unique<S[]>(step.count);  // the slice to send
    if (fill_size) std::memcpy(in.get(), fill, std::min<std::size_t>(fill_size, step.count * sizeof(S)));
    kernels::run_step<Codec, Op>(step, b, in.get(), out.get(), 0, step.count);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 5) return 0;
  const int world = data[0] % 64;
  const std::uint64_t counts[3] = {data[1], data[2], data[3]};
  const unsigned codec = data[4];
  const std::uint8_t* table = data + 5;
  const std::size_t table_size = size - 5;

  std::vector<algo::Step> steps;
  try {
    steps = comm::decode_steps(table, table_size, world, counts[0], counts[1], counts[2]);
  } catch (const Error& e) {
    check(e.code() == ErrorCode::InvalidArgument);
    return 0;
  }
  check(steps.size() * sizeof(kernels::DeviceStep) == table_size);

  algo::RankSchedule schedule;
  schedule.steps = steps;
  const std::vector<kernels::DeviceStep> again = comm::encode_steps(schedule);
  for (std::size_t i = 0; i < again.size(); ++i) {
    kernels::DeviceStep original;
    std::memcpy(&original, table + i * sizeof original, sizeof original);
    original.reserved0 = 0;
    original.reserved1 = 0;
    check(std::memcmp(&original, &again[i], sizeof original) == 0);
  }

  switch (codec % 4) {
    case 0: execute<kernels::Plain<std::uint32_t>, kernels::SumOp>(again, counts, table, table_size); break;
    case 1: execute<kernels::Half, kernels::MaxOp>(again, counts, table, table_size); break;
    case 2: execute<kernels::BFloat, kernels::ProdOp>(again, counts, table, table_size); break;
    default: execute<kernels::Plain<float>, kernels::MinOp>(again, counts, table, table_size); break;
  }
  return 0;
}
