#include "loom/runtime/cpu/moe.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "loom/core/cpu_features.h"
#include "loom/runtime/cpu/matmul.h"
#include "runtime/matmul_test_util.h"

namespace loom::cpu {
namespace {

using test_util::random_floats;

Tensor random_tensor(Shape shape, DType dt, uint32_t seed, float scale) {
  return Tensor::from_f32(random_floats(static_cast<size_t>(shape_numel(shape)), seed, scale), shape).to(dt);
}

struct Case {
  int64_t tokens, experts, hidden, inter, top_k;
  bool renorm, shared;
  DType dtype;
};

std::string describe(const Case& c) {
  return "T=" + std::to_string(c.tokens) + " E=" + std::to_string(c.experts) + " H=" + std::to_string(c.hidden) +
         " I=" + std::to_string(c.inter) + " k=" + std::to_string(c.top_k) + (c.renorm ? " renorm" : "") +
         (c.shared ? " shared" : "") + " " + std::string(dtype_name(c.dtype));
}

struct Weights {
  Tensor router, gate_up, down, shared_gate;
};

Weights make_weights(const Case& c, uint32_t seed) {
  const float s_in = 1.0f / std::sqrt(static_cast<float>(c.hidden));
  return {random_tensor({c.experts, c.hidden}, c.dtype, seed, 4.0f * s_in),
          random_tensor({c.experts, 2 * c.inter, c.hidden}, c.dtype, seed + 1, s_in),
          random_tensor({c.experts, c.hidden, c.inter}, c.dtype, seed + 2, 1.0f / std::sqrt(static_cast<float>(c.inter))),
          random_tensor({1, c.hidden}, c.dtype, seed + 3, s_in)};
}

// Relative max error of the grouped kernel against the scalar reference.
void check_case(const Case& c, uint32_t seed) {
  SCOPED_TRACE(describe(c));
  const Weights w = make_weights(c, seed);
  const std::vector<float> x = random_floats(static_cast<size_t>(c.tokens * c.hidden), seed + 10, 1.0f);
  const std::vector<float> shared = random_floats(static_cast<size_t>(c.tokens * c.hidden), seed + 11, 1.0f);
  MoeParams p;
  p.top_k = c.top_k;
  p.norm_topk_prob = c.renorm;
  auto packed = PackedMoe::pack(w.router, w.gate_up, w.down, c.shared ? &w.shared_gate : nullptr);
  ASSERT_TRUE(packed.ok()) << packed.status().to_string();
  std::vector<float> got(x.size(), -1.0f), want(x.size(), -2.0f);
  moe(x.data(), c.tokens, packed.value(), p, c.shared ? shared.data() : nullptr, got.data());
  moe_ref(x.data(), c.tokens, w.router, w.gate_up, w.down, p, c.shared ? shared.data() : nullptr,
          c.shared ? &w.shared_gate : nullptr, want.data());
  double scale = 0, err = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
    err = std::max(err, std::fabs(static_cast<double>(got[i]) - want[i]));
  }
  ASSERT_GT(scale, 0.0);
  // f32 accumulation against double: the matmul's own tolerance, times the few sums here.
  EXPECT_LE(err, 2e-5 * scale) << "max |moe - moe_ref| = " << err << " of max |ref| " << scale;
}

TEST(MoeRoute, SoftmaxTopKAndRenormalisation) {
  const float logits[4] = {1.0f, 3.0f, 2.0f, 3.0f};
  int32_t ex[2];
  float wt[2];
  MoeParams p;
  p.top_k = 2;
  p.norm_topk_prob = false;
  moe_route(logits, 4, p, ex, wt);
  // Equal logits: the lower index first.
  EXPECT_EQ(ex[0], 1);
  EXPECT_EQ(ex[1], 3);
  const double z = std::exp(1.0) + 2 * std::exp(3.0) + std::exp(2.0);
  EXPECT_NEAR(wt[0], std::exp(3.0) / z, 1e-6);
  EXPECT_NEAR(wt[1], std::exp(3.0) / z, 1e-6);
  p.norm_topk_prob = true;
  moe_route(logits, 4, p, ex, wt);
  EXPECT_NEAR(wt[0], 0.5, 1e-6);
  EXPECT_NEAR(wt[1], 0.5, 1e-6);
  p.top_k = 1;
  const float other[3] = {-2.0f, 0.5f, 0.25f};
  moe_route(other, 3, p, ex, wt);
  EXPECT_EQ(ex[0], 1);
  EXPECT_FLOAT_EQ(wt[0], 1.0f);
}

TEST(Moe, GroupedMatchesReference) {
  ScopedMatmulPrecision highest(MatmulPrecision::kHighest);  // exact products, as the reference
  uint32_t seed = 100;
  // Token counts around the matmul's streaming/blocked switch (16) and tails of
  // the vector width; T=1 with 8 experts leaves most experts without tokens.
  for (int64_t tokens : {1, 3, 16, 17, 40}) {
    for (int64_t top_k : {1, 2}) {
      for (DType dt : {DType::kF32, DType::kBF16}) {
        check_case({tokens, 8, 48, 40, top_k, top_k == 2, false, dt}, seed++);
        check_case({tokens, 4, 33, 19, top_k, false, true, dt}, seed++);
      }
    }
  }
}

TEST(Moe, EveryIsaMatchesReference) {
  ScopedMatmulPrecision highest(MatmulPrecision::kHighest);  // exact products, as the reference
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (!isa_supported(isa)) continue;
    ScopedIsa forced(isa);
    SCOPED_TRACE(std::string(isa_name(isa)));
    check_case({9, 6, 64, 24, 2, true, true, DType::kF32}, 7);
    check_case({9, 6, 64, 24, 2, true, true, DType::kBF16}, 8);
  }
}

