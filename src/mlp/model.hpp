// mlp/model.hpp: the multilayer perceptron, its flat parameter buffer and
// its forward and backward passes.
//
// Architecture, for dims = {inputs, hidden..., outputs} and L = dims - 1
// layers:
//
//   x (B, d0) -> fc0 -> z0 (B, d1) -> relu -> h0 (B, d1) -> fc1 -> ...
//             -> fc{L-1} -> z{L-1} (B, dL) = logits / predictions
//             -> softmax cross-entropy against labels (classification)
//                or mean squared error against targets (regression)
//
// Parameters (llm.c's params_memory): one flat array holding, in order,
// fc0.weight (d1, d0), fc0.bias (d1), fc1.weight (d2, d1), ... Each is a
// named view (offset, count, shape) into it; the gradients live in a second
// array with the same layout. The Reducer's buckets are views of that
// gradient array, so handing gradients to DDP copies nothing.
//
// Activations (llm.c's acts_memory): one flat array sized for max_batch,
// with z_l and h_l for every layer and, for classification, the softmax
// probabilities and the per-sample losses. Backward uses two ping-pong
// scratch rows of width max(dims) for the activation gradients.
//
// backward(scale, on_ready) runs the layers last to first; for each layer
// it computes the bias gradient and calls on_ready(its index) (the trainer
// marks it ready with the Reducer, whose bucket may then start its
// all-reduce), then the weight gradient and on_ready again, and only then
// the input gradient that starts the previous layer's backward. So the
// communication of a bucket overlaps the compute that follows its last
// gradient: with PyTorch's 1 MiB first bucket on 784-512-256-10, the first
// bucket (everything but fc0.weight) is closed by fc0.bias and travels
// during fc0.weight's GEMM, the largest of the backward pass.
//
// Precision (mlp/precision.hpp) applies to Mlp<float> only; Mlp<double>
// exists for the finite-difference tests of the whole network.
//
// Not thread-safe; the owner runs forward and backward from one thread.
// Sizes are checked on construction; forward() checks B <= max_batch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mlp/precision.hpp"
#include "mlp/rng.hpp"

namespace kizuna::mlp {

enum class Loss { CrossEntropy, MeanSquaredError };

struct MlpConfig {
  int inputs = 784;
  std::vector<int> hidden = {512, 256};
  int outputs = 10;
  Loss loss = Loss::CrossEntropy;
};

// One parameter tensor inside the flat buffers; offset and count in elements.
struct TensorView {
  std::string name;
  std::size_t offset = 0;
  std::size_t count = 0;
  std::vector<std::int64_t> shape;
};

// The flat layout of MlpConfig's parameters, in registration (forward)
// order: fc0.weight, fc0.bias, fc1.weight, ...
std::vector<TensorView> parameter_layout(const MlpConfig& config);

// What forward() trains against: labels for CrossEntropy, (B, outputs)
// values for MeanSquaredError. Both null: inference only (no loss).
template <typename T>
struct Targets {
  const std::int32_t* labels = nullptr;  // (B)
  const T* values = nullptr;             // (B, outputs)
};

template <typename T>
class Mlp {
 public:
  // Called during backward once the gradient of layout()[index] is final.
  using ParameterReady = std::function<void(std::size_t index)>;

  Mlp(const MlpConfig& config, int max_batch, Precision precision = Precision::Float32);
  // Not copyable: a copy would share the gradient memory.
  Mlp(const Mlp&) = delete;
  Mlp& operator=(const Mlp&) = delete;

  const MlpConfig& config() const { return config_; }
  int num_layers() const { return static_cast<int>(dims_.size()) - 1; }
  // dims()[l] -> dims()[l+1] is layer l.
  const std::vector<int>& dims() const { return dims_; }
  int max_batch() const { return max_batch_; }
  Precision precision() const { return precision_; }

  const std::vector<TensorView>& layout() const { return layout_; }
  std::size_t num_parameters() const { return params_.size(); }
  T* params() { return params_.data(); }
  const T* params() const { return params_.data(); }
  T* grads() { return grads_; }
  const T* grads() const { return grads_; }
  // Keeps the gradients in `memory` from now on (num_parameters() elements
  // of T, suitably aligned; the trainer passes symmetric memory from
  // Communicator::allocate_symmetric, whose all-reduces read the peers'
  // gradients in place). The current gradients are copied over.
  void keep_gradients_in(std::shared_ptr<void> memory);
  // Index into layout() of layer l's weight (2l) and bias (2l + 1).
  static std::size_t weight_index(int layer) { return 2 * static_cast<std::size_t>(layer); }
  static std::size_t bias_index(int layer) { return 2 * static_cast<std::size_t>(layer) + 1; }

  // Kaiming-He uniform for the ReLU that follows: weight ~ U(-b, b) with
  // b = sqrt(6 / fan_in), so activations keep their variance layer to
  // layer; biases 0. Draws the weights in layout order from `rng`.
  void init(Rng& rng);

  // inputs (B, inputs). Returns the mean loss over the batch when targets
  // are given (0 otherwise); the outputs stay in outputs() until the next
  // forward.
  T forward(const T* inputs, const Targets<T>& targets, int B);
  // (B, outputs): logits or predictions of the last forward.
  const T* outputs() const;
  // (B): per-sample losses of the last forward with targets.
  const T* losses() const { return acts_.data() + losses_offset_; }

  // Gradients of (loss_scale x the mean loss of the last forward) into
  // grads(), overwriting them; see the class comment for on_ready.
  void backward(T loss_scale, const ParameterReady& on_ready = {});

 private:
  const T* weights(int layer) const;  // the weights forward uses (rounded copy under bf16/fp16)
  const T* biases(int layer) const;
  T* z(int layer) { return acts_.data() + z_offset_[layer]; }
  T* h(int layer) { return acts_.data() + h_offset_[layer]; }
  void round(T* x, std::size_t n) const;

  MlpConfig config_;
  std::vector<int> dims_;
  int max_batch_;
  Precision precision_;
  std::vector<TensorView> layout_;
  std::vector<T> params_;
  std::shared_ptr<void> grads_memory_;  // owns what grads_ points to
  T* grads_ = nullptr;
  std::vector<T> compute_params_;  // bf16/fp16: params_ rounded, refreshed each forward
  std::vector<T> acts_;
  std::vector<std::size_t> z_offset_, h_offset_;
  std::size_t probs_offset_ = 0, losses_offset_ = 0;
  std::vector<T> input_;           // bf16/fp16: the rounded input batch
  std::vector<T> scratch_a_, scratch_b_;  // (max_batch, max(dims)) activation gradients
  // The last forward's batch.
  int batch_ = 0;
  const T* last_input_ = nullptr;
  Targets<T> last_targets_;
};

extern template class Mlp<float>;
extern template class Mlp<double>;

}  // namespace kizuna::mlp
