// The whole MLP: every parameter's gradient against central finite
// differences (double build), the float32 build against the double one, the
// layer-ready callbacks in backward order, Kaiming initialisation, the RNG,
// and mixed precision's rounding and loss scaling.
#include <catch2/catch.hpp>

#include <cmath>
#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "gradcheck.hpp"
#include "mlp/model.hpp"
#include "mlp/precision.hpp"
#include "mlp/rng.hpp"

using namespace kizuna::mlp;
using kizuna::test::check_gradient;
using kizuna::test::random_values;

namespace {

struct Problem {
  MlpConfig config;
  int B;
  std::vector<double> x;
  std::vector<std::int32_t> labels;
  std::vector<double> y;
};

Problem make_problem(Loss loss) {
  Problem p;
  p.config = MlpConfig{6, {7, 5}, 4, loss};
  p.B = 3;
  p.x = random_values(static_cast<std::size_t>(p.B) * 6, 101, -2, 2);
  p.labels = {0, 3, 1};
  p.y = random_values(static_cast<std::size_t>(p.B) * 4, 102);
  return p;
}

}  // namespace

TEST_CASE("the parameter layout is one flat buffer of named views", "[mlp][model]") {
  const auto layout = parameter_layout(MlpConfig{784, {512, 256}, 10, Loss::CrossEntropy});
  REQUIRE(layout.size() == 6);
  CHECK(layout[0].name == "fc0.weight");
  CHECK(layout[0].shape == std::vector<std::int64_t>{512, 784});
  CHECK(layout[1].name == "fc0.bias");
  CHECK(layout[1].offset == 512 * 784);
  CHECK(layout[5].name == "fc2.bias");
  std::size_t offset = 0;
  for (const auto& v : layout) {
    CHECK(v.offset == offset);
    offset += v.count;
  }
  CHECK(offset == 784 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10);
  CHECK_THROWS_WITH(parameter_layout(MlpConfig{784, {0}, 10, Loss::CrossEntropy}),
                    Catch::Contains("positive"));
}

TEST_CASE("every parameter's gradient matches finite differences", "[mlp][model]") {
  const Loss loss = GENERATE(Loss::CrossEntropy, Loss::MeanSquaredError);
  CAPTURE(loss == Loss::CrossEntropy ? "cross-entropy" : "mse");
  Problem p = make_problem(loss);
  Mlp<double> model(p.config, p.B);
  Rng rng(7);
  model.init(rng);
  // Non-zero biases, so that their gradients flow through every path.
  for (const auto& v : model.layout())
    if (v.name.find("bias") != std::string::npos)
      for (std::size_t i = 0; i < v.count; ++i) model.params()[v.offset + i] = 0.1 * (static_cast<double>(i % 3) - 1);
  const Targets<double> targets{p.labels.data(), p.y.data()};
  auto objective = [&] { return model.forward(p.x.data(), targets, p.B); };
  objective();
  model.backward(1.0);
  const std::vector<double> analytic(model.grads(), model.grads() + model.num_parameters());
  // No pre-activation may sit within 1e-6 of a ReLU kink for the check to
  // be meaningful; with this seed the closest is far away (checked here).
  check_gradient(model.params(), model.num_parameters(), analytic.data(), objective);

  SECTION("the loss scale multiplies every gradient") {
    objective();
    model.backward(1024.0);
    for (std::size_t i = 0; i < model.num_parameters(); ++i)
      REQUIRE(model.grads()[i] == Approx(1024.0 * analytic[i]).epsilon(1e-12).margin(1e-300));
  }
}

