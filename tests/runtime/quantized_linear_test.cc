// linear() on quantized weights: every code path against the scalar kernels
// (bitwise: the integer sums are exact and the f32 steps are the same), against
// linear_ref on the dequantized weights (bounded by the activation rounding), and
// batch invariance.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

#include "loom/core/file_pages.h"
#include "loom/core/quantize.h"
#include "loom/core/cpu_features.h"
#include "runtime/matmul_test_util.h"
#include "loom/runtime/cpu/matmul.h"
#include "runtime/cpu/qdot_kernels.h"
#include "runtime/cpu/qgemm.h"
#include "runtime/cpu/qlevels.h"
#include "runtime/cpu/qlayout.h"
#include "runtime/cpu/qlinear.h"

namespace loom::cpu {

void PrintTo(Isa isa, std::ostream* os);

namespace {

const DType kTypes[] = {DType::kQ8_0,   DType::kQ4_0,   DType::kQ4_K,    DType::kQ5_K,   DType::kQ6_K,  DType::kQ4_1,
                        DType::kQ5_0,   DType::kQ5_1,   DType::kIQ4_NL,  DType::kMXFP4,  DType::kQ2_K,  DType::kQ3_K,
                        DType::kIQ4_XS, DType::kIQ2_XXS, DType::kIQ2_XS, DType::kIQ2_S,  DType::kIQ3_XXS, DType::kIQ3_S,
                        DType::kIQ1_S,  DType::kIQ1_M,  DType::kTQ1_0,   DType::kTQ2_0};

using test_util::random_floats;
using test_util::supported_isas;

Tensor quantized_weight(int64_t N, int64_t K, DType dt, uint32_t seed) { return test_util::random_weight(N, K, dt, seed); }

std::vector<float> run(const std::vector<float>& x, int64_t M, const PackedLinear& w, ThreadPool& pool) {
  std::vector<float> y(static_cast<size_t>(M * w.out_features()), -1.0f);
  linear(x.data(), M, w.in_features(), w, y.data(), w.out_features(), pool);
  return y;
}

std::vector<float> run_on(Isa isa, const std::vector<float>& x, int64_t M, const PackedLinear& w, ThreadPool& pool) {
  ScopedIsa force(isa);
  return run(x, M, w, pool);
}

struct Case {
  int64_t M, blocks, N;
};
// N: one output, tails of 32 and of the row tile, several chunks; M: decode, a
// partial row tile, several tiles plus a tail.
const Case kCases[] = {{1, 1, 1}, {1, 3, 45}, {3, 1, 33}, {3, 2, 7}, {17, 2, 45}, {17, 1, 130}, {1, 8, 257}};

class QuantizedLinearIsaTest : public ::testing::TestWithParam<Isa> {};

TEST_P(QuantizedLinearIsaTest, EqualsScalarKernelsBitwiseAndBoundsReference) {
  ThreadPool pool(2);
  uint32_t seed = 1;
  for (DType dt : kTypes) {
    for (const Case& c : kCases) {
      for (bool with_bias : {false, true}) {
        ++seed;
        const int64_t K = c.blocks * dtype_block_elements(dt);
        const Tensor weight = quantized_weight(c.N, K, dt, seed);
        const Tensor bias = Tensor::from_f32(random_floats(static_cast<size_t>(c.N), seed + 7), {c.N});
        auto packed = PackedLinear::pack(weight, with_bias ? &bias : nullptr);
        ASSERT_TRUE(packed.ok()) << packed.status().message();
        const std::vector<float> x = random_floats(static_cast<size_t>(c.M * K), seed + 3);
        const std::vector<float> scalar = run_on(Isa::kScalar, x, c.M, *packed, pool);
        const std::vector<float> got = run_on(GetParam(), x, c.M, *packed, pool);
        const std::string where = std::string(dtype_name(dt)) + " M=" + std::to_string(c.M) + " K=" +
                                  std::to_string(K) + " N=" + std::to_string(c.N) + (with_bias ? " bias" : "");
        ASSERT_EQ(got, scalar) << where;

        // Against f64 products of x with the dequantized weights: x is rounded to
        // int8 per block, |x − x̂| ≤ amax(x)/254 per element, so the difference is at
        // most Σ|w|·amax/254 (plus f32 accumulation, 1e-5 relative).
        const Tensor dequantized = weight.to(DType::kF32);
        std::vector<float> ref(scalar.size());
        linear_ref(x.data(), c.M, K, dequantized, with_bias ? &bias : nullptr, ref.data());
        std::vector<float> ref_q(scalar.size());
        linear_ref(x.data(), c.M, K, weight, with_bias ? &bias : nullptr, ref_q.data());
        ASSERT_EQ(ref_q, ref) << where << ": linear_ref on quantized weights dequantizes them";
        const std::vector<float> wf = dequantized.to_f32_vector();
        for (int64_t m = 0; m < c.M; ++m) {
          float amax = 0;
          for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(x[m * K + k]));
          for (int64_t n = 0; n < c.N; ++n) {
            double wsum = 0, xw = 0;
            for (int64_t k = 0; k < K; ++k) {
              wsum += std::fabs(wf[n * K + k]);
              xw += std::fabs(wf[n * K + k] * x[m * K + k]);
            }
            const double tol = wsum * amax / 254.0 + 1e-5 * xw + 1e-6;
            ASSERT_NEAR(got[m * c.N + n], ref[m * c.N + n], tol) << where << " at (" << m << ", " << n << ")";
          }
        }
      }
    }
  }
}

TEST_P(QuantizedLinearIsaTest, RowsAreBitwiseTheSameWhateverMPositionAndThreads) {
  ScopedIsa force(GetParam());
  ThreadPool one(1), two(2);
  uint32_t seed = 100;
  for (DType dt : kTypes) {
    const int64_t K = 2 * dtype_block_elements(dt), N = 70, M = 19;
    const Tensor weight = quantized_weight(N, K, dt, ++seed);
    const Tensor bias = Tensor::from_f32(random_floats(N, seed + 1), {N});
    auto packed = PackedLinear::pack(weight, &bias);
    ASSERT_TRUE(packed.ok()) << packed.status().message();
    const std::vector<float> x = random_floats(static_cast<size_t>(M * K), seed + 2);
    const std::vector<float> batch = run(x, M, *packed, two);
    EXPECT_EQ(run(x, M, *packed, one), batch) << dtype_name(dt) << ": one thread vs two";
    for (int64_t m : {int64_t{0}, int64_t{5}, M - 1}) {
      const std::vector<float> row(x.begin() + m * K, x.begin() + (m + 1) * K);
      const std::vector<float> alone = run(row, 1, *packed, two);
      EXPECT_TRUE(std::equal(alone.begin(), alone.end(), batch.begin() + m * N)) << dtype_name(dt) << " row " << m;
      // The same row behind two others lands in a different position of its tile.
      std::vector<float> shifted(x.begin(), x.begin() + 2 * K);
      shifted.insert(shifted.end(), row.begin(), row.end());
      const std::vector<float> three = run(shifted, 3, *packed, one);
      EXPECT_TRUE(std::equal(alone.begin(), alone.end(), three.begin() + 2 * N)) << dtype_name(dt) << " row " << m;
    }
  }
}

// Q4_0, Q4_K, Q5_K, Q6_K and Q8_0 interleaved in groups of 8 rows against the rows as
// stored, bitwise, at decode (the interleaved kernels; Q5_K's groups copied out as rows
// where it has none), small batches (the row kernels on rows copied out) and batches the
// tiles take (their unpacking reads both layouts); N with and without a tail past the
// last group.
TEST_P(QuantizedLinearIsaTest, InterleavedEqualsRowsBitwise) {
  ThreadPool pool(2);
  ScopedIsa force(GetParam());
  uint32_t seed = 300;
  for (DType dt : {DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ8_0}) {
    for (int64_t N : {8, 13, 45, 136, 257}) {
      for (int64_t blocks : {1, 3, 8}) {
        ++seed;
        const int64_t K = blocks * dtype_block_elements(dt);
        const Tensor weight = quantized_weight(N, K, dt, seed);
        const Tensor bias = Tensor::from_f32(random_floats(static_cast<size_t>(N), seed + 7), {N});
        for (bool with_bias : {false, true}) {
          auto rows = PackedLinear::pack(weight, with_bias ? &bias : nullptr, QuantLayout::kRows);
          auto grouped = PackedLinear::pack(weight, with_bias ? &bias : nullptr, QuantLayout::kInterleaved);
          ASSERT_TRUE(rows.ok() && grouped.ok());
          ASSERT_EQ(rows->quant_group_rows(), 1);
          ASSERT_EQ(grouped->quant_group_rows(), 8);
          // Past 128 rows even Q4_Kx8 runs on the tiles (grouped_tile_min_rows).
          for (int64_t M : {1, 2, 5, 9, 17, 33, 130}) {
            const std::vector<float> x = random_floats(static_cast<size_t>(M * K), seed + static_cast<uint32_t>(M));
            ASSERT_EQ(run(x, M, *grouped, pool), run(x, M, *rows, pool))
                << dtype_name(dt) << " M=" << M << " K=" << K << " N=" << N << (with_bias ? " bias" : "");
          }
        }
      }
    }
  }
}

// Q4_K and Q5_K rows of 16 blocks or more: on AVX-512 with VNNI the interleaved kernels
// take eight activation rows a call there (kQ4_Kx8Avx512Rows), one to eight of them,
// bitwise the rows.
TEST_P(QuantizedLinearIsaTest, InterleavedQ4_KLongRowsEqualRowsBitwise) {
  ThreadPool pool(2);
  ScopedIsa force(GetParam());
  uint32_t seed = 900;
  for (DType dt : {DType::kQ4_K, DType::kQ5_K}) {
    for (int64_t blocks : {16, 17}) {
      for (int64_t N : {8, 45}) {
        ++seed;
        const int64_t K = blocks * dtype_block_elements(dt);
        const Tensor weight = quantized_weight(N, K, dt, seed);
        auto rows = PackedLinear::pack(weight, nullptr, QuantLayout::kRows);
        auto grouped = PackedLinear::pack(weight, nullptr, QuantLayout::kInterleaved);
        ASSERT_TRUE(rows.ok() && grouped.ok());
        for (int64_t M : {5, 8, 9, 15, 32, 33}) {
          const std::vector<float> x = random_floats(static_cast<size_t>(M * K), seed + static_cast<uint32_t>(M));
          ASSERT_EQ(run(x, M, *grouped, pool), run(x, M, *rows, pool))
              << dtype_name(dt) << " M=" << M << " K=" << K << " N=" << N;
        }
      }
    }
  }
}

std::string isa_param_name(const ::testing::TestParamInfo<Isa>& info) { return std::string(isa_name(info.param)); }
INSTANTIATE_TEST_SUITE_P(Isa, QuantizedLinearIsaTest, ::testing::ValuesIn(supported_isas()), isa_param_name);

#if defined(LOOM_MATMUL_X86)
// Every x86 kernel table this CPU can run, whichever the ISA path would pick (an
// AVX2 path runs AVX-VNNI where the CPU has it, so maddubs is reached only so),
// bitwise equal to the scalar kernels at decode and batched M, extremes included.
TEST(QuantizedLinear, EveryKernelTableEqualsScalarBitwise) {
  if (!isa_supported(Isa::kAvx2)) GTEST_SKIP() << "this CPU has no AVX2 path";
  struct Table {
    const detail::QdotTable* table;
    bool usable;
  };
  const Table tables[] = {{&detail::qdot_avx2(), true},
                          {&detail::qdot_avxvnni(), cpu_features().avx_vnni},
                          {&detail::qdot_avx512vnni(), isa_supported(Isa::kAvx512) && cpu_features().avx512_vnni}};
  ThreadPool pool(2);
  detail::set_quantized_gemm_limit(detail::QuantGemm::kRows);
  uint32_t seed = 700;
  for (const Table& t : tables) {
    if (!t.usable) continue;
    for (DType dt : kTypes) {
      for (const Case& c : kCases) {
        ++seed;
        const int64_t K = c.blocks * dtype_block_elements(dt);
        const Tensor weight = quantized_weight(c.N, K, dt, seed);
        auto packed = PackedLinear::pack(weight, nullptr);
        ASSERT_TRUE(packed.ok()) << packed.status().message();
        // Activations at ±127 after quantization in every other row: the int16
        // pair sums of maddubs at their largest.
        std::vector<float> x = random_floats(static_cast<size_t>(c.M * K), seed + 3);
        for (int64_t m = 0; m < c.M; m += 2) {
          for (int64_t k = 0; k < K; ++k) x[m * K + k] = k % 3 ? 1.0f : -1.0f;
        }
        const std::vector<float> scalar = run_on(Isa::kScalar, x, c.M, *packed, pool);
        detail::force_quantized_kernels(t.table);
        const std::vector<float> got = run_on(Isa::kAvx2, x, c.M, *packed, pool);
        detail::force_quantized_kernels(nullptr);
        ASSERT_EQ(got, scalar) << t.table->name << " " << dtype_name(dt) << " M=" << c.M << " K=" << K
                               << " N=" << c.N;
      }
    }
  }
  detail::set_quantized_gemm_limit(detail::QuantGemm::kAmx);
}
#endif

TEST(QuantizedLinear, ForcedPathsPickTheirKernels) {
  {
    ScopedIsa force(Isa::kScalar);
    EXPECT_STREQ(detail::quantized_kernels_name(), "SCALAR");
  }
  if (isa_supported(Isa::kAvx2)) {
    ScopedIsa force(Isa::kAvx2);
    EXPECT_STREQ(detail::quantized_kernels_name(), cpu_features().avx_vnni ? "AVX_VNNI" : "AVX2");
  }
  if (isa_supported(Isa::kAvx512)) {
    ScopedIsa force(Isa::kAvx512);
    EXPECT_STREQ(detail::quantized_kernels_name(), cpu_features().avx512_vnni ? "AVX512_VNNI" : "AVX2");
  }
}

// Batched calls (M ≥ 8): the AMX-INT8 tiles where they run, the AVX512-VNNI
// tiles, the AVX2 tiles and the row kernels, each bitwise equal to the scalar
// kernels, over M tails around the 16- and 8-row tiles, output tails around the
// 16-output group and chunk, and K of several blocks.
class QuantizedGemmTest : public ::testing::TestWithParam<detail::QuantGemm> {
 protected:
  void SetUp() override {
    if (!isa_supported(isa())) GTEST_SKIP() << "this CPU has no " << isa_name(isa()) << " path";
    if (GetParam() == detail::QuantGemm::kAmx && !detail::amx_int8_usable()) {
      GTEST_SKIP() << "this CPU or OS gives no AMX-INT8 tiles";
    }
    if (GetParam() == detail::QuantGemm::kVnni && !detail::avx512_vnni_usable()) {
      GTEST_SKIP() << "this CPU has no AVX512-VNNI";
    }
    detail::set_quantized_gemm_limit(GetParam());
  }
  void TearDown() override { detail::set_quantized_gemm_limit(detail::QuantGemm::kAmx); }
  // The code path the batches run under: the AVX2 tiles on the AVX2 path, the
  // others on AVX512 (the row kernels on the best x86 path the CPU has).
  static Isa isa() {
    switch (GetParam()) {
      case detail::QuantGemm::kAvx2: return Isa::kAvx2;
      case detail::QuantGemm::kRows: return isa_supported(Isa::kAvx512) ? Isa::kAvx512 : Isa::kAvx2;
      default: return Isa::kAvx512;
    }
  }
};

TEST_P(QuantizedGemmTest, EqualsScalarKernelsBitwise) {
  {
    ScopedIsa force(isa());
    const char* want = GetParam() == detail::QuantGemm::kAmx    ? "AMX_INT8"
                       : GetParam() == detail::QuantGemm::kVnni ? "AVX512_VNNI_TILES"
                       : GetParam() == detail::QuantGemm::kAvx2 ? "AVX2_TILES"
                                                                : detail::quantized_kernels_name();
    EXPECT_STREQ(detail::quantized_gemm_name(), want);
  }
  ThreadPool pool(2);
  // {M, blocks, N}
  const Case cases[] = {{8, 1, 20},  {16, 1, 16},  {15, 2, 17}, {17, 3, 1}, {33, 1, 45},
                        {64, 2, 130}, {70, 5, 33}, {16, 4, 300}, {9, 2, 8},  {23, 1, 9}};
  uint32_t seed = 500;
  for (DType dt : kTypes) {
    for (const Case& c : cases) {
      for (bool with_bias : {false, true}) {
        ++seed;
        const int64_t K = c.blocks * dtype_block_elements(dt);
        const Tensor weight = quantized_weight(c.N, K, dt, seed);
        const Tensor bias = Tensor::from_f32(random_floats(static_cast<size_t>(c.N), seed + 7), {c.N});
        auto packed = PackedLinear::pack(weight, with_bias ? &bias : nullptr);
        ASSERT_TRUE(packed.ok()) << packed.status().message();
        // Activations of mixed scales, a few rows all zero: the block scales and
        // the K types' min terms differ per row.
        std::vector<float> x = random_floats(static_cast<size_t>(c.M * K), seed + 3);
        for (int64_t m = 0; m < c.M; ++m) {
          const float scale = m % 7 == 3 ? 0.0f : 1.0f + static_cast<float>(m % 5) * 3.0f;
          for (int64_t k = 0; k < K; ++k) x[m * K + k] *= scale;
        }
        const std::vector<float> scalar = run_on(Isa::kScalar, x, c.M, *packed, pool);
        const std::vector<float> got = run_on(isa(), x, c.M, *packed, pool);
        ASSERT_EQ(got, scalar) << dtype_name(dt) << " M=" << c.M << " K=" << K << " N=" << c.N
                               << (with_bias ? " bias" : "");
      }
    }
  }
}

TEST_P(QuantizedGemmTest, RowsOfABatchEqualTheRowAlone) {
  ScopedIsa force(isa());
  ThreadPool pool(2);
  uint32_t seed = 900;
  for (DType dt : kTypes) {
    const int64_t M = 37, K = 3 * dtype_block_elements(dt), N = 50;
    const Tensor weight = quantized_weight(N, K, dt, ++seed);
    const Tensor bias = Tensor::from_f32(random_floats(N, seed + 1), {N});
    auto packed = PackedLinear::pack(weight, &bias);
    ASSERT_TRUE(packed.ok()) << packed.status().message();
    const std::vector<float> x = random_floats(static_cast<size_t>(M * K), seed + 2);
    const std::vector<float> batch = run(x, M, *packed, pool);
    for (int64_t m : {int64_t{0}, int64_t{15}, int64_t{16}, int64_t{31}, M - 1}) {
      const std::vector<float> row(x.begin() + m * K, x.begin() + (m + 1) * K);
      const std::vector<float> alone = run(row, 1, *packed, pool);  // the row kernels (decode)
      EXPECT_TRUE(std::equal(alone.begin(), alone.end(), batch.begin() + m * N)) << dtype_name(dt) << " row " << m;
    }
    // The same rows one tile later (a batch of 16 + 37): the same bits.
    std::vector<float> later(x.begin(), x.begin() + 16 * K);
    later.insert(later.end(), x.begin(), x.end());
    const std::vector<float> shifted = run(later, 16 + M, *packed, pool);
    EXPECT_TRUE(std::equal(batch.begin(), batch.end(), shifted.begin() + 16 * N)) << dtype_name(dt);
  }
}

// Every level and scale at its largest (and Q6_K's scales at −128, Q8_0's levels
// at −128, Q4_0's at −8), activations at ±127 (and ±126 once per 32): the block
// sums reach their bounds (Q4_K: 8·63·15·127·32 > 2^24), so an f32 step that
// rounded or an int16 that wrapped or saturated would show.
TEST_P(QuantizedGemmTest, ExtremeLevelsAndScalesStayExact) {
  ThreadPool pool(2);
  const int64_t N = 20, nb = 3, K = nb * 256;
  // M = 1: the decode kernels (four outputs at a time); 33: the batched paths.
  for (int64_t M : {int64_t{1}, int64_t{33}}) {
    for (DType dt : kTypes) {
      const bool level_type = detail::is_level_type(dt);
      const size_t row_bytes = static_cast<size_t>(dtype_bytes(dt, K));
      const int64_t blocks = K / dtype_block_elements(dt);
      // Q8_0 levels all −128 (the sign trick's |w| = 128 case), Q4_0 all −8.
      const uint8_t fill = dt == DType::kQ8_0 ? 0x80 : dt == DType::kQ4_0 ? 0x00 : 0xFF;
      std::vector<uint8_t> raw(row_bytes * N, fill);
      for (int64_t n = 0; n < N; ++n) {
        for (int64_t b = 0; b < blocks; ++b) {
          uint8_t* block = raw.data() + n * row_bytes + b * (row_bytes / blocks);
          if (level_type) {
            test_util::set_block_scales(dt, block, 0x3C00, 127);  // 1.0: every sub-scale and level at its top
          } else if (dt == DType::kQ6_K) {
            auto* q = reinterpret_cast<BlockQ6_K*>(block);
            for (int8_t& sc : q->scales) sc = -128;
            q->d = 0x3C00;  // 1.0
          } else if (dt == DType::kQ4_K || dt == DType::kQ5_K) {
            auto* q = reinterpret_cast<uint16_t*>(block);  // d, dmin lead both layouts
            q[0] = 0x3C00;
            q[1] = 0x3800;  // 0.5
          } else {
            reinterpret_cast<uint16_t*>(block)[0] = 0x3C00;  // d leads Q8_0 and Q4_0
          }
        }
      }
      const Tensor weight = Tensor::wrap(raw.data(), dt, {N, K});
      std::vector<float> x(static_cast<size_t>(M * K));
      for (int64_t m = 0; m < M; ++m) {
        // one value per 32 a step below the top level: odd sums
        for (int64_t k = 0; k < K; ++k) x[m * K + k] = (m % 2 ? 1.0f : -2.0f) * (k % 32 == 5 ? 0.99f : 1.0f);
      }
      // Both layouts: the interleaved decode kernels add more in int16 than the row ones.
      for (QuantLayout layout : {QuantLayout::kRows, QuantLayout::kInterleaved}) {
        auto packed = PackedLinear::pack(weight, nullptr, layout);
        ASSERT_TRUE(packed.ok()) << packed.status().message();
        std::vector<float> scalar, got;
        {
          ScopedIsa force(Isa::kScalar);
          scalar = run(x, M, *packed, pool);
        }
        {
          ScopedIsa force(isa());
          got = run(x, M, *packed, pool);
        }
        ASSERT_EQ(got, scalar) << dtype_name(dt) << " M=" << M << " groups of " << packed->quant_group_rows();
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, QuantizedGemmTest,
                         ::testing::Values(detail::QuantGemm::kAmx, detail::QuantGemm::kVnni, detail::QuantGemm::kAvx2,
                                           detail::QuantGemm::kRows),
                         [](const ::testing::TestParamInfo<detail::QuantGemm>& info) {
                           return info.param == detail::QuantGemm::kAmx    ? "AMX"
                                  : info.param == detail::QuantGemm::kVnni ? "VNNI"
                                  : info.param == detail::QuantGemm::kAvx2 ? "AVX2"
                                                                           : "Rows";
                         });

#if defined(LOOM_MATMUL_X86)
// The SIMD activation quantizers against core's, bitwise, extremes included.
void expect_quantizers_equal_core(void (*q8x32)(const float*, ActBlockQ8x32*, int64_t),
                                  void (*q8k)(const float*, ActBlockQ8K*, int64_t)) {
  const int64_t n = 8 * 256;
  std::vector<float> x = random_floats(n, 77, 3.0f);
  for (int64_t i = 0; i < 256; ++i) x[256 + i] = 0.0f;      // an all-zero K block
  for (int64_t i = 0; i < 32; ++i) x[512 + i] = -1e-30f;    // a tiny scale
  x[1000] = 1e30f;                                          // a huge one
  for (int64_t i = 1024; i < 1056; ++i) x[i] = 0.5f * static_cast<float>(i - 1040);  // exact halves: ties round to even
  x[1300] = std::nanf("");                                  // NaN: skipped by the amax, as fmax does
  std::vector<ActBlockQ8x32> ref32(n / 32), got32(n / 32);
  quantize_activations_q8x32(x.data(), ref32.data(), n);
  q8x32(x.data(), got32.data(), n);
  for (int64_t b = 0; b < n / 32; ++b) {
    ASSERT_EQ(std::memcmp(&ref32[b], &got32[b], sizeof(ActBlockQ8x32)), 0) << "32-block " << b;
  }
  std::vector<ActBlockQ8K> refk(n / 256), gotk(n / 256);
  quantize_activations_q8k(x.data(), refk.data(), n);
  q8k(x.data(), gotk.data(), n);
  for (int64_t b = 0; b < n / 256; ++b) {
    ASSERT_EQ(std::memcmp(&refk[b], &gotk[b], sizeof(ActBlockQ8K)), 0) << "K block " << b;
  }
}

TEST(QuantizedLinear, Avx512ActivationQuantizersEqualCoreBitwise) {
  if (!isa_supported(Isa::kAvx512)) GTEST_SKIP() << "this CPU has no AVX512 path";
  expect_quantizers_equal_core(detail::quantize_activations_q8x32_avx512, detail::quantize_activations_q8k_avx512);
}

TEST(QuantizedLinear, Avx2ActivationQuantizersEqualCoreBitwise) {
  if (!isa_supported(Isa::kAvx2)) GTEST_SKIP() << "this CPU has no AVX2 path";
  expect_quantizers_equal_core(detail::quantize_activations_q8x32_avx2, detail::quantize_activations_q8k_avx2);
}
#endif

TEST(QuantizedLinear, InterleavedLayoutsGiveBackEveryRowsBlocks) {
  for (DType dt : {DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ8_0}) {
    const int64_t N = 19, blocks = 5;
    const size_t block_bytes = dtype_bytes(dt, dtype_block_elements(dt));
    const Tensor weight = quantized_weight(N, blocks * dtype_block_elements(dt), dt, 77);
    auto grouped = PackedLinear::pack(weight, nullptr, QuantLayout::kInterleaved);
    ASSERT_TRUE(grouped.ok());
    const size_t row_bytes = grouped->quant_row_bytes();
    const auto* stored = static_cast<const uint8_t*>(weight.data());
    // Groups take their rows' bytes, and the rows past the last group are as stored.
    EXPECT_EQ(std::memcmp(grouped->quant_row(16), stored + 16 * row_bytes, 3 * row_bytes), 0) << dtype_name(dt);
    EXPECT_NE(std::memcmp(grouped->quant_row(0), stored, 16 * row_bytes), 0) << dtype_name(dt);
    std::vector<uint8_t> scratch(row_bytes);
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t b0 = 0; b0 < blocks; ++b0) {
        for (int64_t nb = 1; b0 + nb <= blocks; ++nb) {
          const uint8_t* got = detail::quant_row_blocks(*grouped, n, b0, nb, scratch.data());
          ASSERT_EQ(std::memcmp(got, stored + n * row_bytes + b0 * block_bytes, nb * block_bytes), 0)
              << dtype_name(dt) << " row " << n << " blocks " << b0 << "+" << nb;
        }
      }
    }
  }
}

// weight_row gives back each row exactly as the source converts (a tied embedding
// reads its rows there), whatever the layout: rows, groups of 8 with a tail, or
// float panels with a partial last panel.
TEST(PackedLinear, WeightRowEqualsTheSourceRowInEveryLayout) {
  const int64_t N = 37;
  // BF16 twice: an odd K splits a pair, an even one packs full panels word by word.
  const std::pair<DType, int64_t> cases[] = {{DType::kF32, 67},  {DType::kF16, 67},  {DType::kBF16, 67},
                                             {DType::kBF16, 66}, {DType::kQ8_0, 64}, {DType::kQ4_0, 64},
                                             {DType::kQ4_K, 512}, {DType::kQ5_K, 512}, {DType::kQ6_K, 512}};
  for (const auto& [dt, K] : cases) {
    const Tensor weight = quantized_weight(N, K, dt, 5);
    const std::vector<float> expected = weight.to_f32_vector();
    for (QuantLayout layout : {QuantLayout::kRows, QuantLayout::kInterleaved}) {
      auto packed = PackedLinear::pack(weight, nullptr, layout);
      ASSERT_TRUE(packed.ok()) << packed.status().message();
      std::vector<float> row(static_cast<size_t>(K));
      for (int64_t n = 0; n < N; ++n) {
        packed->weight_row(n, row.data());
        ASSERT_EQ(std::memcmp(row.data(), expected.data() + n * K, row.size() * sizeof(float)), 0)
            << dtype_name(dt) << " row " << n << " group rows " << packed->quant_group_rows();
      }
    }
  }
}

// kAuto interleaves only over a file's mapping (a copy of a tensor in memory
// would hold the weights twice), and only where the decode kernel prefers it;
// the mapped source still reads back after its pages are released.
TEST(QuantizedLinear, AutoLayoutInterleavesMappedTensorsWhereDecodePrefersIt) {
  for (DType dt : {DType::kQ4_0, DType::kQ4_K, DType::kQ8_0, DType::kQ6_K, DType::kQ5_K}) {
    const int64_t N = 64, K = 4096;
    const Tensor weight = quantized_weight(N, K, dt, 91);
    auto in_memory = PackedLinear::pack(weight, nullptr);
    ASSERT_TRUE(in_memory.ok());
    EXPECT_EQ(in_memory->quant_group_rows(), 1);

    char path[] = "/tmp/loom_interleave_XXXXXX";
    const int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(write(fd, weight.data(), weight.nbytes()), static_cast<ssize_t>(weight.nbytes()));
    void* map = mmap(nullptr, weight.nbytes(), PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    unlink(path);
    ASSERT_NE(map, MAP_FAILED);
    register_file_mapping(map, weight.nbytes());
    {
      const Tensor mapped = Tensor::wrap(map, dt, {N, K});
      for (Isa isa : supported_isas()) {
        ScopedIsa force(isa);
        auto packed = PackedLinear::pack(mapped, nullptr);
        ASSERT_TRUE(packed.ok());
        EXPECT_EQ(packed->quant_group_rows(), detail::decode_prefers_interleaved(dt) ? 8 : 1)
            << dtype_name(dt) << " " << isa_name(isa);
        // Every SIMD path decodes the interleaved layouts.
        const bool simd = std::string(detail::quantized_kernels_name()) != "SCALAR";
        EXPECT_EQ(detail::decode_prefers_interleaved(dt), simd) << dtype_name(dt) << " " << isa_name(isa);
      }
      EXPECT_EQ(std::memcmp(map, weight.data(), weight.nbytes()), 0) << "released pages read back from the file";
    }
    unregister_file_mapping(map);
    munmap(map, weight.nbytes());
  }
}

// The benchmarks' switches (`loom bench --quant-layout`, `--quant-gemm`): what kAuto packs
// follows the override until it is set back to auto, and names outside the choices are named.
TEST(QuantizedLinear, AutoLayoutFollowsTheBenchmarkOverride) {
  const Tensor weight = quantized_weight(16, 64, DType::kQ4_0, 7);
  EXPECT_EQ(PackedLinear::pack(weight, nullptr)->quant_group_rows(), 1);  // in memory: rows
  set_auto_quant_layout(QuantLayout::kInterleaved);
  EXPECT_EQ(PackedLinear::pack(weight, nullptr)->quant_group_rows(), 8);
  set_auto_quant_layout(QuantLayout::kAuto);
  EXPECT_EQ(PackedLinear::pack(weight, nullptr)->quant_group_rows(), 1);

  EXPECT_EQ(quant_layout_from_name("rows").value(), QuantLayout::kRows);
  EXPECT_EQ(quant_layout_from_name("interleaved").value(), QuantLayout::kInterleaved);
  EXPECT_EQ(quant_gemm_from_name("vnni").value(), QuantGemm::kVnni);
  EXPECT_EQ(quant_gemm_from_name("rows").value(), QuantGemm::kRows);
  const Status bad_layout = quant_layout_from_name("columns").status();
  EXPECT_NE(bad_layout.message().find("auto, rows or interleaved, got \"columns\""), std::string::npos) << bad_layout.message();
  const Status bad_gemm = quant_gemm_from_name("gpu").status();
  EXPECT_NE(bad_gemm.message().find("amx, vnni, avx2 or rows, got \"gpu\""), std::string::npos) << bad_gemm.message();
}

TEST(QuantizedLinear, PackRejectsRowsThatAreNotWholeBlocks) {
  // A [4, 48] Q8_0 tensor is not whole 32-blocks per row though 192 elements are.
  const Tensor ok = quantized_weight(4, 64, DType::kQ8_0, 1);
  const Tensor bad = Tensor::wrap(const_cast<void*>(ok.data()), DType::kQ8_0, {8, 16});
  auto packed = PackedLinear::pack(bad, nullptr);
  ASSERT_FALSE(packed.ok());
  EXPECT_NE(packed.status().message().find("multiple of Q8_0's block of 32"), std::string::npos)
      << packed.status().message();
}

}  // namespace
}  // namespace loom::cpu
