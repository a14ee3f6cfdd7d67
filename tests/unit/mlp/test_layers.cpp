// Each layer's forward against a plain-loop reference, and its backward
// against central finite differences, in double (the same templated code
// the trainer runs in float); and the float32 build against the double one
// within a stated tolerance.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "gradcheck.hpp"
#include "mlp/layers.hpp"

using namespace kizuna::mlp;
using kizuna::test::check_gradient;
using kizuna::test::random_values;

namespace {

// A fixed linear functional of a layer's output, sum_i w_i out_i: its
// gradient with respect to the output is w, so backward(dout = w) must give
// the gradient of the functional with respect to every input.
double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

TEST_CASE("linear forward equals the plain triple loop", "[mlp][layers]") {
  const int B = GENERATE(1, 3, 17), C = GENERATE(1, 5, 33), OC = GENERATE(1, 4, 10);
  CAPTURE(B, C, OC);
  const auto inp = random_values(static_cast<std::size_t>(B) * C, 1);
  const auto w = random_values(static_cast<std::size_t>(OC) * C, 2);
  const auto bias = random_values(OC, 3);
  std::vector<double> out(static_cast<std::size_t>(B) * OC);
  linear_forward(out.data(), inp.data(), w.data(), bias.data(), B, C, OC);
  for (int b = 0; b < B; ++b)
    for (int o = 0; o < OC; ++o) {
      double ref = bias[o];
      for (int c = 0; c < C; ++c) ref += inp[b * C + c] * w[o * C + c];
      REQUIRE(out[b * OC + o] == Approx(ref).epsilon(1e-12).margin(1e-12));
    }
}

TEST_CASE("linear backward matches finite differences", "[mlp][layers]") {
  const int B = GENERATE(1, 4), C = GENERATE(1, 6), OC = GENERATE(1, 5);
  CAPTURE(B, C, OC);
  auto inp = random_values(static_cast<std::size_t>(B) * C, 11);
  auto w = random_values(static_cast<std::size_t>(OC) * C, 12);
  auto bias = random_values(OC, 13);
  const auto probe = random_values(static_cast<std::size_t>(B) * OC, 14);  // d(objective)/d(out)
  std::vector<double> out(static_cast<std::size_t>(B) * OC);
  auto objective = [&] {
    linear_forward(out.data(), inp.data(), w.data(), bias.data(), B, C, OC);
    return dot(out, probe);
  };
  std::vector<double> dinp(inp.size()), dw(w.size()), dbias(bias.size());
  linear_backward(dinp.data(), dw.data(), dbias.data(), probe.data(), inp.data(), w.data(), B, C, OC);
  SECTION("input") { check_gradient(inp.data(), inp.size(), dinp.data(), objective); }
  SECTION("weight") { check_gradient(w.data(), w.size(), dw.data(), objective); }
  SECTION("bias") { check_gradient(bias.data(), bias.size(), dbias.data(), objective); }
  SECTION("a null dinp skips the input gradient and leaves the others") {
    std::vector<double> dw2(w.size()), db2(bias.size());
    linear_backward<double>(nullptr, dw2.data(), db2.data(), probe.data(), inp.data(), w.data(), B, C, OC);
    CHECK(dw2 == dw);
    CHECK(db2 == dbias);
  }
}

TEST_CASE("relu forward and backward", "[mlp][layers]") {
  // Inputs kept at least 0.05 from the kink, so a ±1e-6 step never crosses it.
  auto inp = random_values(64, 21);
  for (double& x : inp) x += x >= 0 ? 0.05 : -0.05;
  const auto probe = random_values(64, 22);
  std::vector<double> out(64);
  relu_forward(out.data(), inp.data(), 64);
  for (std::size_t i = 0; i < 64; ++i) REQUIRE(out[i] == (inp[i] > 0 ? inp[i] : 0.0));
  std::vector<double> dinp(64);
  relu_backward(dinp.data(), probe.data(), inp.data(), 64);
  check_gradient(inp.data(), inp.size(), dinp.data(), [&] {
    relu_forward(out.data(), inp.data(), 64);
    return dot(out, probe);
  });
  // The derivative at exactly 0 is 0.
  const double zero = 0, one = 1;
  double d = -1;
  relu_backward(&d, &one, &zero, 1);
  CHECK(d == 0);
}

TEST_CASE("softmax cross-entropy forward and backward", "[mlp][layers]") {
  const int B = GENERATE(1, 5), C = GENERATE(2, 10);
  CAPTURE(B, C);
  auto logits = random_values(static_cast<std::size_t>(B) * C, 31, -3, 3);
  std::vector<std::int32_t> targets(B);
  for (int b = 0; b < B; ++b) targets[b] = (b * 7 + 3) % C;
  std::vector<double> losses(B), probs(static_cast<std::size_t>(B) * C);
  softmax_cross_entropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), B, C);
  for (int b = 0; b < B; ++b) {
    double z = 0, psum = 0;
    for (int c = 0; c < C; ++c) z += std::exp(logits[b * C + c]), psum += probs[b * C + c];
    CHECK(losses[b] == Approx(std::log(z) - logits[b * C + targets[b]]).epsilon(1e-12));
    CHECK(psum == Approx(1.0).epsilon(1e-12));
  }
  // Objective: the mean loss (dloss = 1/B), as the trainer uses it.
  auto mean_loss = [&] {
    softmax_cross_entropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), B, C);
    double s = 0;
    for (double l : losses) s += l;
    return s / B;
  };
  mean_loss();
  std::vector<double> dlogits(logits.size());
  softmax_cross_entropy_backward(dlogits.data(), 1.0 / B, probs.data(), targets.data(), B, C);
  check_gradient(logits.data(), logits.size(), dlogits.data(), mean_loss);
}

