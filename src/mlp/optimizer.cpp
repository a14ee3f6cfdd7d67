// mlp/optimizer.cpp: see optimizer.hpp.
#include "mlp/optimizer.hpp"

#include <algorithm>
#include <cmath>

#include "core/check.hpp"

namespace kizuna::mlp {

OptimizerKind parse_optimizer(std::string_view text) {
  if (text == "sgd") return OptimizerKind::Sgd;
  if (text == "adamw") return OptimizerKind::AdamW;
  KIZUNA_THROW(ErrorCode::InvalidArgument, "optimizer '", text, "' is not accepted; expected sgd or adamw");
}

std::string_view name(OptimizerKind kind) { return kind == OptimizerKind::Sgd ? "sgd" : "adamw"; }

Optimizer::Optimizer(const OptimizerOptions& options, std::size_t num_parameters)
    : options_(options), n_(num_parameters) {
  KIZUNA_CHECK_ARG(options.weight_decay >= 0, "weight decay must be >= 0, got ", options.weight_decay);
  if (options.kind == OptimizerKind::Sgd) {
    KIZUNA_CHECK_ARG(options.momentum >= 0 && options.momentum < 1, "momentum must be in [0, 1), got ",
                     options.momentum);
    if (options.momentum > 0) state_.emplace_back(n_, 0.0f);
  } else {
    KIZUNA_CHECK_ARG(options.beta1 >= 0 && options.beta1 < 1 && options.beta2 >= 0 && options.beta2 < 1,
                     "AdamW betas must be in [0, 1), got ", options.beta1, ", ", options.beta2);
    state_.emplace_back(n_, 0.0f);
    state_.emplace_back(n_, 0.0f);
  }
}

std::vector<std::string> Optimizer::state_names() const {
  if (options_.kind == OptimizerKind::AdamW) return {"exp_avg", "exp_avg_sq"};
  if (options_.momentum > 0) return {"momentum"};
  return {};
}

void Optimizer::step(float* params, const float* grads, float lr) {
  ++steps_;
  const float wd = options_.weight_decay;
  if (options_.kind == OptimizerKind::Sgd) {
    if (options_.momentum == 0) {
      for (std::size_t i = 0; i < n_; ++i) params[i] -= lr * (grads[i] + wd * params[i]);
      return;
    }
    const float mu = options_.momentum;
    float* buf = state_[0].data();
    for (std::size_t i = 0; i < n_; ++i) {
      buf[i] = mu * buf[i] + (grads[i] + wd * params[i]);
      params[i] -= lr * buf[i];
    }
    return;
  }
  // AdamW. The bias corrections in double, then folded into two float
  // factors, as torch's single-tensor implementation does.
  const double t = static_cast<double>(steps_);
  const float b1 = options_.beta1, b2 = options_.beta2;
  const auto step_size = static_cast<float>(lr / (1.0 - std::pow(static_cast<double>(b1), t)));
  const auto bias2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(b2), t)));
  const float decay = 1.0f - lr * wd;
  float* m = state_[0].data();
  float* v = state_[1].data();
  for (std::size_t i = 0; i < n_; ++i) {
    params[i] *= decay;
    m[i] = b1 * m[i] + (1.0f - b1) * grads[i];
    v[i] = b2 * v[i] + (1.0f - b2) * grads[i] * grads[i];
    const float denom = std::sqrt(v[i]) / bias2_sqrt + options_.eps;
    params[i] -= step_size * m[i] / denom;
  }
}

ScheduleKind parse_schedule(std::string_view text) {
  if (text == "constant") return ScheduleKind::Constant;
  if (text == "step") return ScheduleKind::Step;
  if (text == "cosine") return ScheduleKind::Cosine;
  KIZUNA_THROW(ErrorCode::InvalidArgument, "schedule '", text,
               "' is not accepted; expected constant, step or cosine");
}

std::string_view name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::Constant: return "constant";
    case ScheduleKind::Step: return "step";
    case ScheduleKind::Cosine: return "cosine";
  }
  return "?";
}

float learning_rate(const ScheduleOptions& s, std::int64_t step) {
  if (step < s.warmup_steps)
    return s.base_lr * static_cast<float>(step + 1) / static_cast<float>(s.warmup_steps);
  const std::int64_t since = step - s.warmup_steps;
  switch (s.kind) {
    case ScheduleKind::Constant: return s.base_lr;
    case ScheduleKind::Step:
      return s.base_lr * static_cast<float>(std::pow(static_cast<double>(s.gamma),
                                                     static_cast<double>(since / std::max<std::int64_t>(s.step_size, 1))));
    case ScheduleKind::Cosine: {
      const std::int64_t span = std::max<std::int64_t>(s.total_steps - s.warmup_steps, 1);
      const double progress = std::min(static_cast<double>(since) / static_cast<double>(span), 1.0);
      return s.min_lr + (s.base_lr - s.min_lr) * static_cast<float>(0.5 * (1.0 + std::cos(3.141592653589793 * progress)));
    }
  }
  return s.base_lr;
}

}  // namespace kizuna::mlp
