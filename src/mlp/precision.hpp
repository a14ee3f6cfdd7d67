// mlp/precision.hpp: mixed precision, emulated on the CPU, and the dynamic
// loss scaler fp16 needs.
//
// --precision bf16|fp16 trains as apex amp's O2 does on a GPU: the model's
// weights, activations and gradients are 16-bit values, the optimizer keeps
// float32 master weights, and softmax/loss stay in float32. A CPU has no
// fast 16-bit GEMM, so this is an emulation that reproduces the numerics,
// not the speed: every tensor that would be 16-bit is rounded to the 16-bit
// type (round to nearest even, kernels/reduce.cuh's codecs) where it is
// produced, i.e. at every layer boundary, and kept in float32 storage; the
// GEMMs run in float32 on those rounded values (a GPU's tensor cores also
// accumulate 16-bit products in float32). Rounded:
//   forward   the input batch, a copy of the weights and biases (the master
//             weights stay float32), each layer's output
//   backward  the scaled loss gradient, each layer's input gradient, and the
//             weight and bias gradients handed to the Reducer
// so fp16 overflows where a GPU's fp16 would (Inf above 65504), which is
// what the loss scaler watches for.
//
// LossScaler (fp16 only; apex's DynamicLossScaler, PyTorch's GradScaler):
// the loss gradient is multiplied by scale() before backward; after the
// all-reduce, update() looks at the gradients: any Inf or NaN -> skip this
// step and halve the scale (not below min_scale); otherwise the caller
// divides the gradients by the scale and steps, and after growth_interval
// good steps in a row the scale doubles. Every rank sees the same reduced
// gradients, so every rank takes the same decision without communicating.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kizuna::mlp {

enum class Precision { Float32, BFloat16, Float16 };

// "fp32"/"float32", "bf16"/"bfloat16", "fp16"/"float16"/"half";
// InvalidArgument naming the accepted values otherwise.
Precision parse_precision(std::string_view text);
std::string_view name(Precision p);  // "fp32", "bf16", "fp16"

// x[i] = float(round_to_16bit(x[i])) for bf16/fp16; nothing for fp32.
void round_to_precision(float* x, std::size_t n, Precision p);
// The same into another array (dst may equal src).
void round_to_precision(float* dst, const float* src, std::size_t n, Precision p);

// True when any x[i] is Inf or NaN.
bool has_inf_or_nan(const float* x, std::size_t n);

struct LossScalerOptions {
  float init_scale = 65536.0f;  // 2^16, apex's and GradScaler's default
  float min_scale = 1.0f;
  std::int64_t growth_interval = 2000;
};

class LossScaler {
 public:
  explicit LossScaler(const LossScalerOptions& options = {}) : options_(options), scale_(options.init_scale) {}

  float scale() const { return scale_; }
  // Looks at the reduced, still scaled, gradients. Finite: divides them by
  // the scale they were computed with, counts a good step (doubling the
  // scale after growth_interval of them) and returns true: take the step.
  // Any Inf or NaN: halves the scale and returns false: skip the step.
  bool unscale_and_update(float* grads, std::size_t n);

  std::int64_t good_steps() const { return good_steps_; }
  std::int64_t skipped_steps() const { return skipped_; }

  // Checkpoint state.
  void set_state(float scale, std::int64_t good_steps, std::int64_t skipped) {
    scale_ = scale;
    good_steps_ = good_steps;
    skipped_ = skipped;
  }

 private:
  LossScalerOptions options_;
  float scale_;
  std::int64_t good_steps_ = 0;
  std::int64_t skipped_ = 0;
};

}  // namespace kizuna::mlp
