// AVX2 f32 tile (up to 6 rows, see gemm_avx2_tile.h) and the widening of bf16/f16
// weight blocks for the large-M path.
#include "runtime/cpu/gemm_avx2_tile.h"

#if defined(LOOM_MATMUL_X86)

namespace loom::cpu::detail {
namespace avx2 {
namespace {

struct F32Loader {
  const float* b;
  template <int V>
  LOOM_TARGET_AVX2 LOOM_INLINE void load(int64_t k, int col, __m256* out) const {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) out[v] = _mm256_load_ps(b + k * kNr + col + 8 * v);
  }
  LOOM_TARGET_AVX2 LOOM_INLINE void prefetch(int64_t k, int bytes) const {
    _mm_prefetch(reinterpret_cast<const char*>(b + k * kNr) + bytes, _MM_HINT_T1);
    _mm_prefetch(reinterpret_cast<const char*>(b + k * kNr) + bytes + 64, _MM_HINT_T1);
  }
};

struct F32Tile {
  const TileArgs& t;
  template <int MR>
  LOOM_TARGET_AVX2 LOOM_INLINE void run() const {
    const F32Loader w{static_cast<const float*>(t.b)};
    if (t.blocked) {
      tile_body<MR, kXs, 0>(t, w);
    } else {
      tile_body<MR, 0, kStreamPrefetchBytes>(t, w);
    }
  }
};

}  // namespace
}  // namespace avx2

LOOM_TARGET_AVX2 void f32_tile_avx2(const TileArgs& t) { avx2::dispatch_mr(t.mr, avx2::F32Tile{t}); }

LOOM_TARGET_AVX2 void widen_bf16_avx2(const void* src, int64_t k, float* dst) {
  const uint16_t* s = static_cast<const uint16_t*>(src);
  const __m256i hi = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  for (int64_t i = 0; i < k; i += 2) {
#pragma GCC unroll 4
    for (int v = 0; v < kNr / 8; ++v) {
      const __m256i pairs = _mm256_load_si256(reinterpret_cast<const __m256i*>(s + (i / 2 * kNr + 8 * v) * 2));
      _mm256_store_ps(dst + i * kNr + 8 * v, _mm256_castsi256_ps(_mm256_slli_epi32(pairs, 16)));
      if (i + 1 < k) {
        _mm256_store_ps(dst + (i + 1) * kNr + 8 * v, _mm256_castsi256_ps(_mm256_and_si256(pairs, hi)));
      }
    }
  }
}

LOOM_TARGET_AVX2 void widen_f16_avx2(const void* src, int64_t k, float* dst) {
  const uint16_t* s = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < k; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < kNr / 8; ++v) {
      const __m128i h = _mm_load_si128(reinterpret_cast<const __m128i*>(s + i * kNr + 8 * v));
      _mm256_store_ps(dst + i * kNr + 8 * v, _mm256_cvtph_ps(h));
    }
  }
}

const KernelTable& kernels_avx2() {
  static const KernelTable table{"AVX2",          avx2::kMaxMr,   f32_tile_avx2,   bf16_tile_avx2,
                                 f16_tile_avx2,   widen_bf16_avx2, widen_f16_avx2, nullptr};
  return table;
}

}  // namespace loom::cpu::detail

#endif  // LOOM_MATMUL_X86
