// loom_portable's cpu_simd kernels against its scalar reference kernels, at
// sizes that leave tails past the 16 partial sums (1, 15, 17, 33, 100, …).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "portable/src/kernels.h"
#include "portable/portable_test_util.h"

namespace {

using portable_test::max_rel;
using portable_test::random_vec;

const int64_t kSizes[] = {1, 2, 15, 16, 17, 31, 33, 64, 100, 257};

TEST(PortableKernels, LinearSimdMatchesReferenceIncludingTails) {
  const auto& ref = lp::reference_kernels();
  const auto& simd = lp::simd_kernels();
  for (int64_t k : kSizes)
    for (bool bias : {false, true}) {
      SCOPED_TRACE("k=" + std::to_string(k) + (bias ? " with bias" : ""));
      const int64_t m = 3, n = 5;
      const auto x = random_vec(static_cast<size_t>(m * k), 1), w = random_vec(static_cast<size_t>(n * k), 2), b = random_vec(5, 3);
      std::vector<float> y1(static_cast<size_t>(m * n)), y2(y1.size());
      ref.linear(x.data(), m, k, w.data(), bias ? b.data() : nullptr, n, y1.data());
      simd.linear(x.data(), m, k, w.data(), bias ? b.data() : nullptr, n, y2.data());
      EXPECT_LE(max_rel(y1, y2), 1e-5);
      // and the reference against the textbook sum
      double acc = bias ? b[1] : 0.0;
      for (int64_t i = 0; i < k; ++i) acc += static_cast<double>(x[static_cast<size_t>(2 * k + i)]) * w[static_cast<size_t>(k + i)];
      EXPECT_NEAR(y1[2 * 5 + 1], acc, 1e-5);
    }
}

// bf16 weights: both flavours widen each value exactly, so they equal the f32
// kernels run on the widened copy — bitwise for the reference (same double
// sums); the vector clones may contract multiply-adds differently, so f32 rounding.
TEST(PortableKernels, LinearBf16MatchesF32KernelsOnTheWidenedWeights) {
  for (int64_t k : kSizes)
    for (bool bias : {false, true}) {
      SCOPED_TRACE("k=" + std::to_string(k) + (bias ? " with bias" : ""));
      const int64_t m = 3, n = 5;
      const auto x = random_vec(static_cast<size_t>(m * k), 4), wf = random_vec(static_cast<size_t>(n * k), 5), b = random_vec(5, 6);
      std::vector<uint16_t> w16(wf.size());
      std::vector<float> widened(wf.size());
      for (size_t i = 0; i < wf.size(); ++i) {
        uint32_t u;
        std::memcpy(&u, &wf[i], 4);
        w16[i] = static_cast<uint16_t>(u >> 16);  // truncation: any bf16 value will do
        const uint32_t back = static_cast<uint32_t>(w16[i]) << 16;
        std::memcpy(&widened[i], &back, 4);
      }
      for (const lp::Kernels* kern : {&lp::reference_kernels(), &lp::simd_kernels()}) {
        std::vector<float> y16(static_cast<size_t>(m * n)), y32(y16.size());
        kern->linear_bf16(x.data(), m, k, w16.data(), bias ? b.data() : nullptr, n, y16.data());
        kern->linear(x.data(), m, k, widened.data(), bias ? b.data() : nullptr, n, y32.data());
        if (kern == &lp::reference_kernels()) EXPECT_EQ(y16, y32);
        else EXPECT_LE(max_rel(y16, y32), 1e-6);
      }
      std::vector<float> yr(static_cast<size_t>(m * n)), ys(yr.size());
      lp::reference_kernels().linear_bf16(x.data(), m, k, w16.data(), bias ? b.data() : nullptr, n, yr.data());
      lp::simd_kernels().linear_bf16(x.data(), m, k, w16.data(), bias ? b.data() : nullptr, n, ys.data());
      EXPECT_LE(max_rel(yr, ys), 1e-5);
    }
}

TEST(PortableKernels, NormsSimdMatchReferenceIncludingTails) {
  const auto& ref = lp::reference_kernels();
  const auto& simd = lp::simd_kernels();
  for (int64_t n : kSizes) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const int64_t rows = 4;
    const auto x = random_vec(static_cast<size_t>(rows * n), 4), w = random_vec(static_cast<size_t>(n), 5), b = random_vec(static_cast<size_t>(n), 6);
    std::vector<float> o1(x.size()), o2(x.size());
    ref.rms_norm(x.data(), rows, n, w.data(), 1e-6f, 1.0f, o1.data());
    simd.rms_norm(x.data(), rows, n, w.data(), 1e-6f, 1.0f, o2.data());
    EXPECT_LE(max_rel(o1, o2), 1e-5) << "rms_norm";
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[static_cast<size_t>(i)]) * x[static_cast<size_t>(i)];
    EXPECT_NEAR(o1[0], x[0] / std::sqrt(ss / static_cast<double>(n) + 1e-6) * (1.0 + w[0]), 1e-5);
    if (n > 1) {  // a one-element row has zero variance: both give b, not worth a tolerance
      ref.layer_norm(x.data(), rows, n, w.data(), b.data(), 1e-5f, o1.data());
      simd.layer_norm(x.data(), rows, n, w.data(), b.data(), 1e-5f, o2.data());
      EXPECT_LE(max_rel(o1, o2), 1e-4) << "layer_norm";
    }
  }
}

TEST(PortableKernels, DotAndAxpySimdMatchReferenceIncludingTails) {
  const auto& ref = lp::reference_kernels();
  const auto& simd = lp::simd_kernels();
  for (int64_t d : kSizes) {
    SCOPED_TRACE("d=" + std::to_string(d));
    const auto a = random_vec(static_cast<size_t>(d), 7), b = random_vec(static_cast<size_t>(d), 8);
    EXPECT_NEAR(ref.dot(a.data(), b.data(), d), simd.dot(a.data(), b.data(), d), 1e-5 * static_cast<double>(d));
    std::vector<float> acc1(static_cast<size_t>(d), 0.5f), acc2 = acc1;
    ref.axpy(0.25f, a.data(), d, acc1.data());
    simd.axpy(0.25f, a.data(), d, acc2.data());
    EXPECT_EQ(acc1, acc2);
    EXPECT_FLOAT_EQ(acc1.back(), 0.5f + 0.25f * a.back());
  }
}

}  // namespace
