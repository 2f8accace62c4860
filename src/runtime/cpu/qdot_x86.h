// x86 primitives of the quantized dot-product kernels, compiled once per code
// path: define LOOM_QDOT_VNNI to 1 (AVX512-VNNI vpdpbusd on 256-bit vectors), 2
// (AVX-VNNI, the same vpdpbusd VEX-encoded, for CPUs without AVX-512) or 0 (AVX2
// maddubs + madd) before including. Both give exact int32 sums of u8 × s8
// products: maddubs' pairwise int16 sums cannot saturate because every weight
// operand is ≤ 128 and every activation |q| ≤ 127 (2·128·127 < 32768).
#pragma once

#include <cstring>

#include <immintrin.h>

#include "runtime/cpu/qdot_kernels.h"

#if LOOM_QDOT_VNNI == 1
#define LOOM_QDOT_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")))
#elif LOOM_QDOT_VNNI == 2
#define LOOM_QDOT_TARGET __attribute__((target("avx2,fma,f16c,avxvnni")))
#else
#define LOOM_QDOT_TARGET LOOM_TARGET_AVX2
#endif

namespace loom::cpu::detail {
namespace {

// int32 lane i = Σ u[4i..4i+3]·s[4i..4i+3] (lanes 0-3: bytes 0-15, 4-7: 16-31).
LOOM_QDOT_TARGET LOOM_INLINE __m256i dot_u8s8(__m256i u, __m256i s) {
#if LOOM_QDOT_VNNI == 1
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#elif LOOM_QDOT_VNNI == 2
  return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

// acc + dot_u8s8(u, s), in one instruction on VNNI.
LOOM_QDOT_TARGET LOOM_INLINE __m256i dot_u8s8_acc(__m256i acc, __m256i u, __m256i s) {
#if LOOM_QDOT_VNNI == 1
  return _mm256_dpbusd_epi32(acc, u, s);
#elif LOOM_QDOT_VNNI == 2
  return _mm256_dpbusd_avx_epi32(acc, u, s);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

LOOM_QDOT_TARGET LOOM_INLINE int32_t hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

// The four horizontal sums of a, b, c, d in lanes 0..3 (one reduction for four
// dot products: per 32-element block it costs as much as the products).
static_assert(kQTileRows == 4, "the Q8_0/Q4_0 bodies reduce one row tile per hsum4_i32");

LOOM_QDOT_TARGET LOOM_INLINE __m128i hsum4_i32(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i abcd = _mm256_hadd_epi32(_mm256_hadd_epi32(a, b), _mm256_hadd_epi32(c, d));
  return _mm_add_epi32(_mm256_castsi256_si128(abcd), _mm256_extracti128_si256(abcd, 1));
}

// acc[i] = fma(d[i], isum[i], acc[i]) for four lanes: qdot_step lane by lane.
LOOM_QDOT_TARGET LOOM_INLINE __m128 qdot_step4(__m128 acc, __m128 d, __m128i isum) {
  return _mm_fmadd_ps(d, _mm_cvtepi32_ps(isum), acc);
}

LOOM_QDOT_TARGET LOOM_INLINE float f16_bits_to_f32(uint16_t h) { return _cvtsh_ss(h); }

LOOM_QDOT_TARGET LOOM_INLINE __m256i load256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

// A Q4_K or Q5_K block's 12 scale bytes as 8 six-bit scales (bytes 0-7) and 8 mins (8-15),
// unpack_scale_min_k4 for all j at once: j < 4 are the low 6 bits of bytes j and
// j + 4; j ≥ 4 take their low 4 bits from byte j + 4 and their top 2 from the top
// bits of bytes j − 4 and j.
LOOM_QDOT_TARGET LOOM_INLINE __m128i q4_K_scales_mins(const uint8_t* scales) {
  uint32_t u[3];
  std::memcpy(u, scales, 12);
  constexpr uint32_t low6 = 0x3F3F3F3F, low4 = 0x0F0F0F0F, top2 = 0x03030303;
  const uint32_t sc_lo = u[0] & low6, mn_lo = u[1] & low6;
  const uint32_t sc_hi = (u[2] & low4) | (((u[0] >> 6) & top2) << 4);
  const uint32_t mn_hi = ((u[2] >> 4) & low4) | (((u[1] >> 6) & top2) << 4);
  return _mm_setr_epi32(static_cast<int>(sc_lo), static_cast<int>(sc_hi), static_cast<int>(mn_lo),
                        static_cast<int>(mn_hi));
}

// Streaming: pull the weights kStreamPrefetchBytes ahead into L2.
LOOM_QDOT_TARGET LOOM_INLINE void prefetch_ahead(const QdotArgs& a, const void* block, size_t bytes) {
  if (!a.stream) return;
  const char* p = static_cast<const char*>(block) + kStreamPrefetchBytes;
  for (size_t off = 0; off < bytes; off += 64) _mm_prefetch(p + off, _MM_HINT_T1);
}

// The decode kernels read a group of consecutive weight rows side by side; the
// next group follows in memory. GroupPrefetch pulls it into L2 as this group is
// read, the same bytes per block, so it is one group ahead whatever the row
// length: a fixed distance per row lands in rows being read now once rows are
// long (2048→8192 Q4_0 on a Zen 3, AVX2: 0.60 → 0.50 ms; 8192→2048: 0.78 → 0.55).
// The VNNI builds keep the per-row distance they were measured with.
constexpr bool kGroupPrefetch = LOOM_QDOT_VNNI == 0;

struct GroupPrefetch {
  const char* p = nullptr;
  const char* end = nullptr;
  size_t per_block = 0;
  LOOM_QDOT_TARGET LOOM_INLINE GroupPrefetch(const QdotArgs& a, const void* first_row, int rows, size_t block_bytes) {
    if (!a.stream) return;
    p = end = static_cast<const char*>(first_row) + static_cast<size_t>(rows) * a.w_row_bytes;
    per_block = static_cast<size_t>(rows) * block_bytes;
  }
  LOOM_QDOT_TARGET LOOM_INLINE void step() {
    end += per_block;
    for (; p < end; p += 64) _mm_prefetch(p, _MM_HINT_T1);
  }
};

}  // namespace
}  // namespace loom::cpu::detail
