#include "loom/runtime/cpu/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "loom/core/cpu_features.h"
#include "runtime/matmul_test_util.h"
#include "baselines/matmul_baselines.h"
#include "runtime/cpu/matmul_kernels.h"
#include "runtime/cpu/pack_panel_words.h"

namespace loom::cpu {
namespace {

constexpr float kSentinel = -12345.5f;

}  // namespace

// Names the path in gtest messages instead of "1-byte object <02>".
void PrintTo(Isa isa, std::ostream* os) { *os << isa_name(isa); }

namespace {

using test_util::random_floats;
using test_util::supported_isas;

Tensor make_weight(int64_t N, int64_t K, DType dt, uint32_t seed) { return test_util::random_weight(N, K, dt, seed); }

// The vdpbf16ps path rounds x to bf16; every other combination computes in f32.
bool rounds_x(Isa isa, DType dt) { return isa == Isa::kAvx512Bf16 && dt == DType::kBF16; }

struct Shape3 {
  int64_t M, K, N;
};

// Runs linear() on strided x/y, checks the padding of y is untouched, and returns
// the dense [M, N] result.
std::vector<float> run_linear(const std::vector<float>& x, int64_t M, int64_t K, const PackedLinear& w,
                              ThreadPool& pool, int64_t x_pad = 0, int64_t y_pad = 0) {
  const int64_t N = w.out_features();
  const int64_t xs = K + x_pad, ys = N + y_pad;
  std::vector<float> xb(static_cast<size_t>(M * xs), std::numeric_limits<float>::quiet_NaN());
  for (int64_t m = 0; m < M; ++m) std::memcpy(&xb[m * xs], &x[m * K], sizeof(float) * K);
  std::vector<float> yb(static_cast<size_t>(M * ys), kSentinel);
  linear(xb.data(), M, xs, w, yb.data(), ys, pool);
  std::vector<float> y(static_cast<size_t>(M * N));
  for (int64_t m = 0; m < M; ++m) {
    std::memcpy(&y[m * N], &yb[m * ys], sizeof(float) * N);
    for (int64_t j = N; j < ys; ++j) {
      EXPECT_EQ(yb[m * ys + j], kSentinel) << "row " << m << " padding column " << j << " overwritten";
    }
  }
  return y;
}

// Checks y against the double-precision reference with a rigorous bound: a
// K-term dot product in f32 (fma or not) is within K·u·Σ|x·w| of the exact value
// (Higham, γ_K), plus one rounding for the bias. Rounding x to bf16 adds up to
// 2⁻⁸·Σ|x·w|.
void expect_close_to_ref(const std::vector<float>& y, const std::vector<float>& x, int64_t M, int64_t K,
                         const Tensor& weight, const Tensor* bias, bool x_rounded, const std::string& what) {
  const int64_t N = weight.dim(0);
  std::vector<float> ref(static_cast<size_t>(M * N));
  linear_ref(x.data(), M, K, weight, bias, ref.data());
  const std::vector<float> w = weight.to_f32_vector();
  const std::vector<float> b = bias ? bias->to_f32_vector() : std::vector<float>();
  const double u = std::ldexp(1.0, -24);
  double err2 = 0, ref2 = 0;
  int reported = 0;
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double mag = 0;
      for (int64_t k = 0; k < K; ++k) mag += std::fabs(static_cast<double>(x[m * K + k]) * w[n * K + k]);
      const double bmag = bias ? std::fabs(b[n]) : 0.0;
      const double rel = (K + 2) * u + (x_rounded ? std::ldexp(1.0, -8) : 0.0);
      const double bound = 1.01 * rel * (mag + bmag) + 1e-30;
      const double got = y[m * N + n], want = ref[m * N + n];
      err2 += (got - want) * (got - want);
      ref2 += want * want;
      if (!(std::fabs(got - want) <= bound) && reported++ < 5) {
        ADD_FAILURE() << what << ": y[" << m << "," << n << "] = " << got << ", reference " << want
                      << ", |diff| " << std::fabs(got - want) << " > bound " << bound;
      }
    }
  }
  // Mean-square error relative to the output's power: f32 paths sit near 1e-14,
  // bf16-rounded x near 1e-6 — both far below the 1e-4 model parity budget.
  const double nmse = ref2 > 0 ? err2 / ref2 : err2;
  EXPECT_LE(nmse, x_rounded ? 1e-5 : 1e-10) << what << ": NMSE " << nmse;
}

