// Q8_0 × int8 activations for up to kQTileRows rows (decode and small batches),
// AVX-512 (BW, VNNI), over weights interleaved in groups of 8 rows
// (qlayout_q8_0x8.h): both runs of a pair in one zmm (qdot_x8_avx512.h), the
// levels made vpdpbusd's unsigned operand by adding 128 (one xor per run pair for
// every activation row), four vpdpbusd per block and row, less 128·Σx. Where the
// AVX2 kernel takes |w| against x·sign(w) and widens each product by one madd,
// this takes one instruction per run pair and row. The integers and the f32 steps
// are the row kernels' (qdot_kernels.h), so results are bitwise theirs.
#include "runtime/cpu/matmul_kernels.h"
#if defined(LOOM_MATMUL_X86)
#include <immintrin.h>

#include "runtime/cpu/qdot_kernels.h"
#include "runtime/cpu/qdot_x8_avx512.h"
#include "runtime/cpu/qlayout_q8_0x8.h"

namespace loom::cpu::detail {
namespace {

// How far ahead the group stream is prefetched: at batch 1 on 2 threads of a Zen 5
// (2048->8192 and 8192->2048, a plain read 58-62 GB/s), 2 KB 40-43 GB/s for Q4_0,
// 4 KB 48-55, 8 KB 55-62, 16 KB 67-68 (Q8_0 43-62 rising the same way).
constexpr size_t kPrefetchBytes = 16384;

template <int kRows>
LOOM_TARGET_X8_AVX512 void q8_0x8_rows(const QdotArgs& a) {
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  const size_t group_bytes = static_cast<size_t>(a.blocks) * kQ8_0x8BlockBytes;
  const ActBlockQ8x32* x[kRows];
  const int32_t* offsets[kRows];
  for (int r = 0; r < kRows; ++r) {
    x[r] = qdot_act_row<ActBlockQ8x32>(a, r);
    offsets[r] = a.act_offset_sums + static_cast<size_t>(r) * static_cast<size_t>(a.blocks);
  }
  const char* ahead = reinterpret_cast<const char*>(a.w) + kPrefetchBytes;
  for (int64_t g = 0; g < a.outputs / kQ8_0GroupRows; ++g) {
    const uint8_t* w = a.w + group_bytes * static_cast<size_t>(g);
    __m256 acc[kRows];
    for (int r = 0; r < kRows; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < a.blocks; ++b) {
      const uint8_t* o = w + static_cast<size_t>(b) * kQ8_0x8BlockBytes;
      if (a.stream) prefetch_group_stream(ahead, o, kQ8_0x8BlockBytes, kPrefetchBytes);
      __m512i u[4];  // run pair h: qs bytes 8h..8h+7 of every row, + 128 as u8
      for (int h = 0; h < 4; ++h) u[h] = _mm512_xor_si512(load512(o + 16 + 64 * h), bias);
      const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o)));
      for (int r = 0; r < kRows; ++r) {
        const int8_t* xq = x[r][b].qs;
        __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[0], bcast8_512(xq));
        for (int h = 1; h < 4; ++h) s = _mm512_dpbusd_epi32(s, u[h], bcast8_512(xq + 8 * h));
        const __m256i isum = _mm256_sub_epi32(row_sums_x8(s), _mm256_set1_epi32(offsets[r][b]));
        acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(x[r][b].d)), _mm256_cvtepi32_ps(isum), acc[r]);
      }
    }
    write_group_outputs<kRows>(a, g, acc);
  }
}

}  // namespace

LOOM_TARGET_X8_AVX512 void qdot_q8_0x8_avx512(const QdotArgs& a) {
  LOOM_QDOT_X8_BY_ROWS(q8_0x8_rows, a)
}

}  // namespace loom::cpu::detail
#endif
