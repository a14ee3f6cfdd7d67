// mlp/precision.cpp: see precision.hpp.
#include "mlp/precision.hpp"

#include <algorithm>
#include <cmath>

#include "core/check.hpp"
#include "kernels/reduce.cuh"

namespace kizuna::mlp {

Precision parse_precision(std::string_view text) {
  if (text == "fp32" || text == "float32" || text == "f32") return Precision::Float32;
  if (text == "bf16" || text == "bfloat16") return Precision::BFloat16;
  if (text == "fp16" || text == "float16" || text == "f16" || text == "half") return Precision::Float16;
  KIZUNA_THROW(ErrorCode::InvalidArgument, "precision '", text, "' is not accepted; expected fp32, bf16 or fp16");
}

std::string_view name(Precision p) {
  switch (p) {
    case Precision::Float32: return "fp32";
    case Precision::BFloat16: return "bf16";
    case Precision::Float16: return "fp16";
  }
  return "?";
}

void round_to_precision(float* dst, const float* src, std::size_t n, Precision p) {
  // Branch-free codecs in a plain loop: the compiler vectorises both at -O3.
  switch (p) {
    case Precision::Float32:
      if (dst != src) std::copy(src, src + n, dst);
      return;
    case Precision::BFloat16:
      for (std::size_t i = 0; i < n; ++i) dst[i] = kernels::bf16_to_float(kernels::float_to_bf16(src[i]));
      return;
    case Precision::Float16:
      for (std::size_t i = 0; i < n; ++i) dst[i] = kernels::half_to_float(kernels::float_to_half(src[i]));
      return;
  }
}

void round_to_precision(float* x, std::size_t n, Precision p) { round_to_precision(x, x, n, p); }

bool has_inf_or_nan(const float* x, std::size_t n) {
  // Inf - Inf and NaN - NaN are NaN, x - x is 0 otherwise: one compare per
  // element, no branch in the loop.
  float acc = 0.0f;
  for (std::size_t i = 0; i < n; ++i) acc += x[i] - x[i];
  return acc != 0.0f;
}

bool LossScaler::unscale_and_update(float* grads, std::size_t n) {
  if (has_inf_or_nan(grads, n)) {
    scale_ = std::max(scale_ * 0.5f, options_.min_scale);
    good_steps_ = 0;
    ++skipped_;
    return false;
  }
  const float inv = 1.0f / scale_;
  for (std::size_t i = 0; i < n; ++i) grads[i] *= inv;
  if (++good_steps_ >= options_.growth_interval) {
    scale_ *= 2.0f;
    good_steps_ = 0;
  }
  return true;
}

}  // namespace kizuna::mlp
