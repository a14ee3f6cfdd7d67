// SGD and AdamW against PyTorch's update rules written out in double, and
// the learning-rate schedules at their defining points.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "gradcheck.hpp"
#include "mlp/optimizer.hpp"

using namespace kizuna::mlp;
using kizuna::test::random_values;

TEST_CASE("SGD with momentum and weight decay follows torch.optim.SGD", "[mlp][optimizer]") {
  const float momentum = GENERATE(0.0f, 0.9f);
  const float wd = GENERATE(0.0f, 0.01f);
  CAPTURE(momentum, wd);
  const std::size_t n = 37;
  const auto p0 = random_values(n, 1);
  std::vector<float> p(p0.begin(), p0.end());
  std::vector<double> ref(p0.begin(), p0.end()), buf(n, 0.0);
  Optimizer opt({OptimizerKind::Sgd, momentum, wd}, n);
  CHECK(opt.state_names().size() == (momentum > 0 ? 1u : 0u));
  for (int step = 0; step < 5; ++step) {
    const auto gd = random_values(n, 100 + step);
    const std::vector<float> g(gd.begin(), gd.end());
    const float lr = 0.1f / (step + 1);
    opt.step(p.data(), g.data(), lr);
    for (std::size_t i = 0; i < n; ++i) {
      const double gi = static_cast<double>(g[i]) + wd * ref[i];
      buf[i] = step == 0 ? gi : momentum * buf[i] + gi;  // torch: buf = g on the first step
      ref[i] -= lr * (momentum > 0 ? buf[i] : gi);
    }
  }
  CHECK(opt.steps() == 5);
  for (std::size_t i = 0; i < n; ++i) REQUIRE(p[i] == Approx(ref[i]).epsilon(1e-5).margin(1e-6));
}

TEST_CASE("AdamW follows torch.optim.AdamW", "[mlp][optimizer]") {
  const float wd = GENERATE(0.0f, 0.05f);
  CAPTURE(wd);
  const std::size_t n = 41;
  const auto p0 = random_values(n, 2);
  std::vector<float> p(p0.begin(), p0.end());
  std::vector<double> ref(p0.begin(), p0.end()), m(n, 0.0), v(n, 0.0);
  OptimizerOptions o;
  o.kind = OptimizerKind::AdamW;
  o.weight_decay = wd;
  Optimizer opt(o, n);
  CHECK(opt.state_names() == std::vector<std::string>{"exp_avg", "exp_avg_sq"});
  const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
  for (int t = 1; t <= 6; ++t) {
    const auto gd = random_values(n, 200 + t, -0.01, 0.01);
    const std::vector<float> g(gd.begin(), gd.end());
    const float lr = 1e-3f;
    opt.step(p.data(), g.data(), lr);
    for (std::size_t i = 0; i < n; ++i) {
      ref[i] *= 1 - lr * wd;
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
      const double mhat = m[i] / (1 - std::pow(b1, t));
      const double vhat = v[i] / (1 - std::pow(b2, t));
      ref[i] -= lr * mhat / (std::sqrt(vhat) + eps);
    }
  }
  for (std::size_t i = 0; i < n; ++i) REQUIRE(p[i] == Approx(ref[i]).epsilon(1e-5).margin(1e-7));
  for (std::size_t i = 0; i < n; ++i) REQUIRE(opt.state(0)[i] == Approx(m[i]).epsilon(1e-4).margin(1e-9));
}

TEST_CASE("learning-rate schedules", "[mlp][schedule]") {
  ScheduleOptions s;
  s.base_lr = 0.1f;
  s.total_steps = 100;
  SECTION("constant") {
    CHECK(learning_rate(s, 0) == 0.1f);
    CHECK(learning_rate(s, 99) == 0.1f);
  }
  SECTION("linear warm-up, then cosine to min_lr") {
    s.kind = ScheduleKind::Cosine;
    s.warmup_steps = 10;
    s.min_lr = 0.001f;
    CHECK(learning_rate(s, 0) == Approx(0.01f));
    CHECK(learning_rate(s, 4) == Approx(0.05f));
    CHECK(learning_rate(s, 9) == Approx(0.1f));
    CHECK(learning_rate(s, 10) == Approx(0.1f));
    CHECK(learning_rate(s, 55) == Approx(0.0505f));  // half way: the mean of base and min
    CHECK(learning_rate(s, 100) == Approx(0.001f));
    CHECK(learning_rate(s, 1000) == Approx(0.001f));  // stays at min_lr past the end
    for (std::int64_t t = 10; t < 100; ++t) REQUIRE(learning_rate(s, t + 1) <= learning_rate(s, t));
  }
  SECTION("step decay") {
    s.kind = ScheduleKind::Step;
    s.step_size = 30;
    s.gamma = 0.5f;
    CHECK(learning_rate(s, 29) == Approx(0.1f));
    CHECK(learning_rate(s, 30) == Approx(0.05f));
    CHECK(learning_rate(s, 95) == Approx(0.0125f));
  }
  CHECK(parse_schedule("cosine") == ScheduleKind::Cosine);
  CHECK_THROWS_WITH(parse_schedule("linear"), Catch::Contains("constant, step or cosine"));
  CHECK_THROWS_WITH(parse_optimizer("adam"), Catch::Contains("sgd or adamw"));
}