TEST_CASE("backward reports gradients last layer first, bias before weight, each final", "[mlp][model]") {
  Problem p = make_problem(Loss::CrossEntropy);
  Mlp<double> model(p.config, p.B);
  Rng rng(3);
  model.init(rng);
  model.forward(p.x.data(), {p.labels.data(), nullptr}, p.B);
  std::vector<std::size_t> order;
  std::vector<std::vector<double>> seen;
  model.backward(1.0, [&](std::size_t index) {
    order.push_back(index);
    const TensorView& v = model.layout()[index];
    seen.emplace_back(model.grads() + v.offset, model.grads() + v.offset + v.count);
  });
  // Exactly the reverse registration order: the Reducer's default buckets.
  CHECK(order == std::vector<std::size_t>{5, 4, 3, 2, 1, 0});
  for (std::size_t k = 0; k < order.size(); ++k) {
    const TensorView& v = model.layout()[order[k]];
    CHECK(seen[k] == std::vector<double>(model.grads() + v.offset, model.grads() + v.offset + v.count));
  }
}

TEST_CASE("the float32 model agrees with the float64 model", "[mlp][model]") {
  // Tolerance: 1e-4 relative to max(1e-2, |g|): float32 rounding through
  // three layers of width <= 64 stays near 1e-6 relative.
  const MlpConfig config{32, {64, 48}, 10, Loss::CrossEntropy};
  const int B = 8;
  const auto x = random_values(static_cast<std::size_t>(B) * 32, 201);
  const std::vector<float> xf(x.begin(), x.end());
  std::vector<std::int32_t> labels(B);
  for (int b = 0; b < B; ++b) labels[b] = b % 10;
  Mlp<double> md(config, B);
  Mlp<float> mf(config, B);
  Rng r1(5), r2(5);
  md.init(r1);
  mf.init(r2);
  for (std::size_t i = 0; i < md.num_parameters(); ++i) REQUIRE(static_cast<float>(md.params()[i]) == mf.params()[i]);
  const double ld = md.forward(x.data(), {labels.data(), nullptr}, B);
  const float lf = mf.forward(xf.data(), {labels.data(), nullptr}, B);
  CHECK(lf == Approx(ld).epsilon(1e-5));
  md.backward(1.0);
  mf.backward(1.0f);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < md.num_parameters(); ++i)
    if (std::abs(md.grads()[i] - mf.grads()[i]) > 1e-4 * std::max(1e-2, std::abs(md.grads()[i]))) ++bad;
  CHECK(bad == 0);
}

TEST_CASE("gradients kept in other memory: copied over, and backward writes there", "[mlp][model]") {
  const MlpConfig config{16, {8}, 4, Loss::CrossEntropy};
  const int B = 4;
  const auto x = random_values(static_cast<std::size_t>(B) * 16, 77);
  const std::vector<float> xf(x.begin(), x.end());
  const std::vector<std::int32_t> labels{0, 1, 2, 3};
  Mlp<float> a(config, B), b(config, B);
  Rng ra(9), rb(9);
  a.init(ra);
  b.init(rb);
  a.forward(xf.data(), {labels.data(), nullptr}, B);
  a.backward(1.0f);
  b.forward(xf.data(), {labels.data(), nullptr}, B);
  b.backward(1.0f);
  const std::size_t n = b.num_parameters();
  auto memory = std::shared_ptr<void>(new float[n](), [](void* p) { delete[] static_cast<float*>(p); });
  b.keep_gradients_in(memory);
  REQUIRE(b.grads() == memory.get());
  CHECK(std::memcmp(a.grads(), b.grads(), n * sizeof(float)) == 0);  // copied over
  std::fill_n(b.grads(), n, 0.0f);
  b.forward(xf.data(), {labels.data(), nullptr}, B);
  b.backward(1.0f);
  CHECK(std::memcmp(a.grads(), static_cast<const float*>(memory.get()), n * sizeof(float)) == 0);
}