// Quantized experts (a GGUF file's ffn_*_exps, or quantized at load): each
// expert runs the quantized matmul, which rounds the activations to 8 bits per
// block; the reference multiplies the dequantized weights exactly. Both see the
// same weights, so what is left is the activation rounding: up to 3% (RMS) of the
// output after two quantized matmuls (K-quants round 256 activations on one
// scale); a wrong block, row or expert would be of the output's own size.
TEST(Moe, QuantizedExpertsMatchReference) {
  struct QCase {
    DType dtype;
    int64_t tokens, hidden, inter;
  };
  uint32_t seed = 300;
  for (const QCase& q : {QCase{DType::kQ8_0, 5, 64, 32}, QCase{DType::kQ8_0, 19, 96, 64}, QCase{DType::kQ4_0, 17, 64, 32},
                         QCase{DType::kQ4_K, 3, 256, 256}, QCase{DType::kQ6_K, 20, 256, 256}}) {
    SCOPED_TRACE(std::string(dtype_name(q.dtype)) + " T=" + std::to_string(q.tokens));
    const Case c{q.tokens, 6, q.hidden, q.inter, 2, true, false, DType::kF32};
    Weights w = make_weights(c, seed++);
    w.gate_up = w.gate_up.to(q.dtype);
    w.down = w.down.to(q.dtype);
    const std::vector<float> x = random_floats(static_cast<size_t>(c.tokens * c.hidden), seed++, 1.0f);
    MoeParams p;
    p.top_k = c.top_k;
    auto packed = PackedMoe::pack(w.router, w.gate_up, w.down);
    ASSERT_TRUE(packed.ok()) << packed.status().to_string();
    std::vector<float> got(x.size()), want(x.size());
    moe(x.data(), c.tokens, packed.value(), p, nullptr, got.data());
    moe_ref(x.data(), c.tokens, w.router, w.gate_up, w.down, p, nullptr, nullptr, want.data());
    double num = 0, den = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      num += (got[i] - want[i]) * static_cast<double>(got[i] - want[i]);
      den += static_cast<double>(want[i]) * want[i];
    }
    ASSERT_GT(den, 0.0);
    EXPECT_LE(std::sqrt(num / den), 0.05) << "relative RMS error of the grouped kernel";
    // Dequantized to f32, the same experts give the reference's numbers: the
    // kernel read the blocks, not something else.
    std::vector<float> dequant(x.size());
    moe_ref(x.data(), c.tokens, w.router, w.gate_up.to(DType::kF32), w.down.to(DType::kF32), p, nullptr, nullptr,
            dequant.data());
    EXPECT_EQ(dequant, want);
  }
}

