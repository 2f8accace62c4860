// Block formats against values worked out here from each format's formula, and
// the reference quantizers' quality on random data.
#include "loom/core/quantize.h"

#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "loom/core/status.h"
#include "core/quantize_k.h"

namespace loom {
namespace {

constexpr uint16_t kF16Half = 0x3800;     // 0.5
constexpr uint16_t kF16Quarter = 0x3400;  // 0.25
constexpr uint16_t kF16Eighth = 0x3000;   // 0.125

TEST(Quantize, DequantizeQ8_0FromFormula) {
  BlockQ8_0 b{};
  b.d = kF16Half;
  for (int j = 0; j < 32; ++j) b.qs[j] = static_cast<int8_t>(j * 9 - 140);
  float y[32];
  dequantize_row_ref(DType::kQ8_0, &b, y, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 0.5f * static_cast<int8_t>(j * 9 - 140)) << j;
}

TEST(Quantize, DequantizeQ4_0LowNibblesFirst) {
  BlockQ4_0 b{};
  b.d = kF16Quarter;
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  float y[32];
  dequantize_row_ref(DType::kQ4_0, &b, y, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.25f * (j - 8)) << j;
    EXPECT_EQ(y[j + 16], 0.25f * (15 - j - 8)) << j;
  }
}

// scales bytes chosen so every 6-bit field differs; the sub-block scales and mins
// below were decoded by hand from the bit layout (j < 4: low 6 bits of bytes j and
// j + 4; j ≥ 4: nibbles of byte j + 4 with the top 2 bits of bytes j − 4 and j).
constexpr uint8_t kScalesBytes[12] = {0xC1, 0x42, 0x83, 0x04, 0x45, 0x86, 0xC7, 0x08, 0x9A, 0x2B, 0x3C, 0xF1};
constexpr int kSc[8] = {1, 2, 3, 4, 58, 27, 44, 1};
constexpr int kMin[8] = {5, 6, 7, 8, 25, 34, 51, 15};

TEST(Quantize, UnpackScaleMinK4MatchesHandDecoding) {
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    unpack_scale_min_k4(j, kScalesBytes, &sc, &m);
    EXPECT_EQ(sc, kSc[j]) << j;
    EXPECT_EQ(m, kMin[j]) << j;
  }
}

TEST(Quantize, DequantizeQ4_KFromFormula) {
  BlockQ4_K b{};
  b.d = kF16Half;
  b.dmin = kF16Quarter;
  std::memcpy(b.scales, kScalesBytes, 12);
  for (int i = 0; i < 128; ++i) b.qs[i] = static_cast<uint8_t>(i * 7);
  float y[256];
  dequantize_row_ref(DType::kQ4_K, &b, y, 256);
  for (int e = 0; e < 256; ++e) {
    const int chunk = e / 64, r = e % 64, j = e / 32;
    const uint8_t byte = b.qs[32 * chunk + r % 32];
    const int q = r < 32 ? (byte & 15) : (byte >> 4);
    EXPECT_EQ(y[e], 0.5f * kSc[j] * q - 0.25f * kMin[j]) << e;
  }
}

TEST(Quantize, DequantizeQ5_KFromFormula) {
  BlockQ5_K b{};
  b.d = kF16Half;
  b.dmin = kF16Quarter;
  std::memcpy(b.scales, kScalesBytes, 12);
  for (int i = 0; i < 128; ++i) b.qs[i] = static_cast<uint8_t>(i * 7);
  for (int i = 0; i < 32; ++i) b.qh[i] = static_cast<uint8_t>(i * 37 + 5);
  float y[256];
  dequantize_row_ref(DType::kQ5_K, &b, y, 256);
  for (int e = 0; e < 256; ++e) {
    const int chunk = e / 64, r = e % 64, j = e / 32;
    const uint8_t byte = b.qs[32 * chunk + r % 32];
    const int high = (b.qh[r % 32] >> (2 * chunk + (r >= 32 ? 1 : 0))) & 1;
    const int q = (r < 32 ? (byte & 15) : (byte >> 4)) + 16 * high;
    EXPECT_EQ(y[e], 0.5f * kSc[j] * q - 0.25f * kMin[j]) << e;
  }
}