// The exact-products contract (bitwise across paths, f32 bounds) is "highest"'s:
// pinned here, as the default ("auto") may round x to bf16 on CPUs with fast bf16 dots.
class LinearIsaTest : public ::testing::TestWithParam<Isa> {
  ScopedMatmulPrecision highest_{MatmulPrecision::kHighest};
};

std::string isa_param_name(const ::testing::TestParamInfo<Isa>& info) {
  return std::string(isa_name(info.param));
}

// Shapes around every boundary the kernels have: tile rows (AVX2 6, AVX-512 12),
// the streaming/blocked switch at M = 16, panel width 32, k blocks of 256, row blocks
// of 192, odd K (bf16 pairs), and N = 1 / K = 1.
const std::vector<Shape3>& shapes() {
  static const std::vector<Shape3> s = {
      {1, 1, 1},     {1, 1, 33},   {1, 7, 1},     {1, 64, 32},   {1, 257, 65},  {1, 300, 100}, {2, 3, 5},
      {2, 31, 31},   {3, 33, 64},  {4, 16, 96},   {4, 511, 33},  {5, 2, 3},     {5, 17, 40},   {6, 64, 64},
      {7, 255, 97},  {11, 40, 31}, {12, 256, 32}, {13, 257, 33}, {16, 100, 129}, {17, 513, 50}, {24, 9, 160},
      {33, 65, 1},   {40, 1, 70},  {47, 130, 257}, {64, 258, 63}, {70, 31, 99},  {70, 300, 33}, {200, 300, 45},
  };
  return s;
}

TEST_P(LinearIsaTest, MatchesReferenceAcrossShapesAndDtypes) {
  ScopedIsa force(GetParam());
  ASSERT_EQ(isa_name(), std::string(isa_name(GetParam())));
  ThreadPool pool(2);
  uint32_t seed = 1;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (const Shape3& s : shapes()) {
      for (bool with_bias : {false, true}) {
        ++seed;
        const Tensor weight = make_weight(s.N, s.K, dt, seed);
        const Tensor bias = Tensor::from_f32(random_floats(s.N, seed + 1000), {s.N});
        Result<PackedLinear> packed = PackedLinear::pack(weight, with_bias ? &bias : nullptr);
        ASSERT_TRUE(packed.ok()) << packed.status().to_string();
        const std::vector<float> x = random_floats(static_cast<size_t>(s.M * s.K), seed + 2000);
        const std::string what = std::string(dtype_name(dt)) + " M=" + std::to_string(s.M) +
                                 " K=" + std::to_string(s.K) + " N=" + std::to_string(s.N) +
                                 (with_bias ? " bias" : "");
        // Strided x and y on every other case, dense on the rest.
        const int64_t pad = (seed % 2) ? 3 : 0;
        const std::vector<float> y = run_linear(x, s.M, s.K, *packed, pool, pad, pad * 2);
        expect_close_to_ref(y, x, s.M, s.K, weight, with_bias ? &bias : nullptr, rounds_x(GetParam(), dt), what);
      }
    }
  }
}

// Every path other than vdpbf16ps performs the same fma sequence as the scalar
// code, so their results are bitwise identical to it.
TEST_P(LinearIsaTest, BitwiseEqualToScalarPath) {
  ThreadPool pool(2);
  uint32_t seed = 77;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    if (rounds_x(GetParam(), dt)) continue;  // checked against the reference above
    for (const Shape3& s : {Shape3{1, 300, 70}, Shape3{3, 33, 33}, Shape3{9, 257, 65}, Shape3{70, 513, 40}}) {
      ++seed;
      const Tensor weight = make_weight(s.N, s.K, dt, seed);
      const Tensor bias = Tensor::from_f32(random_floats(s.N, seed + 5), {s.N});
      PackedLinear w = PackedLinear::pack(weight, &bias).value();
      const std::vector<float> x = random_floats(static_cast<size_t>(s.M * s.K), seed + 9);
      std::vector<float> want, got;
      {
        ScopedIsa force(Isa::kScalar);
        want = run_linear(x, s.M, s.K, w, pool);
      }
      {
        ScopedIsa force(GetParam());
        got = run_linear(x, s.M, s.K, w, pool);
      }
      ASSERT_EQ(0, std::memcmp(want.data(), got.data(), sizeof(float) * want.size()))
          << dtype_name(dt) << " M=" << s.M << " K=" << s.K << " N=" << s.N;
    }
  }
}