// gpt-oss's MLP: biased router, a softmax over the top-k logits, biased experts
// and the clamped SwiGLU, with gate_up weights large enough that the clamp at 7
// binds for many features (the case the clamp exists for).
TEST(Moe, GptOssRoutingBiasesAndClampedSwigluMatchReference) {
  ScopedMatmulPrecision highest(MatmulPrecision::kHighest);
  uint32_t seed = 500;
  for (int64_t tokens : {1, 7, 19}) {
    for (DType dt : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE("T=" + std::to_string(tokens) + " " + std::string(dtype_name(dt)));
      const int64_t E = 5, H = 40, I = 24;
      const Case c{tokens, E, H, I, 3, false, false, dt};
      Weights w = make_weights(c, seed++);
      w.gate_up = random_tensor({E, 2 * I, H}, dt, seed++, 24.0f / std::sqrt(static_cast<float>(H)));
      const Tensor rb = random_tensor({E}, dt, seed++, 1.0f), gub = random_tensor({E, 2 * I}, dt, seed++, 1.0f),
                   db = random_tensor({E, H}, dt, seed++, 1.0f);
      const MoeBiases biases{&rb, &gub, &db};
      const std::vector<float> x = random_floats(static_cast<size_t>(tokens * H), seed++, 1.0f);
      MoeParams p;
      p.top_k = 3;
      p.routing = MoeRouting::kTopKSoftmax;
      p.swiglu_limit = 7.0f;
      auto packed = PackedMoe::pack(w.router, w.gate_up, w.down, nullptr, biases);
      ASSERT_TRUE(packed.ok()) << packed.status().to_string();
      std::vector<float> got(x.size()), want(x.size()), plain(x.size());
      moe(x.data(), tokens, packed.value(), p, nullptr, got.data());
      moe_ref(x.data(), tokens, w.router, w.gate_up, w.down, p, nullptr, nullptr, want.data(), biases);
      double scale = 0, err = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
        err = std::max(err, std::fabs(static_cast<double>(got[i]) - want[i]));
      }
      EXPECT_LE(err, 2e-5 * scale) << "max |moe - moe_ref| = " << err << " of max |ref| " << scale;
      // Without the clamp the output moves: the fixture exercises it.
      MoeParams unclamped = p;
      unclamped.swiglu_limit = 1e9f;
      moe_ref(x.data(), tokens, w.router, w.gate_up, w.down, unclamped, nullptr, nullptr, plain.data(), biases);
      double moved = 0;
      for (size_t i = 0; i < x.size(); ++i) moved = std::max(moved, std::fabs(static_cast<double>(plain[i]) - want[i]));
      EXPECT_GT(moved, 0.1 * scale);
    }
  }
}

TEST(MoeRoute, TopKThenSoftmaxAndTheClampedSwiglu) {
  const float logits[4] = {1.0f, 3.0f, 2.0f, -5.0f};
  int32_t ex[2];
  float wt[2];
  MoeParams p;
  p.top_k = 2;
  p.routing = MoeRouting::kTopKSoftmax;
  p.norm_topk_prob = false;  // no effect: the k weights are a softmax of their own
  moe_route(logits, 4, p, ex, wt);
  EXPECT_EQ(ex[0], 1);
  EXPECT_EQ(ex[1], 2);
  EXPECT_NEAR(wt[0], 1.0 / (1.0 + std::exp(-1.0)), 1e-6);
  EXPECT_NEAR(wt[1], 1.0 / (1.0 + std::exp(1.0)), 1e-6);
  // g = min(gate, 7), u = clamp(up, -7, 7): (u + 1) · g · σ(1.702 g).
  EXPECT_NEAR(clamped_swiglu(2.0f, 0.5f, 7.0f, 1.702f), 1.5 * 2.0 / (1.0 + std::exp(-3.404)), 1e-6);
  EXPECT_NEAR(clamped_swiglu(9.0f, -20.0f, 7.0f, 1.702f), -6.0 * 7.0 / (1.0 + std::exp(-7.0 * 1.702)), 1e-5);
  EXPECT_NEAR(clamped_swiglu(-3.0f, 30.0f, 7.0f, 1.702f), 8.0 * -3.0 / (1.0 + std::exp(3.0 * 1.702)), 1e-6);
}

