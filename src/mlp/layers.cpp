// mlp/layers.cpp: see layers.hpp.
#include "mlp/layers.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace kizuna::mlp {

void set_blas_threads(int threads) { openblas_set_num_threads(threads); }
int blas_threads() { return openblas_get_num_threads(); }

template <>
void gemm<float>(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                 int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

template <>
void gemm<double>(bool trans_a, bool trans_b, int m, int n, int k, double alpha, const double* a,
                  int lda, const double* b, int ldb, double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// ---- linear ----------------------------------------------------------------

template <typename T>
void linear_forward(T* out, const T* inp, const T* weight, const T* bias, int B, int C, int OC) {
  // Each row of out starts as the bias, and the GEMM adds inp · weightᵀ onto
  // it (beta = 1): one pass over out instead of a GEMM pass plus a bias pass.
  for (int b = 0; b < B; ++b) std::copy(bias, bias + OC, out + static_cast<std::ptrdiff_t>(b) * OC);
  // out (B, OC) += inp (B, C) · weightᵀ (C, OC)
  gemm<T>(false, true, B, OC, C, T(1), inp, C, weight, C, T(1), out, OC);
}

template <typename T>
void linear_backward_bias(T* dbias, const T* dout, int B, int OC) {
  // dbias (OC) = sum over the batch of dout; rows in order, so the sum is
  // the same bits on every machine.
  std::fill(dbias, dbias + OC, T(0));
  for (int b = 0; b < B; ++b) {
    const T* row = dout + static_cast<std::ptrdiff_t>(b) * OC;
    for (int o = 0; o < OC; ++o) dbias[o] += row[o];
  }
}

template <typename T>
void linear_backward_weight(T* dweight, const T* dout, const T* inp, int B, int C, int OC) {
  // dweight (OC, C) = doutᵀ (OC, B) · inp (B, C)
  gemm<T>(true, false, OC, C, B, T(1), dout, OC, inp, C, T(0), dweight, C);
}

template <typename T>
void linear_backward_input(T* dinp, const T* dout, const T* weight, int B, int C, int OC) {
  // dinp (B, C) = dout (B, OC) · weight (OC, C)
  gemm<T>(false, false, B, C, OC, T(1), dout, OC, weight, C, T(0), dinp, C);
}

template <typename T>
void linear_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                     int B, int C, int OC) {
  linear_backward_bias(dbias, dout, B, OC);
  linear_backward_weight(dweight, dout, inp, B, C, OC);
  if (dinp) linear_backward_input(dinp, dout, weight, B, C, OC);
}

// ---- relu ------------------------------------------------------------------

template <typename T>
void relu_forward(T* out, const T* inp, std::int64_t N) {
  for (std::int64_t i = 0; i < N; ++i) out[i] = inp[i] > T(0) ? inp[i] : T(0);
}

template <typename T>
void relu_backward(T* dinp, const T* dout, const T* inp, std::int64_t N) {
  for (std::int64_t i = 0; i < N; ++i) dinp[i] = inp[i] > T(0) ? dout[i] : T(0);
}

// ---- softmax cross-entropy ---------------------------------------------------

template <typename T>
void softmax_cross_entropy_forward(T* losses, T* probs, const T* logits,
                                   const std::int32_t* targets, int B, int C) {
  for (int b = 0; b < B; ++b) {
    const T* z = logits + static_cast<std::ptrdiff_t>(b) * C;
    T* p = probs + static_cast<std::ptrdiff_t>(b) * C;
    // Subtract the max so exp never overflows; sum in the type itself.
    T max = z[0];
    for (int c = 1; c < C; ++c) max = std::max(max, z[c]);
    T sum = 0;
    for (int c = 0; c < C; ++c) {
      p[c] = std::exp(z[c] - max);
      sum += p[c];
    }
    const T inv = T(1) / sum;
    for (int c = 0; c < C; ++c) p[c] *= inv;
    // -log p[y] = log(sum) - (z[y] - max): exact even when p[y] underflows.
    losses[b] = std::log(sum) - (z[targets[b]] - max);
  }
}

template <typename T>
void softmax_cross_entropy_backward(T* dlogits, T dloss, const T* probs,
                                    const std::int32_t* targets, int B, int C) {
  for (int b = 0; b < B; ++b) {
    const T* p = probs + static_cast<std::ptrdiff_t>(b) * C;
    T* d = dlogits + static_cast<std::ptrdiff_t>(b) * C;
    for (int c = 0; c < C; ++c) d[c] = dloss * p[c];
    d[targets[b]] -= dloss;
  }
}

// ---- mean squared error ------------------------------------------------------

template <typename T>
void mse_forward(T* losses, const T* preds, const T* targets, int B, int D) {
  for (int b = 0; b < B; ++b) {
    const T* p = preds + static_cast<std::ptrdiff_t>(b) * D;
    const T* t = targets + static_cast<std::ptrdiff_t>(b) * D;
    T sum = 0;
    for (int d = 0; d < D; ++d) sum += (p[d] - t[d]) * (p[d] - t[d]);
    losses[b] = sum / T(D);
  }
}

template <typename T>
void mse_backward(T* dpreds, T dloss, const T* preds, const T* targets, int B, int D) {
  const T k = dloss * T(2) / T(D);
  const std::ptrdiff_t n = static_cast<std::ptrdiff_t>(B) * D;
  for (std::ptrdiff_t i = 0; i < n; ++i) dpreds[i] = k * (preds[i] - targets[i]);
}

// ---- instantiations ------------------------------------------------------------

#define KIZUNA_MLP_INSTANTIATE(T)                                                                \
  template void linear_forward<T>(T*, const T*, const T*, const T*, int, int, int);             \
  template void linear_backward<T>(T*, T*, T*, const T*, const T*, const T*, int, int, int);    \
  template void linear_backward_bias<T>(T*, const T*, int, int);                               \
  template void linear_backward_weight<T>(T*, const T*, const T*, int, int, int);              \
  template void linear_backward_input<T>(T*, const T*, const T*, int, int, int);                \
  template void relu_forward<T>(T*, const T*, std::int64_t);                                   \
  template void relu_backward<T>(T*, const T*, const T*, std::int64_t);                        \
  template void softmax_cross_entropy_forward<T>(T*, T*, const T*, const std::int32_t*, int, int); \
  template void softmax_cross_entropy_backward<T>(T*, T, const T*, const std::int32_t*, int, int); \
  template void mse_forward<T>(T*, const T*, const T*, int, int);                              \
  template void mse_backward<T>(T*, T, const T*, const T*, int, int);

KIZUNA_MLP_INSTANTIATE(float)
KIZUNA_MLP_INSTANTIATE(double)

#undef KIZUNA_MLP_INSTANTIATE

}  // namespace kizuna::mlp