// A row's result does not depend on how many rows run with it, where it sits, the
// strides, or the thread count (what keeps batched greedy decoding identical to
// decoding alone).
TEST_P(LinearIsaTest, RowsAreBitwiseIndependentOfBatchAndThreads) {
  ScopedIsa force(GetParam());
  ThreadPool pool1(1), pool2(2), pool3(3);
  const int64_t M = 70, K = 300;
  uint32_t seed = 500;
  // N = 200 splits panels across threads, N = 40 (two panels) splits rows.
  for (const auto& [dt, N] : {std::pair{DType::kF32, int64_t{200}}, std::pair{DType::kBF16, int64_t{200}},
                              std::pair{DType::kF16, int64_t{200}}, std::pair{DType::kF32, int64_t{40}},
                              std::pair{DType::kBF16, int64_t{40}}}) {
    ++seed;
    const Tensor weight = make_weight(N, K, dt, seed);
    const Tensor bias = Tensor::from_f32(random_floats(N, seed + 1), {N});
    PackedLinear w = PackedLinear::pack(weight, &bias).value();
    const std::vector<float> x = random_floats(static_cast<size_t>(M * K), seed + 2);
    const std::vector<float> full = run_linear(x, M, K, w, pool2);
    EXPECT_EQ(0, std::memcmp(full.data(), run_linear(x, M, K, w, pool1, 5, 1).data(), sizeof(float) * M * N))
        << dtype_name(dt) << ": 1 thread differs from 2";
    EXPECT_EQ(0, std::memcmp(full.data(), run_linear(x, M, K, w, pool3).data(), sizeof(float) * M * N))
        << dtype_name(dt) << ": 3 threads differ from 2";
    // Sub-batches of assorted sizes, including the single-row decode case.
    for (int64_t rows : {1, 2, 4, 5, 13, 29}) {
      for (int64_t m0 = 0; m0 + rows <= M; m0 += rows + 7) {
        std::vector<float> xs(x.begin() + m0 * K, x.begin() + (m0 + rows) * K);
        const std::vector<float> part = run_linear(xs, rows, K, w, pool2);
        ASSERT_EQ(0, std::memcmp(part.data(), full.data() + m0 * N, sizeof(float) * rows * N))
            << dtype_name(dt) << ": rows [" << m0 << ", " << m0 + rows << ") alone differ from the batch of " << M;
      }
    }
  }
}

// Layers big enough to be cut into chunks that threads share and steal
// (matmul.cc share_chunks): the result is the same for any thread count, with or
// without stealing, and equal to one thread on the scalar path.
TEST_P(LinearIsaTest, ChunkedLayersAreBitwiseIndependentOfThreadsAndStealing) {
  ThreadPool pool1(1), pool2(2), pool3(3);
  uint32_t seed = 700;
  struct RestoreStealing {
    ~RestoreStealing() { detail::set_work_stealing(true); }
  } restore;
  for (DType dt : {DType::kBF16, DType::kF32}) {
    // M = 1 and 3 stream (3 chunks in bf16, 8 in f32), M = 40 runs f32 in blocks.
    for (int64_t M : {1, 3, 40}) {
      ++seed;
      const int64_t K = 520, N = 1000;
      const Tensor weight = make_weight(N, K, dt, seed);
      const Tensor bias = Tensor::from_f32(random_floats(N, seed + 1), {N});
      PackedLinear w = PackedLinear::pack(weight, &bias).value();
      const std::vector<float> x = random_floats(static_cast<size_t>(M * K), seed + 2);
      std::vector<float> want;
      {
        ScopedIsa force(Isa::kScalar);
        want = run_linear(x, M, K, w, pool1);
      }
      ScopedIsa force(GetParam());
      if (rounds_x(GetParam(), dt)) want = run_linear(x, M, K, w, pool1);
      for (bool steal : {true, false}) {
        detail::set_work_stealing(steal);
        for (ThreadPool* pool : {&pool1, &pool2, &pool3}) {
          const std::vector<float> got = run_linear(x, M, K, w, *pool, 1, 2);
          ASSERT_EQ(0, std::memcmp(want.data(), got.data(), sizeof(float) * want.size()))
              << dtype_name(dt) << " M=" << M << " threads=" << pool->num_threads() << (steal ? "" : " no stealing");
        }
      }
    }
  }
}

