// paged_attention over every KV cache type (graph/kv_format.h): f32, bf16, f16, q8_0, q4_0 for
// K and V each, rotated or not. Three kinds of check, as ggml's test-backend-ops does for its
// backends:
//  - optimized kernel vs the scalar reference reading the same stored K/V (dequantize, then f32
//    attention in double), on every SIMD target and every integer dot-product table the CPU
//    runs (scalar, AVX2, AVX-VNNI, AVX512-VNNI), by NMSE: a q8_0/q4_0 K scores with the query
//    quantized to int8, which the reference does not;
//  - each type against the f32 cache (the quantization error itself), per-type NMSE bounds;
//  - the Hadamard rotation is exact up to f32 rounding (a rotated f32 cache gives the unrotated
//    result), and a row's result is the same bits whatever tile, chunk or batch it runs in.
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "loom/core/cpu_features.h"
#include "loom/runtime/cpu/attention.h"
#include "runtime/cpu/qdot_kernels.h"
#include "runtime/cpu/qlinear.h"

namespace loom::cpu::kv_types_test {

using graph::KvFormat;

// One sequence's K/V as f32 values, stored into pages of a chosen format.
struct Kv {
  int64_t page_size, kv_heads, head_dim, tokens;
  std::vector<float> k, v;  // [tokens][kv_heads][head_dim]
  std::vector<std::vector<unsigned char>> k_pages, v_pages;
  std::vector<const void*> k_ptrs, v_ptrs;
  KvFormat format;

  Kv(int64_t n, int64_t ps, int64_t hkv, int64_t d, std::mt19937& rng, float outlier = 0.0f)
      : page_size(ps), kv_heads(hkv), head_dim(d), tokens(n) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    k.resize(static_cast<size_t>(n * hkv * d));
    v.resize(k.size());
    for (float& x : k) x = nd(rng);
    for (float& x : v) x = nd(rng);
    // A few outlier channels, as real K caches have (what rotation is for).
    if (outlier > 0)
      for (int64_t t = 0; t < n; ++t)
        for (int64_t h = 0; h < hkv; ++h) k[static_cast<size_t>((t * hkv + h) * d + 3 % d)] *= outlier;
  }

  // (Re)writes every page in `f`: bytes of slots past `tokens` are 0xFF (NaN scales / values),
  // so reading one poisons the result.
  void store(const KvFormat& f) {
    format = f;
    const int64_t pages = (tokens + page_size - 1) / page_size;
    k_pages.assign(static_cast<size_t>(pages), std::vector<unsigned char>(graph::kv_page_bytes(f.k, page_size, kv_heads, head_dim), 0xFF));
    v_pages.assign(static_cast<size_t>(pages), std::vector<unsigned char>(graph::kv_page_bytes(f.v, page_size, kv_heads, head_dim), 0xFF));
    std::vector<float> row(static_cast<size_t>(head_dim));
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t h = 0; h < kv_heads; ++h) {
        const size_t at = static_cast<size_t>((t * kv_heads + h) * head_dim);
        void* kp = k_pages[static_cast<size_t>(t / page_size)].data();
        void* vp = v_pages[static_cast<size_t>(t / page_size)].data();
        std::copy_n(k.data() + at, head_dim, row.data());
        if (f.rotate_k) kv_rotate(row.data(), head_dim);
        kv_store_row(kp, f.k, true, t % page_size, h, page_size, head_dim, row.data());
        std::copy_n(v.data() + at, head_dim, row.data());
        if (f.rotate_v) kv_rotate(row.data(), head_dim);
        kv_store_row(vp, f.v, false, t % page_size, h, page_size, head_dim, row.data());
      }
    k_ptrs.clear();
    v_ptrs.clear();
    for (size_t p = 0; p < k_pages.size(); ++p) {
      k_ptrs.push_back(k_pages[p].data());
      v_ptrs.push_back(v_pages[p].data());
    }
  }
  KvPages view() const {
    return {k_ptrs.data(), v_ptrs.data(), static_cast<int64_t>(k_ptrs.size()), page_size, tokens, format};
  }
};

