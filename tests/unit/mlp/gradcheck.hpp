// tests/unit/mlp/gradcheck.hpp: central finite differences.
//
// check_gradient(x, analytic, f) perturbs each x[i] by ±h, evaluates the
// scalar f() and compares (f(x+h) - f(x-h)) / 2h with analytic[i]:
//   |analytic - numeric| <= tol * max(1, |analytic|, |numeric|)
// In double with h = 1e-6 the difference quotient is accurate to about
// 1e-9 (truncation h^2 |f'''| plus rounding eps |f| / h), so the tests use
// tol = 1e-6: a wrong gradient is off by far more, a right one never is.
// A failure names the index, both values and the difference.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <vector>

#include "mlp/rng.hpp"

namespace kizuna::test {

inline void check_gradient(double* x, std::size_t n, const double* analytic,
                           const std::function<double()>& f, double tol = 1e-6, double h = 1e-6) {
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double up = f();
    x[i] = saved - h;
    const double down = f();
    x[i] = saved;
    const double numeric = (up - down) / (2 * h);
    const double scale = std::max({1.0, std::abs(analytic[i]), std::abs(numeric)});
    if (std::abs(analytic[i] - numeric) > tol * scale) {
      if (bad++ < 5)
        FAIL_CHECK("gradient mismatch at index " << i << ": analytic " << analytic[i] << ", numeric "
                                                 << numeric << ", difference " << analytic[i] - numeric);
    }
  }
  CHECK(bad == 0);
}

// n values uniform in [-1, 1), from a seeded generator.
inline std::vector<double> random_values(std::size_t n, std::uint64_t seed, double lo = -1, double hi = 1) {
  mlp::Rng rng(seed);
  std::vector<double> v(n);
  for (double& x : v) x = lo + (hi - lo) * rng.uniform();
  return v;
}

}  // namespace kizuna::test