// linear() streams panels for small M and blocks for large M; whichever it
// picks, the numbers are the same.
TEST_P(LinearIsaTest, StreamingAndBlockedStrategiesAgreeBitwise) {
  ScopedIsa force(GetParam());
  ThreadPool pool(2);
  uint32_t seed = 900;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (const Shape3& s : {Shape3{1, 513, 40}, Shape3{5, 300, 65}, Shape3{13, 257, 33}, Shape3{30, 77, 100}}) {
      ++seed;
      const Tensor weight = make_weight(s.N, s.K, dt, seed);
      const Tensor bias = Tensor::from_f32(random_floats(s.N, seed + 1), {s.N});
      PackedLinear w = PackedLinear::pack(weight, &bias).value();
      const std::vector<float> x = random_floats(static_cast<size_t>(s.M * s.K), seed + 2);
      struct RestoreDefault {
        ~RestoreDefault() { detail::set_stream_max_rows(-1); }
      } restore;
      detail::set_stream_max_rows(1 << 20);
      const std::vector<float> streamed = run_linear(x, s.M, s.K, w, pool, 1, 0);
      detail::set_stream_max_rows(0);
      const std::vector<float> blocked = run_linear(x, s.M, s.K, w, pool, 0, 2);
      ASSERT_EQ(0, std::memcmp(streamed.data(), blocked.data(), sizeof(float) * streamed.size()))
          << dtype_name(dt) << " M=" << s.M << " K=" << s.K << " N=" << s.N;
    }
  }
}

TEST_P(LinearIsaTest, PropagatesNonFiniteValues) {
  ScopedIsa force(GetParam());
  ThreadPool pool(2);
  const int64_t K = 40, N = 3;
  std::vector<float> w(N * K, 0.25f);
  w[1 * K + 5] = std::numeric_limits<float>::infinity();
  const Tensor weight = Tensor::from_f32(w, {N, K}).to(DType::kBF16);
  PackedLinear packed = PackedLinear::pack(weight, nullptr).value();
  std::vector<float> x(2 * K, 1.0f);
  x[1 * K + 7] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> y = run_linear(x, 2, K, packed, pool);
  EXPECT_FLOAT_EQ(y[0], 10.0f);  // 40 × 0.25 × 1
  EXPECT_TRUE(std::isinf(y[1]) && y[1] > 0);
  EXPECT_FLOAT_EQ(y[2], 10.0f);
  for (int n = 0; n < N; ++n) EXPECT_TRUE(std::isnan(y[N + n])) << "column " << n;
}

INSTANTIATE_TEST_SUITE_P(Isa, LinearIsaTest, ::testing::ValuesIn(supported_isas()), isa_param_name);