struct Problem {
  AttentionParams p;
  std::vector<std::unique_ptr<Kv>> kvs;
  std::vector<std::vector<int32_t>> positions;
  std::vector<AttentionSequence> seqs;
  std::vector<float> q;
  int64_t stride = 0, rows = 0;

  void store(const KvFormat& f) {
    for (size_t s = 0; s < kvs.size(); ++s) {
      kvs[s]->store(f);
      seqs[s].kv = kvs[s]->view();
    }
  }
  std::vector<float> ref() const {
    std::vector<float> out(static_cast<size_t>(rows * stride));
    paged_attention_ref(q.data(), stride, seqs.data(), static_cast<int64_t>(seqs.size()), p, out.data(), stride);
    return out;
  }
  std::vector<float> run(ThreadPool& pool) const {
    std::vector<float> out(static_cast<size_t>(rows * stride));
    paged_attention(q.data(), stride, seqs.data(), static_cast<int64_t>(seqs.size()), p, out.data(), stride, pool);
    return out;
  }
};

std::vector<int32_t> range(int64_t first, int64_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<int32_t>(first + i);
  return v;
}

// seqs: {tokens in cache, positions of the queries}.
Problem make_problem(int64_t hq, int64_t hkv, int64_t d, int64_t ps,
                     const std::vector<std::pair<int64_t, std::vector<int32_t>>>& seqs, uint32_t seed,
                     int64_t window = 0, float outlier = 0.0f) {
  std::mt19937 rng(seed);
  Problem pr;
  pr.p = {hq, hkv, d, 1.0f / std::sqrt(static_cast<float>(d)), window, 0.0f};
  pr.stride = hq * d;
  for (const auto& [n, pos] : seqs) {
    pr.kvs.push_back(std::make_unique<Kv>(n, ps, hkv, d, rng, outlier));
    pr.positions.push_back(pos);
  }
  for (size_t s = 0; s < seqs.size(); ++s) {
    const int64_t len = static_cast<int64_t>(pr.positions[s].size());
    pr.seqs.push_back({pr.rows, len, pr.positions[s].data(), KvPages{}});
    pr.rows += len;
  }
  std::normal_distribution<float> nd(0.0f, 1.5f);
  pr.q.resize(static_cast<size_t>(pr.rows * pr.stride));
  for (float& x : pr.q) x = nd(rng);
  pr.store(KvFormat{});
  return pr;
}

// Normalised mean squared error of `got` against `want` (test-backend-ops' metric).
double nmse(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return std::numeric_limits<double>::infinity();
    err += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    norm += static_cast<double>(want[i]) * want[i];
  }
  return err / std::max(norm, 1e-30);
}

std::string name(const KvFormat& f) {
  return std::string(graph::kv_dtype_display_name(f.k)) + "/" + std::string(graph::kv_dtype_display_name(f.v)) +
         (f.rotate_k ? "+rotK" : "") + (f.rotate_v ? "+rotV" : "");
}

// Optimized vs reference on the same stored K/V. Element types match as tightly as f32 pages
// do (worst seen 1.3e-12); a block-type K adds the int8 rounding of the query (as ggml's q8_0 K
// × q8_0 Q does): worst seen 9.9e-5, about what the q8_0 K/V's own rounding costs
// (EveryTypeAgainstF32).
double kernel_bound(const KvFormat& f) { return graph::kv_dtype_is_block(f.k) ? 3e-4 : 1e-9; }

// The integer dot-product tables this CPU runs.
std::vector<const detail::QdotTable*> qdot_tables() {
  std::vector<const detail::QdotTable*> t = {&detail::qdot_scalar()};
#if defined(LOOM_MATMUL_X86)
  const CpuFeatures& c = cpu_features();
  if (c.avx2 && c.fma) t.push_back(&detail::qdot_avx2());
  if (c.avx_vnni) t.push_back(&detail::qdot_avxvnni());
  if (c.avx512_vnni && c.avx512bw) t.push_back(&detail::qdot_avx512vnni());
#endif
  return t;
}