TEST_CASE("Kaiming initialisation is seeded, bounded and zero-mean", "[mlp][model]") {
  const MlpConfig config{784, {512, 256}, 10, Loss::CrossEntropy};
  Mlp<float> a(config, 1), b(config, 1), c(config, 1);
  Rng ra(42), rb(42), rc(43);
  a.init(ra);
  b.init(rb);
  c.init(rc);
  CHECK(std::memcmp(a.params(), b.params(), a.num_parameters() * sizeof(float)) == 0);
  CHECK(std::memcmp(a.params(), c.params(), a.num_parameters() * sizeof(float)) != 0);
  for (int l = 0; l < a.num_layers(); ++l) {
    const TensorView& w = a.layout()[Mlp<float>::weight_index(l)];
    const double bound = std::sqrt(6.0 / a.dims()[l]);
    double sum = 0, sum_sq = 0;
    for (std::size_t i = 0; i < w.count; ++i) {
      const double v = a.params()[w.offset + i];
      REQUIRE(std::abs(v) <= bound);
      sum += v;
      sum_sq += v * v;
    }
    // U(-b, b): mean 0, variance b^2 / 3 = 2 / fan_in (He et al.).
    CHECK(std::abs(sum / w.count) < 0.05 * bound);
    CHECK(sum_sq / w.count == Approx(2.0 / a.dims()[l]).epsilon(0.05));
    const TensorView& bias = a.layout()[Mlp<float>::bias_index(l)];
    for (std::size_t i = 0; i < bias.count; ++i) REQUIRE(a.params()[bias.offset + i] == 0.0f);
  }
}

TEST_CASE("Rng is SplitMix64-seeded xoshiro256**", "[mlp][rng]") {
  // SplitMix64 from 0: its first outputs are published constants.
  Rng r(0);
  CHECK(r.state()[0] == 0xe220a8397b1dcdafull);
  CHECK(r.state()[1] == 0x6e789e6aa1b965f4ull);
  CHECK(r.state()[2] == 0x06c45d188009454full);
  CHECK(r.state()[3] == 0xf88bb8a8724c81ecull);
  // xoshiro256**'s first output from that state: rotl(s1 * 5, 7) * 9.
  const std::uint64_t s1 = 0x6e789e6aa1b965f4ull * 5;
  CHECK(r.next() == ((s1 << 7) | (s1 >> 57)) * 9);
  // State round trip.
  Rng a(99);
  for (int i = 0; i < 10; ++i) a.next();
  Rng b(1);
  b.set_state(a.state());
  for (int i = 0; i < 100; ++i) REQUIRE(a.next() == b.next());
  // uniform() in [0, 1) on a 2^-24 grid.
  Rng u(5);
  for (int i = 0; i < 10000; ++i) {
    const float v = u.uniform();
    REQUIRE(v >= 0.0f);
    REQUIRE(v < 1.0f);
    REQUIRE(v * 16777216.0f == std::floor(v * 16777216.0f));
  }
}

TEST_CASE("rounding to bf16 and fp16", "[mlp][precision]") {
  std::vector<float> v{1.0f, 1.0f + 0x1p-9f, 3.14159265f, 1e-3f, 70000.0f, -65504.0f, 1e-8f};
  std::vector<float> bf = v, hf = v;
  round_to_precision(bf.data(), bf.size(), Precision::BFloat16);
  round_to_precision(hf.data(), hf.size(), Precision::Float16);
  for (float x : bf) {
    std::uint32_t bits;
    std::memcpy(&bits, &x, 4);
    CHECK((bits & 0xffffu) == 0);  // bfloat16 is float32's top half
  }
  CHECK(bf[1] == 1.0f);             // 1 + 2^-9 is below bf16's half-ulp (2^-8)
  CHECK(hf[1] == 1.0f + 0x1p-9f);   // and exact in fp16 (10 mantissa bits)
  CHECK(hf[2] == 3.140625f);
  CHECK(std::isinf(hf[4]));         // above fp16's 65504
  CHECK(hf[5] == -65504.0f);
  CHECK(bf[4] == 70144.0f);
  CHECK(hf[6] == 0.0f);             // below fp16's smallest subnormal (6e-8) / 2
  std::vector<float> same = v;
  round_to_precision(same.data(), same.size(), Precision::Float32);
  CHECK(same == v);
  CHECK(parse_precision("bf16") == Precision::BFloat16);
  CHECK_THROWS_WITH(parse_precision("fp8"), Catch::Contains("fp32, bf16 or fp16"));
}