// Runs `tile` over np panels of w in one call (TileArgs::panels) and `one_panel` over the
// same panels one call each, on rows a (lda apart) and a C wider than the panels; returns
// whether both wrote the same bytes.
::testing::AssertionResult multi_panel_equals_panel_by_panel(const PackedLinear& w, int64_t N, int64_t K, int np,
                                                             const void* a, int64_t lda, int mr, bool accumulate,
                                                             detail::TileFn one_panel, detail::TileFn tile,
                                                             uint32_t seed) {
  const int64_t ldc = np * detail::kNr + 3;
  const std::vector<float> c0 = random_floats(static_cast<size_t>(mr * ldc), seed);
  std::vector<float> want = c0, got = c0;
  detail::TileArgs t;
  t.a = a;
  t.lda = lda;
  t.k = K;
  t.ldc = ldc;
  t.mr = mr;
  t.accumulate = accumulate;
  for (int j = 0; j < np; ++j) {
    detail::TileArgs one = t;
    one.b = w.panel(j);
    one.c = want.data() + j * detail::kNr;
    one.n_valid = static_cast<int>(std::min<int64_t>(detail::kNr, N - j * detail::kNr));
    one.bias = w.bias() + j * detail::kNr;
    one_panel(one);
  }
  t.b = w.panel(0);
  t.c = got.data();
  t.panels = np;
  t.panel_stride = static_cast<int64_t>(w.panel_stride_bytes());
  t.n_valid = static_cast<int>(N);
  t.bias = w.bias();
  tile(t);
  if (std::memcmp(want.data(), got.data(), sizeof(float) * want.size()) == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "K=" << K << " mr=" << mr << " panels=" << np
                                       << (accumulate ? " accumulate" : "");
}

// The streaming tiles that take several panels per call (TileArgs::panels), called
// directly against the scalar tile run one panel at a time: every legal
// (rows, panels) pair, odd K (bf16 pair tail), a partial last panel, a C row
// stride wider than the panels, bias and accumulate.
TEST(StreamTiles, MultiPanelTilesEqualScalarTilesPanelByPanel) {
  std::vector<const detail::KernelTable*> tables;
#if defined(LOOM_MATMUL_X86)
  if (isa_supported(Isa::kAvx2)) tables.push_back(&detail::kernels_avx2());
  if (isa_supported(Isa::kAvx512)) tables.push_back(&detail::kernels_avx512());
#endif
  const detail::KernelTable& scalar = detail::kernels_scalar();
  uint32_t seed = 4000;
  for (const detail::KernelTable* kt : tables) {
    if (!kt->stream_panels) continue;  // one panel per call: covered by LinearIsaTest
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (int64_t K : {1, 2, 37, 300}) {
        for (int mr = 1; mr <= kt->max_mr; ++mr) {
          for (int np = 2; np <= kt->stream_panels(mr); np *= 2) {
            for (bool accumulate : {false, true}) {
              ++seed;
              const int64_t N = np * detail::kNr - 5;  // last panel partial
              const Tensor weight = make_weight(N, K, dt, seed);
              const Tensor bias = Tensor::from_f32(random_floats(N, seed + 1), {N});
              PackedLinear w = PackedLinear::pack(weight, &bias).value();
              const std::vector<float> x = random_floats(static_cast<size_t>(mr * K), seed + 2);
              const detail::TileFn ref = dt == DType::kF32 ? scalar.f32 : dt == DType::kF16 ? scalar.f16 : scalar.bf16;
              const detail::TileFn tile = dt == DType::kF32 ? kt->f32 : dt == DType::kF16 ? kt->f16 : kt->bf16;
              ASSERT_TRUE(multi_panel_equals_panel_by_panel(w, N, K, np, x.data(), K, mr, accumulate, ref, tile,
                                                            seed + 3))
                  << kt->name << " " << dtype_name(dt);
            }
          }
        }
      }
    }
  }
}

// The vdpbf16ps tile over several panels per call against itself one panel at a
// time (it has no scalar twin: x is rounded to bf16 first): every legal (rows,
// panels) pair, odd K, a partial last panel, bias and accumulate.
TEST(StreamTiles, MultiPanelDotTilesEqualOnePanelAtATime) {
#if defined(LOOM_MATMUL_X86)
  if (!isa_supported(Isa::kAvx512Bf16)) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  const detail::KernelTable& kt = detail::kernels_avx512_bf16();
  ASSERT_NE(kt.bf16_dot, nullptr);
  ASSERT_NE(kt.stream_panels, nullptr);
  uint32_t seed = 4500;
  for (int64_t K : {1, 2, 37, 300}) {
    const int64_t kp = (K + 1) / 2 * 2;
    for (int mr = 1; mr <= kt.max_mr; ++mr) {
      for (int np = 2; np <= kt.stream_panels(mr); np *= 2) {
        for (bool accumulate : {false, true}) {
          ++seed;
          const int64_t N = np * detail::kNr - 5;
          const Tensor weight = make_weight(N, K, DType::kBF16, seed);
          const Tensor bias = Tensor::from_f32(random_floats(N, seed + 1), {N});
          PackedLinear w = PackedLinear::pack(weight, &bias).value();
          const std::vector<float> x = random_floats(static_cast<size_t>(mr * K), seed + 2);
          std::vector<uint16_t> xb(static_cast<size_t>(mr * kp));
          for (int m = 0; m < mr; ++m) detail::round_to_bf16_avx512bf16(&x[m * K], K, kp, &xb[m * kp]);
          ASSERT_TRUE(multi_panel_equals_panel_by_panel(w, N, K, np, xb.data(), kp, mr, accumulate, kt.bf16_dot,
                                                        kt.bf16_dot, seed + 3));
        }
      }
    }
  }
#else
  GTEST_SKIP() << "x86 only";
#endif
}