TEST(Quantize, DequantizeQ6_KFromFormula) {
  BlockQ6_K b{};
  b.d = kF16Eighth;
  for (int i = 0; i < 128; ++i) b.ql[i] = static_cast<uint8_t>(i * 13 + 1);
  for (int i = 0; i < 64; ++i) b.qh[i] = static_cast<uint8_t>(i * 29 + 3);
  for (int s = 0; s < 16; ++s) b.scales[s] = static_cast<int8_t>(s * 9 - 70);
  float y[256];
  dequantize_row_ref(DType::kQ6_K, &b, y, 256);
  for (int e = 0; e < 256; ++e) {
    // Half h, quadrant g of 32: g 0/1 are the low nibbles of ql[l] / ql[l + 32],
    // g 2/3 their high nibbles; bits 2g, 2g + 1 of qh[l] are the top two.
    const int h = e / 128, g = (e % 128) / 32, l = e % 32;
    const uint8_t lbyte = b.ql[64 * h + l + 32 * (g & 1)];
    const int low = g < 2 ? (lbyte & 15) : (lbyte >> 4);
    const int top = (b.qh[32 * h + l] >> (2 * g)) & 3;
    const int q = (low | (top << 4)) - 32;
    EXPECT_EQ(y[e], 0.125f * b.scales[e / 16] * q) << e;
  }
}

double nmse(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(a[i]) * a[i];
  }
  return num / den;
}

std::vector<float> round_trip(DType t, const std::vector<float>& x) {
  std::vector<uint8_t> q(dtype_bytes(t, static_cast<int64_t>(x.size())));
  quantize_row_ref(t, x.data(), q.data(), static_cast<int64_t>(x.size()));
  std::vector<float> y(x.size());
  dequantize_row_ref(t, q.data(), y.data(), static_cast<int64_t>(x.size()));
  return y;
}

TEST(Quantize, RoundTripErrorOnNormalDataIsOrderedAndBounded) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(256 * 64);
  for (float& v : x) v = normal(rng);
  // Bounds a little above what this seed gives (the printed table), so a worse
  // search or a mis-packed level fails; the order is what the bit budgets promise.
  struct Row {
    DType t;
    double bound;
  };
  const Row rows[] = {{DType::kQ4_0, 1.5e-2}, {DType::kQ4_K, 6e-3}, {DType::kQ5_K, 1.5e-3},
                      {DType::kQ6_K, 4e-4}, {DType::kQ8_0, 1e-4}};
  double previous = 1.0;
  std::printf("%-6s %12s %10s\n", "type", "NMSE", "bound");
  for (const Row& r : rows) {
    const double e = nmse(x, round_trip(r.t, x));
    std::printf("%-6s %12.3e %10.1e\n", std::string(dtype_name(r.t)).c_str(), e, r.bound);
    EXPECT_LT(e, r.bound) << dtype_name(r.t);
    EXPECT_LT(e, previous) << dtype_name(r.t) << " should be more accurate than the type before it";
    previous = e;
  }
}

TEST(Quantize, Q8_0ValuesOnTheGridRoundTripExactly) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> q(-127, 127);
  std::vector<float> x(32 * 8);
  for (int b = 0; b < 8; ++b) {
    const float d = std::ldexp(1.0f, -b);  // exact in f16
    for (int j = 0; j < 32; ++j) x[32 * b + j] = d * static_cast<float>(j == 5 ? (b % 2 ? 127 : -127) : q(rng));
  }
  EXPECT_EQ(round_trip(DType::kQ8_0, x), x);
}

TEST(Quantize, ZeroAndConstantRows) {
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    const std::vector<float> zeros(512, 0.0f);
    EXPECT_EQ(round_trip(t, zeros), zeros) << dtype_name(t);
    for (float c : {0.3f, -2.5f}) {
      const std::vector<float> y = round_trip(t, std::vector<float>(512, c));
      for (float v : y) ASSERT_NEAR(v, c, std::fabs(c) * 2e-3) << dtype_name(t) << " constant " << c;
    }
  }
}

TEST(Quantize, LengthNotAMultipleOfTheBlockIsAnError) {
  std::vector<float> x(300, 1.0f);
  std::vector<uint8_t> q(4096);
  EXPECT_THROW(quantize_row_ref(DType::kQ8_0, x.data(), q.data(), 33), Error);
  EXPECT_THROW(quantize_row_ref(DType::kQ4_K, x.data(), q.data(), 288), Error);
  EXPECT_THROW(dequantize_row_ref(DType::kQ6_K, q.data(), x.data(), 100), Error);
  EXPECT_THROW(dequantize_row_ref(DType::kF32, q.data(), x.data(), 32), Error);
  EXPECT_THROW(convert_elements(x.data(), DType::kF32, q.data(), DType::kQ4_0, 40), Error);
}

