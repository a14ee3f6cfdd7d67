// mlp/layers.hpp: the MLP's layers as forward/backward function pairs.
//
// In the manner of llm.c: each layer is a pair of free functions over raw
// row-major arrays, the backward taking the gradients of the forward's
// inputs first (in the forward's order), then the gradient of its output,
// then the forward inputs it needs, then the same sizes. Shapes are in the
// comments: B is the batch, C the input features, OC the output features.
//
//   linear   out = inp · weightᵀ + bias             GEMM through BLAS
//   relu     out = max(inp, 0)
//   softmax cross-entropy (classification), fused: the gradient of
//            mean-of-losses with respect to the logits is (probs - onehot)/B
//   mean squared error (regression): losses[b] = mean_d (pred - target)^2,
//            PyTorch's MSELoss(reduction="mean") is the mean of losses
//
// Backward functions overwrite their outputs (no +=): the trainer computes
// each gradient once per step. Every function is a template instantiated for
// float (training) and double (the finite-difference tests run the same
// code in double, where central differences are accurate to ~1e-8).
// The GEMMs are cblas_sgemm / cblas_dgemm: no hand-written GEMM on the CPU.
// No allocation, no threads of their own (BLAS may use its own, see blas.hpp).
#pragma once

#include <cstdint>

namespace kizuna::mlp {

// OpenBLAS's worker threads per process. The trainer sets 1 by default:
// with one rank per core, BLAS threads would only fight the other ranks (and
// the communicator's threads) for the cores; one thread also makes every
// GEMM's summation order, hence the bits, the same run after run.
void set_blas_threads(int threads);
int blas_threads();

// out = op(a) · op(b) * alpha + out * beta, row-major (BLAS's gemm).
template <typename T>
void gemm(bool trans_a, bool trans_b, int m, int n, int k, T alpha, const T* a, int lda,
          const T* b, int ldb, T beta, T* c, int ldc);

// ---- linear ----------------------------------------------------------------
template <typename T>
void linear_forward(T* out,           // (B, OC)
                    const T* inp,     // (B, C)
                    const T* weight,  // (OC, C)
                    const T* bias,    // (OC)
                    int B, int C, int OC);

// dinp may be null (the first layer needs no input gradient: that skips its
// GEMM, the largest of the backward pass on Fashion-MNIST's 784 inputs).
template <typename T>
void linear_backward(T* dinp,          // (B, C) or null
                     T* dweight,       // (OC, C)
                     T* dbias,         // (OC)
                     const T* dout,    // (B, OC)
                     const T* inp,     // (B, C)
                     const T* weight,  // (OC, C)
                     int B, int C, int OC);

// linear_backward in its three parts, in the order the trainer runs them:
// the bias gradient (a cheap column sum), the weight gradient (a GEMM) and
// the input gradient (a GEMM). The trainer hands each parameter gradient to
// the Reducer as soon as it is computed, so that a bucket closed by this
// layer's bias already travels while the weight GEMM runs, and a bucket
// closed by the weight travels during the previous layer's backward.
template <typename T>
void linear_backward_bias(T* dbias,       // (OC)
                          const T* dout,  // (B, OC)
                          int B, int OC);
template <typename T>
void linear_backward_weight(T* dweight,     // (OC, C)
                            const T* dout,  // (B, OC)
                            const T* inp,   // (B, C)
                            int B, int C, int OC);
template <typename T>
void linear_backward_input(T* dinp,          // (B, C)
                           const T* dout,    // (B, OC)
                           const T* weight,  // (OC, C)
                           int B, int C, int OC);

// ---- relu ------------------------------------------------------------------
template <typename T>
void relu_forward(T* out,        // (N)
                  const T* inp,  // (N)
                  std::int64_t N);

// The derivative at 0 is taken as 0 (PyTorch's choice).
template <typename T>
void relu_backward(T* dinp,        // (N)
                   const T* dout,  // (N)
                   const T* inp,   // (N)
                   std::int64_t N);

// ---- softmax cross-entropy ---------------------------------------------------
// losses[b] = -log softmax(logits[b])[targets[b]], computed stably
// (max-subtracted, log-sum-exp); probs keeps the softmax for backward.
// Targets must lie in [0, C) (the caller checks the data set once).
template <typename T>
void softmax_cross_entropy_forward(T* losses,                   // (B)
                                   T* probs,                    // (B, C)
                                   const T* logits,             // (B, C)
                                   const std::int32_t* targets,  // (B)
                                   int B, int C);

// dlogits[b, c] = dloss * (probs[b, c] - [c == targets[b]]), where dloss is
// d(objective)/d(losses[b]), the same for every b: 1/B for the mean loss,
// times the loss scale under fp16.
template <typename T>
void softmax_cross_entropy_backward(T* dlogits,                   // (B, C)
                                    T dloss,
                                    const T* probs,               // (B, C)
                                    const std::int32_t* targets,  // (B)
                                    int B, int C);

// ---- mean squared error ------------------------------------------------------
// losses[b] = (1/D) sum_d (preds[b, d] - targets[b, d])^2
template <typename T>
void mse_forward(T* losses,        // (B)
                 const T* preds,   // (B, D)
                 const T* targets,  // (B, D)
                 int B, int D);

// dpreds[b, d] = dloss * 2 (preds[b, d] - targets[b, d]) / D
template <typename T>
void mse_backward(T* dpreds,         // (B, D)
                  T dloss,
                  const T* preds,    // (B, D)
                  const T* targets,  // (B, D)
                  int B, int D);

}  // namespace kizuna::mlp