TEST(MatmulPrecision, NamesRoundTripAndBadNamesAreErrors) {
  for (MatmulPrecision p :
       {MatmulPrecision::kHighest, MatmulPrecision::kHigh, MatmulPrecision::kMedium, MatmulPrecision::kAuto}) {
    const Result<MatmulPrecision> back = matmul_precision_from_name(matmul_precision_name(p));
    ASSERT_TRUE(back.ok()) << matmul_precision_name(p);
    EXPECT_EQ(back.value(), p);
  }
  for (const char* bad : {"", "low", "Medium", "bfloat16"}) {
    const Result<MatmulPrecision> r = matmul_precision_from_name(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("highest, high, medium or auto"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(std::string("\"") + bad + "\""), std::string::npos) << r.status().message();
  }
}

// "medium" switches bf16 weights to the vdpbf16ps path exactly where the CPU runs it fast
// (bitwise what forcing AVX512_BF16 gives, within bf16 rounding of the reference);
// "highest" and "high" and f32/f16 weights keep the exact f32 products; "auto" (the
// default) is medium's choice, bitwise, at every M.
TEST(MatmulPrecision, MediumUsesBf16DotProductsOnlyForBf16WeightsOnCpusWithThem) {
  ScopedMatmulPrecision restore(matmul_precision());
  ThreadPool pool(2);
  const bool has_dot = isa_supported(Isa::kAvx512Bf16) && cpu_features().fast_bf16_dot;
  uint32_t seed = 6000;
  for (DType dt : {DType::kBF16, DType::kF32, DType::kF16}) {
    for (const Shape3& s : {Shape3{1, 300, 70}, Shape3{7, 257, 65}, Shape3{200, 513, 40}}) {
      ++seed;
      const Tensor weight = make_weight(s.N, s.K, dt, seed);
      const Tensor bias = Tensor::from_f32(random_floats(s.N, seed + 1), {s.N});
      PackedLinear w = PackedLinear::pack(weight, &bias).value();
      const std::vector<float> x = random_floats(static_cast<size_t>(s.M * s.K), seed + 2);
      const std::string what = std::string(dtype_name(dt)) + " M=" + std::to_string(s.M);
      set_matmul_precision(MatmulPrecision::kHighest);
      EXPECT_FALSE(bf16_dot_products_active() && active_isa() != Isa::kAvx512Bf16);
      const std::vector<float> highest = run_linear(x, s.M, s.K, w, pool);
      set_matmul_precision(MatmulPrecision::kHigh);
      ASSERT_EQ(0, std::memcmp(highest.data(), run_linear(x, s.M, s.K, w, pool).data(), sizeof(float) * highest.size()))
          << what << ": high differs from highest";
      set_matmul_precision(MatmulPrecision::kMedium);
      const bool dot = has_dot && best_isa() == Isa::kAvx512 && active_isa() == Isa::kAvx512;
      EXPECT_EQ(bf16_dot_products_active(), dot || active_isa() == Isa::kAvx512Bf16);
      const std::vector<float> medium = run_linear(x, s.M, s.K, w, pool);
      set_matmul_precision(MatmulPrecision::kAuto);
      EXPECT_EQ(bf16_dot_products_active(), dot || active_isa() == Isa::kAvx512Bf16);
      ASSERT_EQ(0, std::memcmp(medium.data(), run_linear(x, s.M, s.K, w, pool).data(), sizeof(float) * medium.size()))
          << what << ": auto differs from medium";
      set_matmul_precision(MatmulPrecision::kMedium);
      if (dt == DType::kBF16 && dot) {
        std::vector<float> forced;
        {
          ScopedIsa force(Isa::kAvx512Bf16);
          forced = run_linear(x, s.M, s.K, w, pool);
        }
        ASSERT_EQ(0, std::memcmp(forced.data(), medium.data(), sizeof(float) * medium.size())) << what;
        EXPECT_NE(0, std::memcmp(highest.data(), medium.data(), sizeof(float) * medium.size()))
            << what << ": medium did not round x";
        expect_close_to_ref(medium, x, s.M, s.K, weight, &bias, true, what);
      } else if (active_isa() != Isa::kAvx512Bf16) {
        ASSERT_EQ(0, std::memcmp(highest.data(), medium.data(), sizeof(float) * medium.size()))
            << what << ": medium changed a path without bf16 dot products";
      }
    }
  }
}

TEST(PackedLinear, ReportsShapeDtypeAndSize) {
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    const Tensor weight = make_weight(70, 33, dt, 3);
    const Tensor bias = Tensor::from_f32(random_floats(70, 4), {70}).to(DType::kBF16);
    PackedLinear w = PackedLinear::pack(weight, &bias).value();
    EXPECT_EQ(w.in_features(), 33);
    EXPECT_EQ(w.out_features(), 70);
    EXPECT_EQ(w.weight_dtype(), dt);
    EXPECT_TRUE(w.has_bias());
    // At least the weights and bias themselves; padding to whole panels of 32 rows
    // (and bf16 K to even) costs at most 2 × 31 extra rows here.
    const size_t raw = weight.nbytes() + 70 * sizeof(float);
    EXPECT_GE(w.packed_bytes(), raw);
    EXPECT_LE(w.packed_bytes(), (70 + 31 + 31) * 34 * dtype_size(dt) + 96 * sizeof(float));
    PackedLinear copy = w;  // shares storage
    EXPECT_EQ(copy.panel(0), w.panel(0));
  }
}