TEST(Quantize, ConvertElementsGoesThroughTheRowCodecs) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(512);
  for (float& v : x) v = normal(rng);
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    std::vector<uint8_t> direct(dtype_bytes(t, 512)), via(dtype_bytes(t, 512));
    quantize_row_ref(t, x.data(), direct.data(), 512);
    convert_elements(x.data(), DType::kF32, via.data(), t, 512);
    EXPECT_EQ(direct, via) << dtype_name(t);
    std::vector<float> f32(512);
    std::vector<uint16_t> bf16(512);
    convert_elements(via.data(), t, f32.data(), DType::kF32, 512);
    convert_elements(via.data(), t, bf16.data(), DType::kBF16, 512);
    for (int i = 0; i < 512; ++i) EXPECT_EQ(bf16[i], f32_to_bf16(f32[i])) << dtype_name(t) << " " << i;
  }
}

TEST(Quantize, ActivationBlocksKeepQWithin127AndSumsMatch) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> x(512);
  for (float& v : x) v = normal(rng);
  std::vector<ActBlockQ8K> k(2);
  quantize_activations_q8k(x.data(), k.data(), 512);
  for (int b = 0; b < 2; ++b) {
    for (int s = 0; s < 16; ++s) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) {
        const int q = k[b].qs[16 * s + j];
        EXPECT_LE(std::abs(q), 127);
        EXPECT_NEAR(k[b].d * q, x[256 * b + 16 * s + j], k[b].d * 0.5f + 1e-6f);
        sum += q;
      }
      EXPECT_EQ(k[b].bsums[s], sum);
    }
  }
  std::vector<ActBlockQ8x32> a(16);
  quantize_activations_q8x32(x.data(), a.data(), 512);
  for (int b = 0; b < 16; ++b) {
    for (int j = 0; j < 32; ++j) EXPECT_NEAR(a[b].d * a[b].qs[j], x[32 * b + j], a[b].d * 0.5f + 1e-6f);
  }
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

// The K quantizers' searches over all sub-blocks at once (a lane each) give the
// scalar references' bytes on every Highway target they are compiled for: sub-blocks
// of every shape (zeros, below the search's epsilon, one outlier, one sign, ties,
// constant), in an odd number of blocks (Q4_K/Q5_K search two blocks at a time, a
// lone last one padded).
TEST(Quantize, KQuantLaneSearchesEqualTheReferencesByteForByte) {
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  constexpr int kBlocks = 65;
  int targets = 0;
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    ++targets;
    for (int shape = 0; shape < 8; ++shape) {
      std::vector<float> x(256 * kBlocks);
      for (size_t i = 0; i < x.size(); ++i) {
        float v = normal(rng);
        switch (shape) {
          case 1: v = (i / 16) % 3 == 0 ? 0.0f : v; break;             // whole zero sub-blocks
          case 2: v = (i / 16) % 2 == 0 ? v * 1e-17f : v; break;       // below the epsilon
          case 3: v = i % 97 == 0 ? v * 1000.0f : v; break;            // outliers
          case 4: v = std::fabs(v); break;                              // one sign
          case 5: v = static_cast<float>(static_cast<int>(v * 4)) / 4; break;  // exact ties
          case 6: v = v * 1e-3f + ((i / 16) % 2 ? 5.0f : -5.0f); break;  // offset sub-blocks
          case 7: v = (i / 32) % 2 ? 0.75f : v; break;                  // constant sub-blocks
        }
        x[i] = v;
      }
      const auto same = [&](auto lanes_fn, auto ref_fn, auto block, const char* type) {
        std::vector<decltype(block)> lanes(kBlocks), ref(kBlocks);
        lanes_fn(x.data(), lanes.data(), kBlocks);
        ref_fn(x.data(), ref.data(), kBlocks);
        EXPECT_EQ(std::memcmp(lanes.data(), ref.data(), sizeof(block) * kBlocks), 0) << type << ", shape " << shape;
      };
      same(detail::quantize_q4_k, detail::quantize_q4_k_ref, BlockQ4_K{}, "Q4_K");
      same(detail::quantize_q5_k, detail::quantize_q5_k_ref, BlockQ5_K{}, "Q5_K");
      same(detail::quantize_q6_k, detail::quantize_q6_k_ref, BlockQ6_K{}, "Q6_K");
    }
  }
  hwy::SetSupportedTargetsForTest(0);
  EXPECT_GE(targets, 1);
}