TEST_CASE("the bf16 and fp16 models stay close to fp32 and overflow where fp16 does", "[mlp][precision]") {
  const MlpConfig config{32, {64}, 10, Loss::CrossEntropy};
  const int B = 8;
  const auto xd = random_values(static_cast<std::size_t>(B) * 32, 301);
  const std::vector<float> x(xd.begin(), xd.end());
  std::vector<std::int32_t> labels(B, 2);
  Mlp<float> m32(config, B), m16(config, B, Precision::Float16), mbf(config, B, Precision::BFloat16);
  Rng r1(9), r2(9), r3(9);
  m32.init(r1);
  m16.init(r2);
  mbf.init(r3);
  const float l32 = m32.forward(x.data(), {labels.data(), nullptr}, B);
  CHECK(m16.forward(x.data(), {labels.data(), nullptr}, B) == Approx(l32).epsilon(5e-3));
  CHECK(mbf.forward(x.data(), {labels.data(), nullptr}, B) == Approx(l32).epsilon(3e-2));
  // The master weights are untouched by the rounded forward.
  CHECK(std::memcmp(m32.params(), m16.params(), m32.num_parameters() * 4) == 0);
  m16.backward(1.0f);
  CHECK_FALSE(has_inf_or_nan(m16.grads(), m16.num_parameters()));
  // A loss scale of 2^30 pushes fp16 gradients past 65504: Inf, as on a GPU.
  m16.backward(0x1p30f);
  CHECK(has_inf_or_nan(m16.grads(), m16.num_parameters()));
  // bf16 has float32's range: no overflow at the same scale.
  mbf.forward(x.data(), {labels.data(), nullptr}, B);
  mbf.backward(0x1p30f);
  CHECK_FALSE(has_inf_or_nan(mbf.grads(), mbf.num_parameters()));
}

TEST_CASE("the loss scaler skips overflowing steps, halves, and grows back", "[mlp][precision]") {
  LossScaler scaler({/*init_scale=*/1024.0f, /*min_scale=*/1.0f, /*growth_interval=*/3});
  std::vector<float> g{2048.0f, -1024.0f};
  CHECK(scaler.unscale_and_update(g.data(), g.size()));
  CHECK(g == std::vector<float>{2.0f, -1.0f});
  CHECK(scaler.scale() == 1024.0f);
  g = {1.0f, std::numeric_limits<float>::infinity()};
  CHECK_FALSE(scaler.unscale_and_update(g.data(), g.size()));
  CHECK(scaler.scale() == 512.0f);
  g = {std::numeric_limits<float>::quiet_NaN(), 0.0f};
  CHECK_FALSE(scaler.unscale_and_update(g.data(), g.size()));
  CHECK(scaler.scale() == 256.0f);
  CHECK(scaler.skipped_steps() == 2);
  for (int i = 0; i < 3; ++i) {
    g = {256.0f, 0.0f};
    CHECK(scaler.unscale_and_update(g.data(), g.size()));
    CHECK(g[0] == 1.0f);
  }
  CHECK(scaler.scale() == 512.0f);  // three good steps in a row: doubled
  CHECK(scaler.good_steps() == 0);
  // Never below min_scale.
  LossScaler floor_scaler({2.0f, 1.0f, 100});
  for (int i = 0; i < 5; ++i) {
    g = {std::numeric_limits<float>::infinity(), 0.0f};
    floor_scaler.unscale_and_update(g.data(), g.size());
  }
  CHECK(floor_scaler.scale() == 1.0f);
}