TEST(PackedLinear, RejectsBadWeightsAndBiasWithClearErrors) {
  const Tensor w = make_weight(4, 8, DType::kF32, 1);
  auto expect_error = [](const Result<PackedLinear>& r, const std::string& needle) {
    ASSERT_FALSE(r.ok()) << "expected an error mentioning " << needle;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().to_string();
  };
  expect_error(PackedLinear::pack(Tensor(), nullptr), "undefined");
  expect_error(PackedLinear::pack(w.reshape({32}), nullptr), "[out_features, in_features]");
  expect_error(PackedLinear::pack(Tensor::from_i32(std::vector<int32_t>(8, 1), {2, 4}), nullptr), "I32");
  expect_error(PackedLinear::pack(Tensor::zeros(DType::kF32, {0, 8}), nullptr), "empty");
  const Tensor bad_bias = Tensor::from_f32({1, 2, 3}, {3});
  expect_error(PackedLinear::pack(w, &bad_bias), "bias must be a float tensor [4]");
  const Tensor int_bias = Tensor::from_i32({1, 2, 3, 4}, {4});
  expect_error(PackedLinear::pack(w, &int_bias), "bias");
}

TEST(Linear, RejectsBadArgumentsWithoutCrashing) {
  ThreadPool pool(2);
  PackedLinear w = PackedLinear::pack(make_weight(4, 8, DType::kF32, 1), nullptr).value();
  std::vector<float> x(16), y(8);
  EXPECT_THROW(linear(x.data(), 2, 7, w, y.data(), 4, pool), Error);   // x_stride < K
  EXPECT_THROW(linear(x.data(), 2, 8, w, y.data(), 3, pool), Error);   // y_stride < N
  EXPECT_THROW(linear(x.data(), -1, 8, w, y.data(), 4, pool), Error);
  EXPECT_THROW(linear(x.data(), 1, 8, PackedLinear(), y.data(), 4, pool), Error);
  try {
    linear(x.data(), 2, 7, w, y.data(), 4, pool);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("x_stride 7 < in_features 8"), std::string::npos) << e.what();
  }
  // M = 0 touches nothing.
  std::vector<float> untouched(8, kSentinel);
  linear(nullptr, 0, 8, w, untouched.data(), 4, pool);
  for (float v : untouched) EXPECT_EQ(v, kSentinel);
  EXPECT_THROW(linear_ref(x.data(), 2, 9, make_weight(4, 8, DType::kF32, 1), nullptr, y.data()), Error);
}