// round_levels gives the scalar formula's levels on every Highway target, right at the
// rounding boundaries: x within an ulp of (k + 1/2)·ds, where a product with 1/ds
// instead of the quotient, or a fused (x + dm)/ds, would land on the other side.
TEST(Quantize, RoundLevelsEqualTheScalarFormulaAtHalves) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> scale(0.001f, 3.0f);
  constexpr int kN = 32, kSubs = 16;
  std::vector<float> x(kN * kSubs), ds(kSubs), dm(kSubs);
  int compared = 0;
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    for (int trial = 0; trial < 200; ++trial) {
      for (int s = 0; s < kSubs; ++s) {
        ds[s] = s == 3 ? 0.0f : scale(rng);  // a zero scale keeps its levels
        dm[s] = trial % 2 ? scale(rng) : 0.0f;
        for (int i = 0; i < kN; ++i) {
          const float half = (static_cast<float>(static_cast<int>(rng() % 40) - 20) + 0.5f) * ds[s] - dm[s];
          const int side = static_cast<int>(rng() % 3);
          x[kN * s + i] = side == 0 ? half : std::nextafter(half, side == 1 ? 1e9f : -1e9f);
        }
      }
      std::vector<uint8_t> got(kN * kSubs, 0xAA), want(kN * kSubs, 0xAA);
      detail::round_levels(x.data(), kN, kSubs, ds.data(), dm.data(), -16, 15, 16, got.data());
      for (int s = 0; s < kSubs; ++s) {
        if (ds[s] == 0.0f) continue;
        for (int i = 0; i < kN; ++i) {
          const int l = std::clamp(detail::round_to_int((x[kN * s + i] + dm[s]) / ds[s]), -16, 15) + 16;
          want[kN * s + i] = static_cast<uint8_t>(l);
        }
      }
      ASSERT_EQ(got, want) << "trial " << trial;
      ++compared;
    }
  }
  hwy::SetSupportedTargetsForTest(0);
  EXPECT_GE(compared, 200);
}

// Q8_0 and Q4_0 on SIMD vectors give the scalar references' bytes on every Highway
// target: blocks of every shape, among them exact halves after scaling (Q8_0 rounds
// them away from zero), −0 and all-zero blocks, and +a / −a ties for the extreme
// (the first one sets Q4_0's sign).
TEST(Quantize, Q8_0AndQ4_0EqualTheReferencesByteForByte) {
  std::mt19937 rng(23);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  constexpr int kBlocks = 257;
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    for (int shape = 0; shape < 7; ++shape) {
      std::vector<float> x(32 * kBlocks);
      for (size_t i = 0; i < x.size(); ++i) {
        float v = normal(rng);
        const size_t j = i % 32;
        switch (shape) {
          case 1: v = (i / 32) % 2 ? 0.0f : -0.0f; break;                       // zero blocks, −0 too
          case 2: v = j == 5 ? 127.0f : static_cast<float>(static_cast<int>(v * 8)) + 0.5f; break;  // halves
          case 3: v = j == 3 ? 2.0f : j == 20 ? -2.0f : v * 0.5f; break;         // +a first, then −a
          case 4: v = j == 3 ? -2.0f : j == 20 ? 2.0f : v * 0.5f; break;         // −a first
          case 5: v = j == 31 ? 1e3f * v : v; break;                              // the extreme last
          case 6: v = static_cast<float>(static_cast<int>(v * 4)) / 4; break;   // exact ties
        }
        x[i] = v;
      }
      std::vector<BlockQ8_0> q8(kBlocks), q8_ref(kBlocks);
      detail::quantize_q8_0(x.data(), q8.data(), kBlocks);
      detail::quantize_q8_0_ref(x.data(), q8_ref.data(), kBlocks);
      EXPECT_EQ(std::memcmp(q8.data(), q8_ref.data(), sizeof(BlockQ8_0) * kBlocks), 0) << "Q8_0, shape " << shape;
      std::vector<BlockQ4_0> q4(kBlocks), q4_ref(kBlocks);
      detail::quantize_q4_0(x.data(), q4.data(), kBlocks);
      detail::quantize_q4_0_ref(x.data(), q4_ref.data(), kBlocks);
      EXPECT_EQ(std::memcmp(q4.data(), q4_ref.data(), sizeof(BlockQ4_0) * kBlocks), 0) << "Q4_0, shape " << shape;
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

}  // namespace
}  // namespace loom
