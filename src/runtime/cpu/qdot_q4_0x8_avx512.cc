// Q4_0 × int8 activations for up to kQTileRows rows (decode and small batches),
// AVX-512 (BW, VNNI), over weights interleaved in groups of 8 rows
// (qlayout_q4_0x8.h): both runs of a pair in one zmm (qdot_x8_avx512.h), the
// levels 0..15 as vpdpbusd's unsigned operand against the activations broadcast,
// four vpdpbusd per block and row, less 8·Σx. The integers and the f32 steps are
// the row kernels' (qdot_kernels.h), so results are bitwise theirs.
#include "runtime/cpu/matmul_kernels.h"
#if defined(LOOM_MATMUL_X86)
#include <immintrin.h>

#include "runtime/cpu/qdot_kernels.h"
#include "runtime/cpu/qdot_x8_avx512.h"
#include "runtime/cpu/qlayout_q4_0x8.h"

namespace loom::cpu::detail {
namespace {

// How far ahead the group stream is prefetched: at batch 1 on 2 threads of a Zen 5
// (2048->8192 and 8192->2048, a plain read 58-62 GB/s), 2 KB 40-43 GB/s for Q4_0,
// 4 KB 48-55, 8 KB 55-62, 16 KB 67-68 (Q8_0 43-62 rising the same way).
constexpr size_t kPrefetchBytes = 16384;

template <int kRows>
LOOM_TARGET_X8_AVX512 void q4_0x8_rows(const QdotArgs& a) {
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const size_t group_bytes = static_cast<size_t>(a.blocks) * kQ4_0x8BlockBytes;
  const ActBlockQ8x32* x[kRows];
  const int32_t* offsets[kRows];
  for (int r = 0; r < kRows; ++r) {
    x[r] = qdot_act_row<ActBlockQ8x32>(a, r);
    offsets[r] = a.act_offset_sums + static_cast<size_t>(r) * static_cast<size_t>(a.blocks);
  }
  const char* ahead = reinterpret_cast<const char*>(a.w) + kPrefetchBytes;
  for (int64_t g = 0; g < a.outputs / kQ4_0GroupRows; ++g) {
    const uint8_t* w = a.w + group_bytes * static_cast<size_t>(g);
    __m256 acc[kRows];
    for (int r = 0; r < kRows; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < a.blocks; ++b) {
      const uint8_t* o = w + static_cast<size_t>(b) * kQ4_0x8BlockBytes;
      if (a.stream) prefetch_group_stream(ahead, o, kQ4_0x8BlockBytes, kPrefetchBytes);
      // Run pair 0: qs bytes 0-7 (elements 0-7 low, 16-23 high); pair 1: bytes 8-15.
      const __m512i v0 = load512(o + 16), v1 = load512(o + 80);
      const __m512i lo0 = _mm512_and_si512(v0, low4), hi0 = _mm512_and_si512(_mm512_srli_epi16(v0, 4), low4);
      const __m512i lo1 = _mm512_and_si512(v1, low4), hi1 = _mm512_and_si512(_mm512_srli_epi16(v1, 4), low4);
      const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o)));
      for (int r = 0; r < kRows; ++r) {
        const int8_t* xq = x[r][b].qs;
        __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo0, bcast8_512(xq));
        s = _mm512_dpbusd_epi32(s, lo1, bcast8_512(xq + 8));
        s = _mm512_dpbusd_epi32(s, hi0, bcast8_512(xq + 16));
        s = _mm512_dpbusd_epi32(s, hi1, bcast8_512(xq + 24));
        const __m256i isum = _mm256_sub_epi32(row_sums_x8(s), _mm256_set1_epi32(offsets[r][b]));
        acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(x[r][b].d)), _mm256_cvtepi32_ps(isum), acc[r]);
      }
    }
    write_group_outputs<kRows>(a, g, acc);
  }
}

}  // namespace

LOOM_TARGET_X8_AVX512 void qdot_q4_0x8_avx512(const QdotArgs& a) {
  LOOM_QDOT_X8_BY_ROWS(q4_0x8_rows, a)
}

}  // namespace loom::cpu::detail
#endif