TEST_CASE("softmax cross-entropy stays finite on huge logits", "[mlp][layers]") {
  const std::vector<float> logits{1000.0f, -1000.0f, 0.0f};
  const std::int32_t target = 1;
  float loss = 0, probs[3];
  softmax_cross_entropy_forward(&loss, probs, logits.data(), &target, 1, 3);
  CHECK(loss == Approx(2000.0f));
  CHECK(probs[0] == 1.0f);
}

TEST_CASE("mean squared error forward and backward", "[mlp][layers]") {
  const int B = GENERATE(1, 4), D = GENERATE(1, 5);
  CAPTURE(B, D);
  auto preds = random_values(static_cast<std::size_t>(B) * D, 41);
  const auto targets = random_values(static_cast<std::size_t>(B) * D, 42);
  std::vector<double> losses(B);
  auto mean_loss = [&] {
    mse_forward(losses.data(), preds.data(), targets.data(), B, D);
    double s = 0;
    for (double l : losses) s += l;
    return s / B;
  };
  // PyTorch's MSELoss(reduction="mean"): the mean over all B*D elements.
  double ref = 0;
  for (std::size_t i = 0; i < preds.size(); ++i) ref += (preds[i] - targets[i]) * (preds[i] - targets[i]);
  CHECK(mean_loss() == Approx(ref / (B * D)).epsilon(1e-12));
  std::vector<double> dpreds(preds.size());
  mse_backward(dpreds.data(), 1.0 / B, preds.data(), targets.data(), B, D);
  check_gradient(preds.data(), preds.size(), dpreds.data(), mean_loss);
}

TEST_CASE("the float32 layers agree with the float64 ones", "[mlp][layers]") {
  // Tolerance: float32 GEMMs of length K carry a relative error of about
  // K * 2^-24 in the worst case; with K <= 64 and values in [-1, 1] the
  // absolute error stays below 64 * 6e-8 * 64 ~ 2.5e-4. We require 1e-4
  // relative to max(1, |value|), which holds with a wide margin in practice.
  const int B = 16, C = 64, OC = 32;
  const auto inp = random_values(static_cast<std::size_t>(B) * C, 51);
  const auto w = random_values(static_cast<std::size_t>(OC) * C, 52);
  const auto bias = random_values(OC, 53);
  const auto dout = random_values(static_cast<std::size_t>(B) * OC, 54);
  auto to_float = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
  const auto inp_f = to_float(inp), w_f = to_float(w), bias_f = to_float(bias), dout_f = to_float(dout);
  std::vector<double> out(static_cast<std::size_t>(B) * OC), dinp(inp.size()), dw(w.size()), db(OC);
  std::vector<float> out_f(out.size()), dinp_f(inp.size()), dw_f(w.size()), db_f(OC);
  linear_forward(out.data(), inp.data(), w.data(), bias.data(), B, C, OC);
  linear_forward(out_f.data(), inp_f.data(), w_f.data(), bias_f.data(), B, C, OC);
  linear_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), B, C, OC);
  linear_backward(dinp_f.data(), dw_f.data(), db_f.data(), dout_f.data(), inp_f.data(), w_f.data(), B, C, OC);
  auto close = [](const std::vector<double>& d, const std::vector<float>& f) {
    for (std::size_t i = 0; i < d.size(); ++i)
      if (std::abs(d[i] - f[i]) > 1e-4 * std::max(1.0, std::abs(d[i]))) return false;
    return true;
  };
  CHECK(close(out, out_f));
  CHECK(close(dinp, dinp_f));
  CHECK(close(dw, dw_f));
  CHECK(close(db, db_f));
}
