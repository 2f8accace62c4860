// Shared by loom_portable's kernel tests (which link nothing of loom).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace portable_test {

// n values uniform in [-scale, scale), reproducible from the seed.
inline std::vector<float> random_vec(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// Largest |a − b| relative to max(1, |a|): absolute near zero, relative for large values.
inline double max_rel(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    d = std::max(d, std::fabs(static_cast<double>(a[i]) - b[i]) / std::max(1.0, std::fabs(static_cast<double>(a[i]))));
  return d;
}

}  // namespace portable_test
