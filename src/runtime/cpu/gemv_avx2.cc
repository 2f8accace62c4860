// AVX2 small-M (decode) tiles for bf16 and f16 weights, widened to f32 in
// registers as in gemv_avx512.cc.
#include "runtime/cpu/gemm_avx2_tile.h"

#if defined(LOOM_MATMUL_X86)

namespace loom::cpu::detail {
namespace avx2 {
namespace {


// bf16 pairs [k/2][kNr][2]: step k is the low half of each 32-bit lane when k is
// even, the high half when odd. Each step re-loads its pair vectors (L1 hits) so
// that only one step's weights are live next to the accumulators.
struct Bf16PairLoader {
  const uint16_t* b;
  template <int V>
  LOOM_TARGET_AVX2 LOOM_INLINE void load(int64_t k, int col, __m256* out) const {
    const uint16_t* p = b + (k / 2 * kNr + col) * 2;
    const __m256i hi = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      const __m256i pairs = _mm256_load_si256(reinterpret_cast<const __m256i*>(p + 16 * v));
      out[v] = _mm256_castsi256_ps((k & 1) ? _mm256_and_si256(pairs, hi) : _mm256_slli_epi32(pairs, 16));
    }
  }
  LOOM_TARGET_AVX2 LOOM_INLINE void prefetch(int64_t k, int bytes) const {
    // 128 bytes per pair of steps: one line per step.
    _mm_prefetch(reinterpret_cast<const char*>(b + k / 2 * kNr * 2) + bytes + (k & 1) * 64, _MM_HINT_T1);
  }
};

struct F16Loader {
  const uint16_t* b;
  template <int V>
  LOOM_TARGET_AVX2 LOOM_INLINE void load(int64_t k, int col, __m256* out) const {
    const uint16_t* p = b + k * kNr + col;
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) out[v] = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(p + 8 * v)));
  }
  LOOM_TARGET_AVX2 LOOM_INLINE void prefetch(int64_t k, int bytes) const {
    _mm_prefetch(reinterpret_cast<const char*>(b + k * kNr) + bytes, _MM_HINT_T1);
  }
};

struct Bf16Tile {
  const TileArgs& t;
  template <int MR>
  LOOM_TARGET_AVX2 LOOM_INLINE void run() const {
    tile_body<MR, 0, kStreamPrefetchBytes>(t, Bf16PairLoader{static_cast<const uint16_t*>(t.b)});
  }
};

struct F16Tile {
  const TileArgs& t;
  template <int MR>
  LOOM_TARGET_AVX2 LOOM_INLINE void run() const {
    tile_body<MR, 0, kStreamPrefetchBytes>(t, F16Loader{static_cast<const uint16_t*>(t.b)});
  }
};

}  // namespace
}  // namespace avx2

LOOM_TARGET_AVX2 void bf16_tile_avx2(const TileArgs& t) { avx2::dispatch_mr(t.mr, avx2::Bf16Tile{t}); }
LOOM_TARGET_AVX2 void f16_tile_avx2(const TileArgs& t) { avx2::dispatch_mr(t.mr, avx2::F16Tile{t}); }

}  // namespace loom::cpu::detail

#endif  // LOOM_MATMUL_X86