// The largest kernel-vs-reference NMSE seen, per K type (printed for docs/quantization.md).
double g_worst[2] = {0, 0};  // [element K, block K]

void check_kernel(const Problem& pr, const std::string& what) {
  const std::vector<float> want = pr.ref();
  const KvFormat& f = pr.seqs[0].kv.format;
  ThreadPool one(1), two(2);
  for (const detail::QdotTable* table : qdot_tables()) {
    detail::force_quantized_kernels(table);
    for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
      hwy::SetSupportedTargetsForTest(target);
      for (ThreadPool* pool : {&two, &one}) {
        const std::vector<float> got = pr.run(*pool);
        const double e = nmse(got, want);
        double& worst = g_worst[graph::kv_dtype_is_block(f.k) ? 1 : 0];
        worst = std::max(worst, e);
        EXPECT_LE(e, kernel_bound(f)) << what << " " << name(f) << " qdot " << table->name << " "
                                      << hwy::TargetName(target) << " threads " << pool->num_threads();
      }
    }
    hwy::SetSupportedTargetsForTest(0);
  }
  detail::force_quantized_kernels(nullptr);
}

const KvFormat kFormats[] = {
    {DType::kF16, DType::kF16, false, false},   {DType::kBF16, DType::kBF16, false, false},
    {DType::kQ8_0, DType::kQ8_0, false, false}, {DType::kQ4_0, DType::kQ4_0, false, false},
    {DType::kQ4_0, DType::kQ4_0, true, true},   {DType::kQ8_0, DType::kF16, false, false},
    {DType::kF16, DType::kQ4_0, false, true},   {DType::kQ8_0, DType::kQ8_0, true, true},
    {DType::kF32, DType::kQ8_0, false, false},
};

// Prefill, chunked prefill, decode, batched decode of different lengths, a sliding window with
// pages dropped, head dims that are and are not multiples of 32 (padded blocks).
TEST(PagedAttentionKvTypes, OptimizedMatchesReferenceOnEveryPath) {
  struct Shape {
    int64_t hq, hkv, d, ps;
  };
  for (const Shape& s : {Shape{8, 2, 64, 16}, Shape{4, 1, 128, 7}, Shape{4, 2, 48, 16}, Shape{6, 3, 16, 32}}) {
    const std::string tag = "hq" + std::to_string(s.hq) + "_hkv" + std::to_string(s.hkv) + "_d" + std::to_string(s.d) +
                            "_ps" + std::to_string(s.ps);
    std::vector<std::pair<std::string, Problem>> problems;
    problems.emplace_back("prefill_" + tag, make_problem(s.hq, s.hkv, s.d, s.ps, {{150, range(0, 150)}}, 1));
    problems.emplace_back("chunk_" + tag, make_problem(s.hq, s.hkv, s.d, s.ps, {{200, range(163, 37)}}, 2));
    problems.emplace_back("decode_" + tag, make_problem(s.hq, s.hkv, s.d, s.ps, {{700, {699}}}, 3));
    problems.emplace_back("batch_" + tag, make_problem(s.hq, s.hkv, s.d, s.ps,
                                                       {{300, {299}}, {17, {16}}, {1, {0}}, {90, range(60, 30)}}, 4));
    for (auto& [what, pr] : problems)
      for (const KvFormat& f : kFormats) {
        pr.store(f);
        check_kernel(pr, what);
      }
  }
  std::cerr << "worst kernel-vs-reference NMSE: " << g_worst[0] << " (element-type K), " << g_worst[1]
            << " (q8_0/q4_0 K, int8 query)\n";
}

