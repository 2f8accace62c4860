// Element-wise routines against their scalar references on every compiled SIMD target, over
// lengths that leave every possible tail, with one and two threads.
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

const int64_t kLengths[] = {1, 2, 3, 4, 7, 8, 15, 16, 17, 31, 33, 63, 65, 100, 1000, 4099, 70001};

std::vector<float> random_values(int64_t n, float stddev, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, stddev);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = nd(rng);
  // Values where the activations' approximations change regime or saturate.
  const float special[] = {0.0f, -0.0f, 1e-20f, -1e-20f, 0.5f, -0.5f, 1.41f, -1.42f, 6.0f, -6.0f, 9.5f, -9.5f,
                           20.0f, -20.0f, 90.0f, -90.0f, 200.0f, -200.0f};
  for (size_t i = 0; i < v.size() && i < std::size(special); ++i) v[i * 7 % v.size()] = special[i];
  return v;
}

// Runs fn once per compiled SIMD target and pool size.
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

TEST(Elementwise, AddMulScaleMatchReferenceExactly) {
  for_each_target([](ThreadPool& pool) {
    for (int64_t n : kLengths) {
      const auto a = random_values(n, 3.0f, 1), b = random_values(n, 3.0f, 2);
      std::vector<float> got(a.size()), want(a.size());
      add(a.data(), b.data(), n, got.data(), pool);
      add_ref(a.data(), b.data(), n, want.data());
      expect_close(got.data(), want.data(), n, 0, 0, "add n=" + std::to_string(n));
      mul(a.data(), b.data(), n, got.data(), pool);
      mul_ref(a.data(), b.data(), n, want.data());
      expect_close(got.data(), want.data(), n, 0, 0, "mul n=" + std::to_string(n));
      scale(a.data(), 0.37f, n, got.data(), pool);
      scale_ref(a.data(), 0.37f, n, want.data());
      expect_close(got.data(), want.data(), n, 0, 0, "scale n=" + std::to_string(n));
      // In place: out aliases the first input.
      std::vector<float> inplace = a;
      add(inplace.data(), b.data(), n, inplace.data(), pool);
      add_ref(a.data(), b.data(), n, want.data());
      expect_close(inplace.data(), want.data(), n, 0, 0, "add in place n=" + std::to_string(n));
    }
  });
}

TEST(Elementwise, AddBias) {
  for_each_target([](ThreadPool& pool) {
    for (int64_t rows : {1, 3, 40})
      for (int64_t n : {1, 17, 768, 2049}) {
        const auto x = random_values(rows * n, 2.0f, 3), bias = random_values(n, 1.0f, 4);
        std::vector<float> got(x.size()), want(x.size());
        add_bias(x.data(), bias.data(), rows, n, got.data(), pool);
        add_bias_ref(x.data(), bias.data(), rows, n, want.data());
        expect_close(got.data(), want.data(), rows * n, 0, 0,
                     "add_bias rows=" + std::to_string(rows) + " n=" + std::to_string(n));
      }
  });
}

TEST(Elementwise, ActivationsMatchReference) {
  const Activation acts[] = {Activation::kSilu, Activation::kGeluTanh, Activation::kGeluErf};
  for_each_target([&](ThreadPool& pool) {
    for (Activation act : acts)
      for (int64_t n : kLengths) {
        const auto x = random_values(n, 4.0f, 5);
        std::vector<float> got(x.size()), want(x.size());
        activation(act, x.data(), n, got.data(), pool);
        activation_ref(act, x.data(), n, want.data());
        expect_close(got.data(), want.data(), n, 1e-7, 4e-6,
                     std::string(activation_name(act)) + " n=" + std::to_string(n));
      }
  });
}

TEST(Elementwise, SoftcapMatchesReference) {
  for_each_target([](ThreadPool& pool) {
    for (float cap : {30.0f, 50.0f, 0.5f})
      for (int64_t n : kLengths) {
        const auto x = random_values(n, 40.0f, 6);
        std::vector<float> got(x.size()), want(x.size());
        softcap(x.data(), cap, n, got.data(), pool);
        softcap_ref(x.data(), cap, n, want.data());
        expect_close(got.data(), want.data(), n, 1e-6 * cap, 4e-6, "softcap cap=" + std::to_string(cap) + " n=" + std::to_string(n));
      }
  });
  // The reference itself: odd, saturating at ±cap, slope 1 at 0.
  float y[3];
  const float x[3] = {-1e6f, 1e-3f, 1e6f};
  softcap_ref(x, 30.0f, 3, y);
  EXPECT_FLOAT_EQ(y[0], -30.0f);
  EXPECT_NEAR(y[1], 1e-3f, 1e-9);
  EXPECT_FLOAT_EQ(y[2], 30.0f);
}