// The library baselines the benchmark compares against compute the same layer.
template <typename Run>
void for_each_baseline_case(Run run) {
  for (DType dt : {DType::kF32, DType::kBF16}) {
    for (const Shape3& s : {Shape3{1, 257, 33}, Shape3{13, 64, 70}, Shape3{70, 300, 40}}) {
      const Tensor weight = make_weight(s.N, s.K, dt, 11);
      const Tensor bias = Tensor::from_f32(random_floats(s.N, 12), {s.N});
      const std::vector<float> x = random_floats(static_cast<size_t>(s.M * s.K), 13);
      run(dt, s, weight, bias, x, std::string(dtype_name(dt)) + " M=" + std::to_string(s.M));
    }
  }
}

TEST(MatmulBaselines, OpenblasMatchesReference) {
  for_each_baseline_case([](DType dt, const Shape3& s, const Tensor& weight, const Tensor& bias,
                            const std::vector<float>& x, const std::string& what) {
    std::vector<float> y(static_cast<size_t>(s.M * s.N));
    auto blas = baseline::OpenblasLinear::create(weight, &bias);
    ASSERT_TRUE(blas.ok()) << blas.status().to_string();
    (*blas)->run(x.data(), s.M, y.data());
    expect_close_to_ref(y, x, s.M, s.K, weight, &bias, false, "openblas " + what);
  });
}

TEST(MatmulBaselines, OnednnMatchesReference) {
  if (!baseline::OnednnLinear::available())
    GTEST_SKIP() << "loom was configured with LOOM_WITH_ONEDNN=OFF: there is no oneDNN baseline to check";
  for_each_baseline_case([](DType dt, const Shape3& s, const Tensor& weight, const Tensor& bias,
                            const std::vector<float>& x, const std::string& what) {
    std::vector<float> y(static_cast<size_t>(s.M * s.N));
    auto dnnl = baseline::OnednnLinear::create(weight, &bias);
    if (dt == DType::kBF16 && !cpu_features().avx512f) {
      // oneDNN has bf16 matmuls only from AVX-512 on; without it the refusal must be named.
      if (!dnnl.ok()) {
        EXPECT_EQ(dnnl.status().code(), ErrorCode::kUnsupported) << dnnl.status().to_string();
        return;
      }
    }
    ASSERT_TRUE(dnnl.ok()) << dnnl.status().to_string();
    (*dnnl)->run(x.data(), s.M, y.data());
    expect_close_to_ref(y, x, s.M, s.K, weight, &bias, dt == DType::kBF16, "onednn " + what);
  });
}

// The reference itself, against sums worked out by hand.
TEST(LinearRef, ComputesXTimesWTransposedPlusBias) {
  const Tensor w = Tensor::from_f32({1, 2, 3, -1, 0, 4}, {2, 3});  // rows: (1,2,3), (-1,0,4)
  const Tensor b = Tensor::from_f32({0.5f, -2}, {2});
  const std::vector<float> x = {1, 1, 1, 2, 0, -1};  // rows: (1,1,1), (2,0,-1)
  std::vector<float> y(4);
  linear_ref(x.data(), 2, 3, w, &b, y.data());
  EXPECT_EQ(y, (std::vector<float>{6.5f, 1.0f, -0.5f, -8.0f}));
}

// The AVX-512 transposition that packs bf16 panels against the scalar one: word
// counts below, at and past whole 16-word blocks, rows at an odd stride.
TEST(PackPanelWords, Avx512EqualsScalar) {
#if defined(LOOM_MATMUL_X86)
  if (!isa_supported(Isa::kAvx512)) GTEST_SKIP() << "this CPU has no AVX-512";
  std::mt19937 rng(77);
  for (int64_t words : {1, 15, 16, 17, 32, 47, 1024 + 5}) {
    std::vector<uint32_t> src(static_cast<size_t>(words * detail::kNr));
    for (uint32_t& v : src) v = rng();
    std::vector<uint32_t> want(src.size(), 0), got(src.size(), 1);
    detail::transpose_panel_words_scalar(src.data(), words, want.data());
    detail::transpose_panel_words_avx512(src.data(), words, got.data());
    ASSERT_EQ(want, got) << words << " words";
    EXPECT_EQ(want[(words - 1) * detail::kNr + 2], src[2 * words + words - 1]);  // the reference transposes
  }
#else
  GTEST_SKIP() << "x86 only";
#endif
}

}  // namespace
}  // namespace loom::cpu
