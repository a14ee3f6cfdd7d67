// kizuna/parameter.hpp: one named view into a trainer's flat buffers.
//
// A data-parallel trainer keeps all of its parameters in one flat buffer and
// all of its gradients in another of the same layout (llm.c's
// `params_memory` / `grads_memory`). A Parameter names one tensor inside
// them: where it starts, how many elements it has and their type. The same
// view addresses the parameter in the parameter buffer and its gradient in
// the gradient buffer.
//
// Views are registered with a Reducer (kizuna/reducer.hpp), which requires
// that every rank registers the same list (names, shapes, dtypes and
// offsets) and that views do not overlap. The shape is optional: when given,
// it is part of that check and its product must equal count.
//
// A plain value; no threading concerns.
#pragma once

#include <kizuna/types.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kizuna {

struct Parameter {
  std::string name;
  // Bytes from the start of the flat buffers; a multiple of size_of(dtype).
  std::size_t offset = 0;
  // Elements; at least 1.
  std::size_t count = 0;
  DataType dtype = DataType::Float32;
  // Optional (empty: not checked); otherwise its product equals count.
  std::vector<std::int64_t> shape;

  std::size_t bytes() const { return count * size_of(dtype); }
};

}  // namespace kizuna