// Sliding windows reach back to null pages (dropped out of the window) on every type.
TEST(PagedAttentionKvTypes, SlidingWindowWithDroppedPages) {
  Problem pr = make_problem(8, 2, 64, 8, {{300, {299}}, {300, range(230, 70)}}, 5, /*window=*/40);
  for (const KvFormat& f : kFormats) {
    pr.store(f);
    // Pages wholly before every query's window are gone.
    std::vector<std::vector<const void*>> k(2), v(2);
    for (size_t s = 0; s < 2; ++s) {
      k[s] = pr.kvs[s]->k_ptrs;
      v[s] = pr.kvs[s]->v_ptrs;
      const int64_t min_pos = *std::min_element(pr.positions[s].begin(), pr.positions[s].end());
      for (int64_t pg = 0; (pg + 1) * 8 <= min_pos - 40 + 1; ++pg) k[s][static_cast<size_t>(pg)] = v[s][static_cast<size_t>(pg)] = nullptr;
      pr.seqs[s].kv.k_pages = k[s].data();
      pr.seqs[s].kv.v_pages = v[s].data();
    }
    check_kernel(pr, "window");
  }
}

// The quantization error itself: each type (through the optimized kernel) against the f32 cache,
// NMSE per type. Bounds are ~3× what the types give here (unit-normal K/V, a 1.5-sigma query;
// measured on this test, rotated or not alike): bf16 6.3e-6, f16 1.0e-7, q8_0 9.8e-5, q4_0 1.7e-2.
double type_bound(DType t) {
  switch (t) {
    case DType::kBF16: return 2e-5;
    case DType::kF16: return 1e-6;
    case DType::kQ8_0: return 3e-4;
    case DType::kQ4_0: return 5e-2;
    default: return 1e-10;
  }
}

TEST(PagedAttentionKvTypes, EveryTypeAgainstF32) {
  Problem pr = make_problem(8, 2, 64, 16, {{400, {399}}, {200, range(0, 200)}}, 6);
  const std::vector<float> f32 = pr.ref();
  ThreadPool pool(2);
  for (DType t : {DType::kBF16, DType::kF16, DType::kQ8_0, DType::kQ4_0})
    for (bool rot : {false, true}) {
      const KvFormat f{t, t, rot, rot};
      pr.store(f);
      const double e = nmse(pr.run(pool), f32);
      std::cerr << name(f) << " NMSE vs f32: " << e << "\n";
      EXPECT_LE(e, type_bound(t)) << name(f);
      // A quantized cache is a rounding of the f32 one, not a misreading: far from zero error
      // would mean the f32 result is not what it approximates (checked by the bound), and a
      // lossless result from a lossy type would mean the type was not applied.
      EXPECT_GT(e, 0.0) << name(f);
    }
}

// Rotation spreads an outlier channel over the head: with a channel 20× the others, a rotated
// q4_0 K/V is closer to f32 than an unrotated one.
TEST(PagedAttentionKvTypes, RotationHelpsQ4_0WithOutlierChannels) {
  Problem pr = make_problem(8, 2, 64, 16, {{300, range(0, 300)}}, 7, 0, /*outlier=*/20.0f);
  const std::vector<float> f32 = pr.ref();
  ThreadPool pool(2);
  pr.store({DType::kQ4_0, DType::kQ4_0, false, false});
  const double plain = nmse(pr.run(pool), f32);
  pr.store({DType::kQ4_0, DType::kQ4_0, true, true});
  const double rotated = nmse(pr.run(pool), f32);
  std::cerr << "q4_0 with outliers: NMSE " << plain << " plain, " << rotated << " rotated\n";
  EXPECT_LT(rotated, plain);
}

// H is orthogonal and its own inverse: a rotated f32 cache gives the unrotated result up to f32
// rounding, in both kernels, for head dims that are powers of two and ones that are not (96:
// blocks of 32).
TEST(PagedAttentionKvTypes, RotationIsExactUpToRounding) {
  for (int64_t d : {64, 128, 96, 16}) {
    Problem pr = make_problem(4, 2, d, 16, {{130, range(0, 130)}, {60, {59}}}, 8);
    const std::vector<float> plain = pr.ref();
    ThreadPool pool(2);
    const std::vector<float> plain_opt = pr.run(pool);
    pr.store({DType::kF32, DType::kF32, true, true});
    EXPECT_LE(nmse(pr.ref(), plain), 1e-12) << "d" << d;
    EXPECT_LE(nmse(pr.run(pool), plain_opt), 1e-12) << "d" << d;
    // And the pages really hold something else.
    float moved = 0;
    for (int64_t j = 0; j < d; ++j)
      moved = std::max(moved, std::fabs(kv_stored_value(pr.kvs[0]->k_ptrs[0], DType::kF32, true, 0, 0, j, 16, d) -
                                        pr.kvs[0]->k[static_cast<size_t>(j)]));
    EXPECT_GT(moved, 1e-3f) << "d" << d;
  }
  // H·H = I on its own.
  std::vector<float> x(128), y;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  for (float& v : x) v = nd(rng);
  y = x;
  kv_rotate(y.data(), 128);
  kv_rotate(y.data(), 128);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], x[i], 1e-5f);
}

