// Softmax and log-softmax against their scalar references on every compiled SIMD target, over
// row lengths that leave every tail (up to a real vocabulary size), with one and two threads.
#include "loom/runtime/cpu/softmax.h"

#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace loom::cpu {
namespace {

const int64_t kLengths[] = {1, 2, 3, 15, 16, 17, 33, 100, 1000, 32001, 151936};

std::vector<float> random_logits(int64_t n, float stddev, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, stddev);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = nd(rng);
  return v;
}

void for_each_target(const std::function<void(ThreadPool&)>& fn) {
  ThreadPool one(1), two(2);
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    for (ThreadPool* pool : {&two, &one}) {
      SCOPED_TRACE(std::string(hwy::TargetName(target)) + " threads=" + std::to_string(pool->num_threads()));
      fn(*pool);
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

void expect_close(const float* got, const float* want, int64_t n, double atol, double rtol, const std::string& what) {
  int bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const bool same_inf = std::isinf(want[i]) && got[i] == want[i];
    if (!same_inf && !(std::fabs(got[i] - want[i]) <= atol + rtol * std::fabs(want[i]))) {
      if (bad < 5) ADD_FAILURE() << what << " [" << i << "]: got " << got[i] << " want " << want[i];
      ++bad;
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << n << " differ";
}

TEST(Softmax, MatchesReference) {
  for_each_target([](ThreadPool& pool) {
    for (int64_t rows : {1, 3})
      for (int64_t n : kLengths)
        for (float spread : {1.0f, 12.0f}) {
          const std::string what = "rows=" + std::to_string(rows) + " n=" + std::to_string(n) +
                                   " spread=" + std::to_string(spread);
          auto x = random_logits(rows * n, spread, static_cast<uint32_t>(n));
          // Masked-out logits (a logits processor's -inf) in every row but a 1-long one.
          if (n > 2)
            for (int64_t r = 0; r < rows; ++r) x[static_cast<size_t>(r * n + n / 2)] = -INFINITY;
          std::vector<float> got(x.size()), want(x.size());
          softmax(x.data(), rows, n, got.data(), pool);
          softmax_ref(x.data(), rows, n, want.data());
          expect_close(got.data(), want.data(), rows * n, 1e-12, 2e-5, "softmax " + what);
          log_softmax(x.data(), rows, n, got.data(), pool);
          log_softmax_ref(x.data(), rows, n, want.data());
          expect_close(got.data(), want.data(), rows * n, 2e-5, 2e-6, "log_softmax " + what);
          // In place.
          std::vector<float> inplace = x;
          softmax(inplace.data(), rows, n, inplace.data(), pool);
          softmax_ref(x.data(), rows, n, want.data());
          expect_close(inplace.data(), want.data(), rows * n, 1e-12, 2e-5, "in place " + what);
        }
  });
}

TEST(Softmax, ProbabilitiesSumToOneAndLargeLogitsDoNotOverflow) {
  ThreadPool pool(2);
  // Logits near f32's exp() overflow point: a naive exp(x) / sum would give inf / inf.
  std::vector<float> x = {1000.0f, 999.0f, 998.0f, -1000.0f, 1000.0f};
  std::vector<float> p(x.size()), lp(x.size());
  softmax(x.data(), 1, 5, p.data(), pool);
  log_softmax(x.data(), 1, 5, lp.data(), pool);
  double sum = 0;
  for (float v : p) sum += v;
  EXPECT_NEAR(sum, 1.0, 1e-6);
  // Exact values: e^0, e^-1, e^-2, 0, e^0 over 2 + e^-1 + e^-2.
  const double z = 2 + std::exp(-1.0) + std::exp(-2.0);
  EXPECT_NEAR(p[0], 1 / z, 1e-7);
  EXPECT_NEAR(p[1], std::exp(-1.0) / z, 1e-7);
  EXPECT_EQ(p[3], 0.0f);
  EXPECT_NEAR(lp[2], -2 - std::log(z), 1e-5);
}

}  // namespace
}  // namespace loom::cpu
