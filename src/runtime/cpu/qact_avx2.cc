// AVX2 activation quantizers for the quantized linear: core/quantize.cc's
// quantize_activations_q8x32 / _q8k bit for bit, as qact_avx512.cc with 8 lanes
// (the scalar ones called fmaxf per element: 7-10% of a Q8_0 prefill on a Zen 3).
#include "runtime/cpu/qdot_kernels.h"

#if defined(LOOM_MATMUL_X86)
#include <immintrin.h>

namespace loom::cpu::detail {
namespace {

// max(|v|, amax) keeps amax when v is NaN, as std::fmax(amax, |v|) does.
LOOM_TARGET_AVX2 LOOM_INLINE __m256 abs_max(__m256 amax, __m256 v) {
  return _mm256_max_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), v), amax);
}

// q = clamp(round(v·id), −127, 127) as int32 lanes (nearest even, as nearbyintf).
LOOM_TARGET_AVX2 LOOM_INLINE __m256i levels(__m256 v, __m256 id) {
  const __m256i q = _mm256_cvtps_epi32(_mm256_mul_ps(v, id));
  return _mm256_min_epi32(_mm256_max_epi32(q, _mm256_set1_epi32(-127)), _mm256_set1_epi32(127));
}

// Scale d and reciprocal id from the block's amax (as quantize_symmetric_127).
LOOM_TARGET_AVX2 LOOM_INLINE float scales(__m256 amaxv, __m256* id) {
  // max is exact and order-free on non-NaN values: the reduction order does not matter
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(amaxv), _mm256_extractf128_ps(amaxv, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  const float amax = _mm_cvtss_f32(m);
  const float d = amax / 127.0f;
  *id = _mm256_set1_ps(d != 0.0f ? 127.0f / amax : 0.0f);
  return d;
}

// 32 int32 levels (already within ±127) → 32 int8 in order.
LOOM_TARGET_AVX2 LOOM_INLINE void store32(int8_t* out, __m256i q0, __m256i q1, __m256i q2, __m256i q3) {
  const __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(q0, q1), _mm256_packs_epi32(q2, q3));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out),
                      _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

LOOM_TARGET_AVX2 LOOM_INLINE int32_t hsum(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

}  // namespace

LOOM_TARGET_AVX2 void quantize_activations_q8x32_avx2(const float* x, ActBlockQ8x32* dst, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* v = x + 32 * b;
    const __m256 v0 = _mm256_loadu_ps(v), v1 = _mm256_loadu_ps(v + 8), v2 = _mm256_loadu_ps(v + 16),
                 v3 = _mm256_loadu_ps(v + 24);
    __m256 id;
    dst[b].d = scales(abs_max(abs_max(abs_max(abs_max(_mm256_setzero_ps(), v0), v1), v2), v3), &id);
    store32(dst[b].qs, levels(v0, id), levels(v1, id), levels(v2, id), levels(v3, id));
  }
}

LOOM_TARGET_AVX2 void quantize_activations_q8k_avx2(const float* x, ActBlockQ8K* dst, int64_t n) {
  for (int64_t b = 0; b < n / 256; ++b) {
    const float* v = x + 256 * b;
    __m256 amax = _mm256_setzero_ps();
    for (int s = 0; s < 32; ++s) amax = abs_max(amax, _mm256_loadu_ps(v + 8 * s));
    __m256 id;
    ActBlockQ8K& y = dst[b];
    y.d = scales(amax, &id);
    for (int c = 0; c < 8; ++c) {  // 32 values: sub-blocks 2c and 2c + 1
      const __m256i q0 = levels(_mm256_loadu_ps(v + 32 * c), id), q1 = levels(_mm256_loadu_ps(v + 32 * c + 8), id);
      const __m256i q2 = levels(_mm256_loadu_ps(v + 32 * c + 16), id), q3 = levels(_mm256_loadu_ps(v + 32 * c + 24), id);
      store32(y.qs + 32 * c, q0, q1, q2, q3);
      y.bsums[2 * c] = static_cast<int16_t>(hsum(_mm256_add_epi32(q0, q1)));
      y.bsums[2 * c + 1] = static_cast<int16_t>(hsum(_mm256_add_epi32(q2, q3)));
    }
  }
}

}  // namespace loom::cpu::detail
#endif