// The batching contract within a type: a query row gives the same bits alone, in a whole
// prefill, or in a chunk cut anywhere (the query's int8 blocks and the K blocks' dot products
// do not depend on the rows beside them).
TEST(PagedAttentionKvTypes, RowResultDoesNotDependOnItsTileOrChunk) {
  const int64_t n = 120;
  Problem whole = make_problem(8, 2, 64, 16, {{n, range(0, n)}}, 9);
  for (const KvFormat& f : kFormats) {
    whole.store(f);
    ThreadPool two(2), one(1);
    const std::vector<float> all = whole.run(two);
    for (int64_t chunk : {int64_t{1}, int64_t{7}, int64_t{64}}) {
      std::vector<std::vector<int32_t>> pos;
      std::vector<AttentionSequence> seqs;
      for (int64_t t0 = 0; t0 < n; t0 += chunk) pos.push_back(range(t0, std::min(chunk, n - t0)));
      for (auto& p : pos) seqs.push_back({p.front(), static_cast<int64_t>(p.size()), p.data(), whole.kvs[0]->view()});
      std::vector<float> got(all.size());
      paged_attention(whole.q.data(), whole.stride, seqs.data(), static_cast<int64_t>(seqs.size()), whole.p, got.data(),
                      whole.stride, chunk == 7 ? one : two);
      ASSERT_EQ(std::memcmp(got.data(), all.data(), all.size() * sizeof(float)), 0) << name(f) << " chunk " << chunk;
    }
  }
}

TEST(PagedAttentionKvTypes, StoredValuesRoundTrip) {
  // kv_store_row then kv_stored_value: exact for f32, a rounding for the rest, within the
  // type's step (q8_0: amax/127/2 per block; q4_0: amax/8).
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  for (int64_t d : {32, 64, 40}) {
    std::vector<float> x(static_cast<size_t>(d));
    for (float& v : x) v = nd(rng);
    const float amax = std::fabs(*std::max_element(x.begin(), x.end(), [](float a, float b) { return std::fabs(a) < std::fabs(b); }));
    for (DType t : {DType::kF32, DType::kBF16, DType::kF16, DType::kQ8_0, DType::kQ4_0})
      for (bool key : {true, false}) {
        std::vector<unsigned char> page(graph::kv_page_bytes(t, 4, 2, d));
        kv_store_row(page.data(), t, key, 2, 1, 4, d, x.data());
        const float tol = t == DType::kF32 ? 0.0f : t == DType::kQ8_0 ? amax / 127 * 0.51f : t == DType::kQ4_0 ? amax / 8 * 1.01f : amax * 1e-2f;
        for (int64_t j = 0; j < d; ++j)
          EXPECT_NEAR(kv_stored_value(page.data(), t, key, 2, 1, j, 4, d), x[static_cast<size_t>(j)], tol)
              << dtype_name(t) << " d" << d << " j" << j;
      }
  }
  EXPECT_EQ(graph::kv_row_bytes(DType::kQ8_0, 64), 68u);
  EXPECT_EQ(graph::kv_row_bytes(DType::kQ4_0, 128), 72u);
  EXPECT_EQ(graph::kv_row_bytes(DType::kQ8_0, 40), 68u);  // padded to two blocks
  EXPECT_EQ(graph::kv_row_bytes(DType::kF16, 64), 128u);
}

}  // namespace loom::cpu::kv_types_test
