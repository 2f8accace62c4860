// AVX-512 small-M (decode) tiles for bf16 and f16 weights: the panel streams
// once from memory and is widened to f32 in registers — one shift or AND per
// bf16 pair vector, one vcvtph2ps per f16 vector — which is free next to the
// memory traffic, and keeps x in f32.
#include "runtime/cpu/gemm_avx512_tile.h"

#if defined(LOOM_MATMUL_X86)

namespace loom::cpu::detail {
namespace avx512 {
namespace {


// bf16 pairs [k/2][kNr][2]: the low half of each 32-bit lane is step k, the high
// half step k+1, so (lane << 16) and (lane & 0xffff0000) are the exact f32 values.
struct Bf16PairLoader {
  static constexpr int kSteps = 2;
  const uint16_t* b;
  LOOM_INLINE Bf16PairLoader panel(int j, int64_t stride_bytes) const { return {b + j * (stride_bytes / 2)}; }
  LOOM_TARGET_AVX512 LOOM_INLINE void load(int64_t k, __m512 (*out)[kNv]) const {
    const __m512i hi = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
#pragma GCC unroll 8
    for (int v = 0; v < kNv; ++v) {
      const __m512i pairs = _mm512_load_si512(b + (k / 2 * kNr + 16 * v) * 2);
      out[0][v] = _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, pairs, 16));
      out[1][v] = _mm512_castsi512_ps(_mm512_and_si512(pairs, hi));
    }
  }
  LOOM_TARGET_AVX512 LOOM_INLINE void load_one(int64_t k, __m512* out) const {
#pragma GCC unroll 8
    for (int v = 0; v < kNv; ++v) {
      const __m512i pairs = _mm512_load_si512(b + (k / 2 * kNr + 16 * v) * 2);
      out[v] = _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, pairs, 16));
    }
  }
  LOOM_TARGET_AVX512 LOOM_INLINE void prefetch(int64_t k, int bytes) const {
    const char* p = reinterpret_cast<const char*>(b + k / 2 * kNr * 2) + bytes;
#pragma GCC unroll 8
    for (int line = 0; line < kNr * 4 / 64; ++line) _mm_prefetch(p + 64 * line, _MM_HINT_T1);
  }
};

struct F16Loader {
  static constexpr int kSteps = 1;
  const uint16_t* b;
  LOOM_INLINE F16Loader panel(int j, int64_t stride_bytes) const { return {b + j * (stride_bytes / 2)}; }
  LOOM_TARGET_AVX512 LOOM_INLINE void load(int64_t k, __m512 (*out)[kNv]) const {
#pragma GCC unroll 8
    for (int v = 0; v < kNv; ++v) {
      out[0][v] = _mm512_maskz_cvtph_ps(0xffff, _mm256_load_si256(reinterpret_cast<const __m256i*>(b + k * kNr + 16 * v)));
    }
  }
  LOOM_TARGET_AVX512 LOOM_INLINE void prefetch(int64_t k, int bytes) const {
    _mm_prefetch(reinterpret_cast<const char*>(b + k * kNr) + bytes, _MM_HINT_T1);
  }
};

struct Bf16Tile {
  const TileArgs& t;
  template <int MR, int NP>
  LOOM_TARGET_AVX512 LOOM_INLINE void run() const {
    const Bf16PairLoader w{static_cast<const uint16_t*>(t.b)};
    if (t.weights_in_l2) {
      tile_body<MR, NP, 0, 0>(t, w);
    } else {
      tile_body<MR, NP, 0, kStreamPrefetchBytes>(t, w);
    }
  }
};

struct F16Tile {
  const TileArgs& t;
  template <int MR, int NP>
  LOOM_TARGET_AVX512 LOOM_INLINE void run() const {
    const F16Loader w{static_cast<const uint16_t*>(t.b)};
    if (t.weights_in_l2) {
      tile_body<MR, NP, 0, 0>(t, w);
    } else {
      tile_body<MR, NP, 0, kStreamPrefetchBytes>(t, w);
    }
  }
};

}  // namespace
}  // namespace avx512

LOOM_TARGET_AVX512 void bf16_tile_avx512(const TileArgs& t) { avx512::dispatch_stream(t, avx512::Bf16Tile{t}); }
LOOM_TARGET_AVX512 void f16_tile_avx512(const TileArgs& t) { avx512::dispatch_stream(t, avx512::F16Tile{t}); }

}  // namespace loom::cpu::detail

#endif  // LOOM_MATMUL_X86
