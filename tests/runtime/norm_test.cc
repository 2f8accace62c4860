// RMSNorm, fused add + RMSNorm and LayerNorm against their scalar references on every compiled
// SIMD target, over row lengths that leave every tail, with one and two threads.
#include "loom/runtime/cpu/norm.h"

#include "loom/runtime/cpu/elementwise.h"

#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace loom::cpu {
namespace {

const int64_t kLengths[] = {1, 3, 5, 15, 16, 17, 33, 64, 100, 896, 4099};
const int64_t kRows[] = {1, 3, 70};

std::vector<float> random_values(int64_t n, float mean, float stddev, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(mean, stddev);
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
    if (!(std::fabs(got[i] - want[i]) <= atol + rtol * std::fabs(want[i]))) {
      if (bad < 5) ADD_FAILURE() << what << " [" << i << "]: got " << got[i] << " want " << want[i];
      ++bad;
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << n << " differ";
}

TEST(Norm, RmsNormMatchesReference) {
  for_each_target([](ThreadPool& pool) {
    for (int64_t rows : kRows)
      for (int64_t n : kLengths)
        for (float offset : {0.0f, 1.0f})
          for (bool with_weight : {true, false}) {
            const std::string what = "rows=" + std::to_string(rows) + " n=" + std::to_string(n) +
                                     " offset=" + std::to_string(offset) + (with_weight ? "" : " no weight");
            const auto x = random_values(rows * n, 0.3f, 2.0f, 1), w = random_values(n, 0.0f, 0.5f, 2);
            const float* wp = with_weight ? w.data() : nullptr;
            std::vector<float> got(x.size()), want(x.size());
            rmsnorm(x.data(), rows, n, wp, 1e-6f, offset, got.data(), pool);
            rmsnorm_ref(x.data(), n, rows, n, wp, 1e-6f, offset, want.data(), n);
            expect_close(got.data(), want.data(), rows * n, 1e-6, 2e-6, what);
            // In place.
            std::vector<float> inplace = x;
            rmsnorm(inplace.data(), rows, n, wp, 1e-6f, offset, inplace.data(), pool);
            expect_close(inplace.data(), want.data(), rows * n, 1e-6, 2e-6, "in place " + what);
          }
  });
}

TEST(Norm, RmsNormStridedRowsLeaveGapsAlone) {
  for_each_target([](ThreadPool& pool) {
    // Per-head q norm inside a fused projection: rows of 128 every 160 elements.
    const int64_t rows = 40, n = 128, xs = 160, os = 130;
    const auto x = random_values(rows * xs, 0.0f, 1.0f, 3), w = random_values(n, 1.0f, 0.1f, 4);
    std::vector<float> got(static_cast<size_t>(rows * os), 9.0f), want(got.size(), 9.0f);
    rmsnorm_strided(x.data(), xs, rows, n, w.data(), 1e-5f, 0.0f, got.data(), os, pool);
    rmsnorm_ref(x.data(), xs, rows, n, w.data(), 1e-5f, 0.0f, want.data(), os);
    expect_close(got.data(), want.data(), rows * os, 1e-6, 2e-6, "strided");
  });
}

TEST(Norm, RmsNormEpsilonDominatesTinyRows) {
  ThreadPool pool(1);
  const std::vector<float> x = {1e-4f, -2e-4f, 3e-4f};
  std::vector<float> got(3), want(3);
  rmsnorm(x.data(), 1, 3, nullptr, 1e-2f, 0.0f, got.data(), pool);
  rmsnorm_ref(x.data(), 3, 1, 3, nullptr, 1e-2f, 0.0f, want.data(), 3);
  expect_close(got.data(), want.data(), 3, 0, 2e-6, "eps");
  // mean(x^2) ≈ 4.7e-8 is negligible against eps: out ≈ x / sqrt(eps) = 10 x.
  EXPECT_NEAR(got[2], 3e-3f, 1e-6f);
}

TEST(Norm, AddRmsNormMatchesReferenceAndEqualsAddThenRmsNorm) {
  for_each_target([](ThreadPool& pool) {
    for (int64_t rows : kRows)
      for (int64_t n : kLengths) {
        const std::string what = "rows=" + std::to_string(rows) + " n=" + std::to_string(n);
        const auto res = random_values(rows * n, 0.0f, 3.0f, 5), x = random_values(rows * n, 0.0f, 1.0f, 6);
        const auto w = random_values(n, 0.0f, 0.3f, 7);
        std::vector<float> sum_got(x.size()), sum_want(x.size()), got(x.size()), want(x.size());
        add_rmsnorm(res.data(), x.data(), rows, n, w.data(), 1e-6f, 1.0f, sum_got.data(), got.data(), pool);
        add_rmsnorm_ref(res.data(), x.data(), rows, n, w.data(), 1e-6f, 1.0f, sum_want.data(), want.data());
        expect_close(sum_got.data(), sum_want.data(), rows * n, 0, 0, "sum " + what);
        expect_close(got.data(), want.data(), rows * n, 1e-6, 2e-6, "out " + what);
        // The graph fusion relies on this: the fused op changes no bit of add then rms_norm.
        std::vector<float> sum_two(x.size()), two(x.size());
        add(res.data(), x.data(), rows * n, sum_two.data(), pool);
        rmsnorm(sum_two.data(), rows, n, w.data(), 1e-6f, 1.0f, two.data(), pool);
        EXPECT_EQ(sum_got, sum_two) << what;
        EXPECT_EQ(got, two) << what;
        // In place, as a caller keeping one residual stream would call it: sum over residual,
        // out over x.
        std::vector<float> res_io = res, x_io = x;
        add_rmsnorm(res_io.data(), x_io.data(), rows, n, w.data(), 1e-6f, 1.0f, res_io.data(), x_io.data(), pool);
        EXPECT_EQ(res_io, sum_got) << what;
        EXPECT_EQ(x_io, got) << what;
      }
  });
}

TEST(Norm, LayerNormMatchesReference) {
  for_each_target([](ThreadPool& pool) {
    for (int64_t rows : kRows)
      for (int64_t n : kLengths)
        for (int mode = 0; mode < 3; ++mode) {  // weight+bias, weight only, neither
          const std::string what = "rows=" + std::to_string(rows) + " n=" + std::to_string(n) +
                                   " mode=" + std::to_string(mode);
          // A large common offset: a one-pass E[x^2] - E[x]^2 variance would lose it.
          const auto x = random_values(rows * n, 50.0f, 2.0f, 8);
          const auto w = random_values(n, 1.0f, 0.2f, 9), b = random_values(n, 0.0f, 0.2f, 10);
          const float* wp = mode < 2 ? w.data() : nullptr;
          const float* bp = mode < 1 ? b.data() : nullptr;
          std::vector<float> got(x.size()), want(x.size());
          layernorm(x.data(), rows, n, wp, bp, 1e-5f, got.data(), pool);
          layernorm_ref(x.data(), rows, n, wp, bp, 1e-5f, want.data());
          // |x - mean| carries the f32 rounding of x ≈ 50 (3e-6 absolute) through rstd ≈ 0.5.
          expect_close(got.data(), want.data(), rows * n, 1e-5, 1e-5, what);
        }
  });
}

}  // namespace
}  // namespace loom::cpu