TEST(Elementwise, ActivationReferencesAgreeWithKnownValues) {
  // Closed forms checked independently of the references' formulas: silu(x) = x·σ(x),
  // gelu(x) = x·Φ(x), and the tanh approximation stays within 1e-3 of the exact GELU.
  for (float x : {-3.0f, -1.0f, -0.25f, 0.0f, 0.5f, 2.0f, 7.0f}) {
    const double sigmoid = 1.0 / (1.0 + std::exp(-static_cast<double>(x)));
    EXPECT_NEAR(activation_ref(Activation::kSilu, x), x * sigmoid, 1e-6);
    const double phi = 0.5 * (1.0 + std::erf(x / std::sqrt(2.0)));
    EXPECT_NEAR(activation_ref(Activation::kGeluErf, x), x * phi, 1e-6);
    EXPECT_NEAR(activation_ref(Activation::kGeluTanh, x), x * phi, 1e-3);
  }
  EXPECT_FLOAT_EQ(activation_ref(Activation::kGeluErf, 1.0f), 0.8413447f);
  EXPECT_FLOAT_EQ(activation_ref(Activation::kSilu, 1.0f), 0.7310586f);
}

TEST(Elementwise, GatedActivationsBothLayouts) {
  const Activation acts[] = {Activation::kSilu, Activation::kGeluTanh, Activation::kGeluErf};
  for_each_target([&](ThreadPool& pool) {
    for (Activation act : acts)
      for (int64_t rows : {1, 2, 5})
        for (int64_t n : {1, 15, 16, 17, 100, 11008, 40003}) {
          const std::string what =
              std::string(activation_name(act)) + " rows=" + std::to_string(rows) + " n=" + std::to_string(n);
          // Fused gate_up projection [rows, 2n].
          const auto gate_up = random_values(rows * 2 * n, 3.0f, 6);
          std::vector<float> got(static_cast<size_t>(rows * n)), want(got.size());
          gated_activation(act, gate_up.data(), 2 * n, gate_up.data() + n, 2 * n, rows, n, got.data(), n, pool);
          gated_activation_ref(act, gate_up.data(), 2 * n, gate_up.data() + n, 2 * n, rows, n, want.data(), n);
          expect_close(got.data(), want.data(), rows * n, 1e-6, 4e-6, "fused " + what);
          // Separate gate and up with their own padded strides, output strided too.
          const int64_t gs = n + 3, us = n + 9, os = n + 5;
          const auto gate = random_values(rows * gs, 3.0f, 7), up = random_values(rows * us, 3.0f, 8);
          std::vector<float> got2(static_cast<size_t>(rows * os), 42.0f), want2(got2.size(), 42.0f);
          gated_activation(act, gate.data(), gs, up.data(), us, rows, n, got2.data(), os, pool);
          gated_activation_ref(act, gate.data(), gs, up.data(), us, rows, n, want2.data(), os);
          expect_close(got2.data(), want2.data(), rows * os, 1e-6, 4e-6, "separate " + what);
        }
  });
}

TEST(Elementwise, GatedActivationInPlaceOverGate) {
  ThreadPool pool(2);
  const int64_t rows = 3, n = 5001;
  const auto gate_up = random_values(rows * 2 * n, 3.0f, 9);
  std::vector<float> want(static_cast<size_t>(rows * n));
  gated_activation_ref(Activation::kSilu, gate_up.data(), 2 * n, gate_up.data() + n, 2 * n, rows, n, want.data(), n);
  std::vector<float> buf = gate_up;  // result written over the gate half of each row
  silu_and_mul(buf.data(), 2 * n, buf.data() + n, 2 * n, rows, n, buf.data(), 2 * n, pool);
  for (int64_t r = 0; r < rows; ++r)
    expect_close(buf.data() + r * 2 * n, want.data() + r * n, n, 1e-6, 4e-6, "row " + std::to_string(r));
}

TEST(Elementwise, ActivationNames) {
  EXPECT_EQ(activation_from_name("silu").value(), Activation::kSilu);
  EXPECT_EQ(activation_from_name("swish").value(), Activation::kSilu);
  EXPECT_EQ(activation_from_name("gelu").value(), Activation::kGeluErf);
  EXPECT_EQ(activation_from_name("gelu_pytorch_tanh").value(), Activation::kGeluTanh);
  EXPECT_EQ(activation_from_name("gelu_new").value(), Activation::kGeluTanh);
  const auto bad = activation_from_name("relu2");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(bad.status().message().find("relu2"), std::string::npos);
}

}  // namespace
}  // namespace loom::cpu
