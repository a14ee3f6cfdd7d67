// mlp/optimizer.hpp: SGD with momentum and weight decay, and AdamW, over the
// flat float32 parameter buffer; and the learning-rate schedules.
//
// Both follow PyTorch's update rules exactly (torch.optim.SGD, AdamW), so a
// hyper-parameter that works there works here:
//
//   SGD     g' = g + wd * p                       (L2, coupled to the gradient)
//           buf = momentum * buf + g'             (buf starts at 0, so the
//           p  -= lr * buf                         first step is buf = g')
//           momentum 0: p -= lr * g'
//   AdamW   p  *= 1 - lr * wd                     (decoupled weight decay)
//           m = b1 m + (1 - b1) g,  v = b2 v + (1 - b2) g^2
//           p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
//
// Weight decay applies to every parameter, biases included (PyTorch's
// default with one parameter group). The state (momentum buffer, or m and
// v, and the step count t) is exposed for checkpoints. Every rank holds
// the same parameters and, after the all-reduce, the same gradients, so
// every rank runs the same update and the replicas never drift apart.
// Not thread-safe; no allocation after construction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kizuna::mlp {

enum class OptimizerKind { Sgd, AdamW };
OptimizerKind parse_optimizer(std::string_view text);  // "sgd", "adamw"
std::string_view name(OptimizerKind kind);

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::Sgd;
  float momentum = 0.9f;  // SGD
  float weight_decay = 0.0f;
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;  // AdamW
};

class Optimizer {
 public:
  Optimizer(const OptimizerOptions& options, std::size_t num_parameters);

  // One update of params from grads with learning rate lr.
  void step(float* params, const float* grads, float lr);

  const OptimizerOptions& options() const { return options_; }
  // Updates taken so far (AdamW's t).
  std::int64_t steps() const { return steps_; }
  void set_steps(std::int64_t steps) { steps_ = steps; }

  // The state arrays, each num_parameters long: {"momentum"} for SGD (empty
  // list when momentum is 0), {"exp_avg", "exp_avg_sq"} for AdamW.
  std::vector<std::string> state_names() const;
  std::vector<float>& state(std::size_t index) { return state_[index]; }
  const std::vector<float>& state(std::size_t index) const { return state_[index]; }

 private:
  OptimizerOptions options_;
  std::size_t n_;
  std::int64_t steps_ = 0;
  std::vector<std::vector<float>> state_;
};

// ---- learning-rate schedules ---------------------------------------------------
//
// lr(step), step counted from 0 over the whole run; total_steps = per-rank
// batches per epoch x epochs (every rank takes the same steps).
//   warm-up (any schedule): for step < warmup_steps, lr = base * (step + 1) / warmup_steps
//   constant: base
//   step:     base * gamma^floor((step - warmup) / step_size)
//   cosine:   min_lr + (base - min_lr) * (1 + cos(pi * s / S)) / 2, with
//             s = step - warmup, S = total_steps - warmup (torch's
//             CosineAnnealingLR after a linear warm-up)
enum class ScheduleKind { Constant, Step, Cosine };
ScheduleKind parse_schedule(std::string_view text);  // "constant", "step", "cosine"
std::string_view name(ScheduleKind kind);

struct ScheduleOptions {
  ScheduleKind kind = ScheduleKind::Constant;
  float base_lr = 0.01f;
  std::int64_t total_steps = 1;
  std::int64_t warmup_steps = 0;
  std::int64_t step_size = 1;  // step schedule: steps between decays
  float gamma = 0.1f;          // step schedule: decay factor
  float min_lr = 0.0f;         // cosine: the final learning rate
};

float learning_rate(const ScheduleOptions& schedule, std::int64_t step);

}  // namespace kizuna::mlp
