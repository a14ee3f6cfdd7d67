// mlp/model.cpp: see model.hpp.
#include "mlp/model.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "core/check.hpp"
#include "mlp/layers.hpp"

namespace kizuna::mlp {

namespace {

std::vector<int> dims_of(const MlpConfig& config) {
  KIZUNA_CHECK_ARG(config.inputs > 0, "the model needs at least one input, got ", config.inputs);
  KIZUNA_CHECK_ARG(config.outputs > 0, "the model needs at least one output, got ", config.outputs);
  std::vector<int> dims{config.inputs};
  for (int h : config.hidden) {
    KIZUNA_CHECK_ARG(h > 0, "hidden layer widths must be positive, got ", h);
    dims.push_back(h);
  }
  dims.push_back(config.outputs);
  return dims;
}

}  // namespace

std::vector<TensorView> parameter_layout(const MlpConfig& config) {
  const std::vector<int> dims = dims_of(config);
  std::vector<TensorView> layout;
  std::size_t offset = 0;
  for (std::size_t l = 0; l + 1 < dims.size(); ++l) {
    const auto in = static_cast<std::size_t>(dims[l]);
    const auto out = static_cast<std::size_t>(dims[l + 1]);
    const std::string prefix = "fc" + std::to_string(l);
    layout.push_back({prefix + ".weight", offset, out * in,
                      {static_cast<std::int64_t>(out), static_cast<std::int64_t>(in)}});
    offset += out * in;
    layout.push_back({prefix + ".bias", offset, out, {static_cast<std::int64_t>(out)}});
    offset += out;
  }
  return layout;
}

template <typename T>
Mlp<T>::Mlp(const MlpConfig& config, int max_batch, Precision precision)
    : config_(config), dims_(dims_of(config)), max_batch_(max_batch), precision_(precision),
      layout_(parameter_layout(config)) {
  KIZUNA_CHECK_ARG(max_batch > 0, "the batch size must be positive, got ", max_batch);
  if constexpr (!std::is_same_v<T, float>)
    KIZUNA_CHECK_ARG(precision == Precision::Float32, "mixed precision needs Mlp<float>");
  const std::size_t n = layout_.back().offset + layout_.back().count;
  params_.assign(n, T(0));
  auto* grads = new T[n]();
  grads_memory_ = std::shared_ptr<void>(grads, [](void* p) { delete[] static_cast<T*>(p); });
  grads_ = grads;
  if (precision_ != Precision::Float32) {
    compute_params_.assign(n, T(0));
    input_.assign(static_cast<std::size_t>(max_batch) * dims_[0], T(0));
  }

  // Activations: z_l and h_l (hidden layers only) per layer, then the
  // probabilities (classification) and the per-sample losses.
  const auto B = static_cast<std::size_t>(max_batch);
  std::size_t offset = 0;
  const int L = num_layers();
  for (int l = 0; l < L; ++l) {
    z_offset_.push_back(offset);
    offset += B * dims_[l + 1];
    h_offset_.push_back(offset);
    if (l + 1 < L) offset += B * dims_[l + 1];
  }
  probs_offset_ = offset;
  if (config_.loss == Loss::CrossEntropy) offset += B * config_.outputs;
  losses_offset_ = offset;
  offset += B;
  acts_.assign(offset, T(0));
  const int width = *std::max_element(dims_.begin(), dims_.end());
  scratch_a_.assign(B * width, T(0));
  scratch_b_.assign(B * width, T(0));
}

template <typename T>
void Mlp<T>::keep_gradients_in(std::shared_ptr<void> memory) {
  KIZUNA_CHECK_ARG(memory != nullptr, "Mlp::keep_gradients_in: no memory");
  auto* grads = static_cast<T*>(memory.get());
  std::copy_n(grads_, num_parameters(), grads);
  grads_memory_ = std::move(memory);
  grads_ = grads;
}

template <typename T>
void Mlp<T>::init(Rng& rng) {
  for (int l = 0; l < num_layers(); ++l) {
    const TensorView& w = layout_[weight_index(l)];
    const TensorView& b = layout_[bias_index(l)];
    const float bound = std::sqrt(6.0f / static_cast<float>(dims_[l]));
    for (std::size_t i = 0; i < w.count; ++i) params_[w.offset + i] = static_cast<T>(rng.uniform(-bound, bound));
    std::fill_n(params_.begin() + static_cast<std::ptrdiff_t>(b.offset), b.count, T(0));
  }
}

template <typename T>
void Mlp<T>::round(T* x, std::size_t n) const {
  if constexpr (std::is_same_v<T, float>) round_to_precision(x, n, precision_);
}

template <typename T>
const T* Mlp<T>::weights(int layer) const {
  const T* base = precision_ == Precision::Float32 ? params_.data() : compute_params_.data();
  return base + layout_[weight_index(layer)].offset;
}

template <typename T>
const T* Mlp<T>::biases(int layer) const {
  const T* base = precision_ == Precision::Float32 ? params_.data() : compute_params_.data();
  return base + layout_[bias_index(layer)].offset;
}

template <typename T>
const T* Mlp<T>::outputs() const {
  return acts_.data() + z_offset_[num_layers() - 1];
}

template <typename T>
T Mlp<T>::forward(const T* inputs, const Targets<T>& targets, int B) {
  KIZUNA_CHECK_ARG(B > 0 && B <= max_batch_, "batch of ", B, " samples; this model takes 1 to ", max_batch_);
  batch_ = B;
  last_targets_ = targets;
  const int L = num_layers();
  if (precision_ != Precision::Float32) {
    // The 16-bit model: a rounded copy of the float32 master weights, and
    // the batch rounded like any other activation.
    if constexpr (std::is_same_v<T, float>) {
      round_to_precision(compute_params_.data(), params_.data(), params_.size(), precision_);
      round_to_precision(input_.data(), inputs, static_cast<std::size_t>(B) * dims_[0], precision_);
    }
    last_input_ = input_.data();
  } else {
    last_input_ = inputs;
  }

  for (int l = 0; l < L; ++l) {
    const int C = dims_[l], OC = dims_[l + 1];
    const T* in = l == 0 ? last_input_ : h(l - 1);       // (B, C)
    linear_forward(z(l), in, weights(l), biases(l), B, C, OC);  // (B, OC)
    round(z(l), static_cast<std::size_t>(B) * OC);
    if (l + 1 < L) relu_forward(h(l), z(l), static_cast<std::int64_t>(B) * OC);  // (B, OC)
  }

  T* losses = acts_.data() + losses_offset_;  // (B)
  const T* out = z(L - 1);                    // (B, outputs)
  if (config_.loss == Loss::CrossEntropy) {
    if (!targets.labels) return T(0);
    // Softmax and loss in float32 even under bf16/fp16, as amp does.
    softmax_cross_entropy_forward(losses, acts_.data() + probs_offset_, out, targets.labels, B,
                                  config_.outputs);
  } else {
    if (!targets.values) return T(0);
    mse_forward(losses, out, targets.values, B, config_.outputs);
  }
  // The mean in double: the same value whatever the batch size's rounding.
  double sum = 0;
  for (int b = 0; b < B; ++b) sum += static_cast<double>(losses[b]);
  return static_cast<T>(sum / B);
}

template <typename T>
void Mlp<T>::backward(T loss_scale, const ParameterReady& on_ready) {
  const int B = batch_;
  KIZUNA_CHECK_ARG(B > 0, "backward() needs a forward() with targets first");
  const int L = num_layers();
  T* dout = scratch_a_.data();  // (B, d_{l+1}): gradient of layer l's output
  T* dinp = scratch_b_.data();  // (B, d_l): gradient of its input

  // d(scale * mean loss)/d(losses[b]) = scale / B for every sample.
  const T dloss = loss_scale / static_cast<T>(B);
  if (config_.loss == Loss::CrossEntropy) {
    KIZUNA_CHECK_ARG(last_targets_.labels, "backward() needs a forward() with labels");
    softmax_cross_entropy_backward(dout, dloss, acts_.data() + probs_offset_, last_targets_.labels,
                                   B, config_.outputs);
  } else {
    KIZUNA_CHECK_ARG(last_targets_.values, "backward() needs a forward() with targets");
    mse_backward(dout, dloss, z(L - 1), last_targets_.values, B, config_.outputs);
  }
  round(dout, static_cast<std::size_t>(B) * config_.outputs);

  for (int l = L - 1; l >= 0; --l) {
    const int C = dims_[l], OC = dims_[l + 1];
    const T* in = l == 0 ? last_input_ : h(l - 1);  // (B, C)
    T* dweight = grads_ + layout_[weight_index(l)].offset;  // (OC, C)
    T* dbias = grads_ + layout_[bias_index(l)].offset;      // (OC)
    // Bias first (a column sum), and straight to the Reducer: a bucket this
    // gradient completes travels while the weight GEMM below runs.
    linear_backward_bias(dbias, dout, B, OC);
    round(dbias, static_cast<std::size_t>(OC));
    if (on_ready) on_ready(bias_index(l));
    linear_backward_weight(dweight, dout, in, B, C, OC);
    round(dweight, static_cast<std::size_t>(OC) * C);
    // Its bucket may start reducing while the previous layer's backward runs.
    if (on_ready) on_ready(weight_index(l));
    if (l == 0) break;  // no gradient for the data
    linear_backward_input(dinp, dout, weights(l), B, C, OC);  // (B, C)
    round(dinp, static_cast<std::size_t>(B) * C);
    // Through the previous layer's ReLU, in place: (B, C) = d z_{l-1}.
    relu_backward(dinp, dinp, z(l - 1), static_cast<std::int64_t>(B) * C);
    std::swap(dout, dinp);
  }
}

template class Mlp<float>;
template class Mlp<double>;

}  // namespace kizuna::mlp
