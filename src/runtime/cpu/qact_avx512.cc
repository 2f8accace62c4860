// AVX-512 activation quantizers for the quantized linear: core/quantize.cc's
// quantize_activations_q8x32 / _q8k bit for bit (the same amax, the same f32
// scale and reciprocal, round-to-nearest-even as nearbyintf in the default
// rounding mode, the same clamp), 16 values per instruction instead of one.
#include "runtime/cpu/qdot_kernels.h"

#if defined(LOOM_MATMUL_X86)
#include <immintrin.h>

// GCC 12's AVX-512 intrinsics pass _mm512_undefined_*() as the unused merge
// source and then warn that it is uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#define LOOM_QACT_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl")))

namespace loom::cpu::detail {
namespace {

// max(|v|, amax) keeps amax when v is NaN, as std::fmax(amax, |v|) does.
LOOM_QACT_TARGET LOOM_INLINE __m512 abs_max(__m512 amax, __m512 v) { return _mm512_max_ps(_mm512_abs_ps(v), amax); }

// q = clamp(round(v·id), −127, 127) as int32 lanes.
LOOM_QACT_TARGET LOOM_INLINE __m512i levels(__m512 v, __m512 id) {
  const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(v, id));
  return _mm512_min_epi32(_mm512_max_epi32(q, _mm512_set1_epi32(-127)), _mm512_set1_epi32(127));
}

// Scale d and reciprocal id from the block's amax (as quantize_symmetric_127).
LOOM_QACT_TARGET LOOM_INLINE float scales(__m512 amaxv, __m512* id) {
  // max is exact and order-free on non-NaN values: the reduction order does not matter
  const float amax = _mm512_reduce_max_ps(amaxv);
  const float d = amax / 127.0f;
  *id = _mm512_set1_ps(d != 0.0f ? 127.0f / amax : 0.0f);
  return d;
}

}  // namespace

LOOM_QACT_TARGET void quantize_activations_q8x32_avx512(const float* x, ActBlockQ8x32* dst, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b) {
    const __m512 v0 = _mm512_loadu_ps(x + 32 * b), v1 = _mm512_loadu_ps(x + 32 * b + 16);
    __m512 id;
    dst[b].d = scales(abs_max(abs_max(_mm512_setzero_ps(), v0), v1), &id);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst[b].qs), _mm512_cvtepi32_epi8(levels(v0, id)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst[b].qs + 16), _mm512_cvtepi32_epi8(levels(v1, id)));
  }
}

LOOM_QACT_TARGET void quantize_activations_q8k_avx512(const float* x, ActBlockQ8K* dst, int64_t n) {
  for (int64_t b = 0; b < n / 256; ++b) {
    const float* v = x + 256 * b;
    __m512 amax = _mm512_setzero_ps();
    for (int s = 0; s < 16; ++s) amax = abs_max(amax, _mm512_loadu_ps(v + 16 * s));
    __m512 id;
    ActBlockQ8K& y = dst[b];
    y.d = scales(amax, &id);
    for (int s = 0; s < 16; ++s) {
      const __m512i q = levels(_mm512_loadu_ps(v + 16 * s), id);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(y.qs + 16 * s), _mm512_cvtepi32_epi8(q));
      y.bsums[s] = static_cast<int16_t>(_mm512_reduce_add_epi32(q));
    }
  }
}

}  // namespace loom::cpu::detail
#endif