TEST(Moe, ExpertsWithoutTokensAndAllTokensOnOneExpert) {
  // A router row far above the others sends every token to expert 2 (top-1);
  // the other experts get no tokens at all.
  Case c{12, 5, 32, 16, 1, true, false, DType::kF32};
  Weights w = make_weights(c, 31);
  std::vector<float> r = w.router.to_f32_vector();
  std::vector<float> x = random_floats(static_cast<size_t>(c.tokens * c.hidden), 32, 1.0f);
  for (auto& v : x) v = std::fabs(v);  // positive inputs, so a positive row wins everywhere
  for (int64_t i = 0; i < c.hidden; ++i) r[static_cast<size_t>(2 * c.hidden + i)] = 10.0f;
  w.router = Tensor::from_f32(r, {c.experts, c.hidden});
  MoeParams p;
  p.top_k = 1;
  auto packed = PackedMoe::pack(w.router, w.gate_up, w.down).value();
  std::vector<float> got(x.size()), want(x.size());
  moe(x.data(), c.tokens, packed, p, nullptr, got.data());
  moe_ref(x.data(), c.tokens, w.router, w.gate_up, w.down, p, nullptr, nullptr, want.data());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(got[i], want[i], 2e-5 * (1 + std::fabs(want[i]))) << i;
  // With one expert at weight 1 this is that expert's MLP alone: compare with it.
  const std::vector<float> gu = w.gate_up.to_f32_vector(), dn = w.down.to_f32_vector();
  const int64_t H = c.hidden, I = c.inter;
  for (int64_t t = 0; t < c.tokens; ++t) {
    std::vector<double> h(static_cast<size_t>(I));
    for (int64_t j = 0; j < I; ++j) {
      double g = 0, u = 0;
      for (int64_t i = 0; i < H; ++i) {
        g += x[static_cast<size_t>(t * H + i)] * gu[static_cast<size_t>((2 * 2 * I + j) * H + i)];
        u += x[static_cast<size_t>(t * H + i)] * gu[static_cast<size_t>((2 * 2 * I + I + j) * H + i)];
      }
      h[static_cast<size_t>(j)] = g / (1 + std::exp(-g)) * u;
    }
    for (int64_t o = 0; o < H; ++o) {
      double d = 0;
      for (int64_t j = 0; j < I; ++j) d += h[static_cast<size_t>(j)] * dn[static_cast<size_t>((2 * H + o) * I + j)];
      EXPECT_NEAR(got[static_cast<size_t>(t * H + o)], d, 1e-4 * (1 + std::fabs(d))) << "token " << t << " out " << o;
    }
  }
}

TEST(Moe, TokenResultDoesNotDependOnTheBatch) {
  Case c{23, 6, 40, 24, 2, true, true, DType::kBF16};
  const Weights w = make_weights(c, 51);
  const std::vector<float> x = random_floats(static_cast<size_t>(c.tokens * c.hidden), 52, 1.0f);
  const std::vector<float> shared = random_floats(x.size(), 53, 1.0f);
  MoeParams p;
  p.top_k = 2;
  auto packed = PackedMoe::pack(w.router, w.gate_up, w.down, &w.shared_gate).value();
  std::vector<float> batch(x.size());
  moe(x.data(), c.tokens, packed, p, shared.data(), batch.data());
  for (int64_t t = 0; t < c.tokens; ++t) {
    std::vector<float> one(static_cast<size_t>(c.hidden));
    moe(x.data() + t * c.hidden, 1, packed, p, shared.data() + t * c.hidden, one.data());
    for (int64_t i = 0; i < c.hidden; ++i)
      ASSERT_EQ(one[static_cast<size_t>(i)], batch[static_cast<size_t>(t * c.hidden + i)]) << "token " << t;
  }
}

TEST(Moe, PackRejectsMismatchedShapes) {
  const Tensor router = random_tensor({4, 16}, DType::kF32, 1, 1.0f);
  const Tensor gate_up = random_tensor({4, 20, 16}, DType::kF32, 2, 1.0f);
  const Tensor down_bad = random_tensor({4, 16, 12}, DType::kF32, 3, 1.0f);
  auto r = PackedMoe::pack(router, gate_up, down_bad);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("down"), std::string::npos) << r.status().to_string();
  const Tensor gate_up_odd = random_tensor({4, 21, 16}, DType::kF32, 4, 1.0f);
  EXPECT_FALSE(PackedMoe::pack(router, gate_up_odd, random_tensor({4, 16, 10}, DType::kF32, 5, 1.0f)).ok());
}

}  // namespace
}  // namespace loom::cpu
