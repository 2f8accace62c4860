// AVX-512 f32 tile (12 rows × 32 columns = 24 zmm accumulators) and the
// widening of bf16/f16 weight blocks to f32 for the large-M path.
#include "runtime/cpu/gemm_avx512_tile.h"

#if defined(LOOM_MATMUL_X86)

namespace loom::cpu::detail {
namespace avx512 {
namespace {

struct F32Loader {
  static constexpr int kSteps = 1;
  const float* b;
  LOOM_INLINE F32Loader panel(int j, int64_t stride_bytes) const { return {b + j * (stride_bytes / 4)}; }
  LOOM_TARGET_AVX512 LOOM_INLINE void load(int64_t k, __m512 (*out)[kNv]) const {
#pragma GCC unroll 8
    for (int v = 0; v < kNv; ++v) out[0][v] = _mm512_load_ps(b + k * kNr + 16 * v);
  }
  LOOM_TARGET_AVX512 LOOM_INLINE void prefetch(int64_t k, int bytes) const {
    _mm_prefetch(reinterpret_cast<const char*>(b + k * kNr) + bytes, _MM_HINT_T1);
    if constexpr (kNr * 4 > 64) _mm_prefetch(reinterpret_cast<const char*>(b + k * kNr) + bytes + 64, _MM_HINT_T1);
  }
};

// Blocked: x packed by the driver with row stride kKc (compile-time addressing)
// and the block in L1, so no stream prefetch. Otherwise x rows at any stride and
// weights streamed from memory.
struct F32Tile {
  const TileArgs& t;
  template <int MR, int NP = 1>
  LOOM_TARGET_AVX512 LOOM_INLINE void run() const {
    const F32Loader w{static_cast<const float*>(t.b)};
    if constexpr (NP == 1) {
      if (t.blocked) {
        tile_body<MR, 1, kXs, 0>(t, w);
        return;
      }
    }
    if (t.weights_in_l2) {
      tile_body<MR, NP, 0, 0>(t, w);
    } else {
      tile_body<MR, NP, 0, kStreamPrefetchBytes>(t, w);
    }
  }
};

}  // namespace
}  // namespace avx512

LOOM_TARGET_AVX512 void f32_tile_avx512(const TileArgs& t) {
  if (t.blocked) {
    avx512::dispatch_mr(t.mr, avx512::F32Tile{t});
  } else {
    avx512::dispatch_stream(t, avx512::F32Tile{t});
  }
}

int stream_panels_avx512(int mr) { return avx512::stream_panels_for(mr); }

LOOM_TARGET_AVX512 void widen_bf16_avx512(const void* src, int64_t k, float* dst) {
  const uint16_t* s = static_cast<const uint16_t*>(src);
  const __m512i hi = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  for (int64_t i = 0; i < k; i += 2) {
#pragma GCC unroll 8
    for (int v = 0; v < avx512::kNv; ++v) {
      const __m512i pairs = _mm512_load_si512(s + (i / 2 * kNr + 16 * v) * 2);
      _mm512_store_ps(dst + i * kNr + 16 * v, _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, pairs, 16)));
      if (i + 1 < k) _mm512_store_ps(dst + (i + 1) * kNr + 16 * v, _mm512_castsi512_ps(_mm512_and_si512(pairs, hi)));
    }
  }
}

LOOM_TARGET_AVX512 void widen_f16_avx512(const void* src, int64_t k, float* dst) {
  const uint16_t* s = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < k; ++i) {
#pragma GCC unroll 8
    for (int v = 0; v < avx512::kNv; ++v) {
      const __m256i h = _mm256_load_si256(reinterpret_cast<const __m256i*>(s + i * kNr + 16 * v));
      _mm512_store_ps(dst + i * kNr + 16 * v, _mm512_maskz_cvtph_ps(0xffff, h));
    }
  }
}

const KernelTable& kernels_avx512() {
  static const KernelTable table{"AVX512",         kMaxMr,           f32_tile_avx512,   bf16_tile_avx512,
                                 f16_tile_avx512,  widen_bf16_avx512, widen_f16_avx512, nullptr,
                                 stream_panels_avx512};
  return table;
}

const KernelTable& kernels_avx512_bf16() {
  static const KernelTable table{"AVX512_BF16",   kMaxMr,           f32_tile_avx512,   bf16_tile_avx512,
                                 f16_tile_avx512, widen_bf16_avx512, widen_f16_avx512, bf16_dot_tile_avx512bf16,
                                 stream_panels_avx512};
  return table;
}

}  // namespace loom::cpu::detail

#endif  // LOOM_MATMUL_X86
