// Q4_0 × int8 activations for up to kQTileRows rows (decode and small batches),
// AVX2 (maddubs), over weights interleaved in groups of 8 rows
// (qlayout_q4_0x8.h): per group block, four 32-byte runs of four rows × 8 bytes
// each; the low and high nibbles of a run meet the block's
// activations 0-7 | 16-23 (first half of each row's bytes) or 8-15 | 24-31
// (second half) broadcast to every row, so four maddubs per run pair add up in
// int16 (each ≤ 2·15·127, four ≤ 15240) before one madd; one hadd of the two
// runs gives rows 0..7 in order. The integers and the f32 steps are the row
// kernels' (qdot_kernels.h), so results are bitwise theirs.
#include "runtime/cpu/matmul_kernels.h"
#if defined(LOOM_MATMUL_X86)
#include <immintrin.h>

#include "runtime/cpu/qdot_kernels.h"
#include "runtime/cpu/qdot_x8_avx2.h"
#include "runtime/cpu/qlayout_q4_0x8.h"

namespace loom::cpu::detail {
namespace {

// How far ahead the group stream is prefetched. 2048→8192 and 8192→2048 at batch
// 1 on 2 threads of a Zen 3 (weights far past L3): 1 KB 35 GB/s, 2 KB 37-39,
// 4 KB 36-38; without prefetch 26 (the row kernels: 30-31).
constexpr size_t kPrefetchBytes = 2048;

// Run i (0..3) of the group block at o.
LOOM_TARGET_AVX2 LOOM_INLINE __m256i run_of(const uint8_t* o, int i) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(o + 16 + 32 * i));
}

// kRows activation rows (1..kQTileRows) against each group block as it passes:
// the levels are unpacked once per block, the products and the reduction are per row.
template <int kRows>
LOOM_TARGET_AVX2 void q4_0x8_rows(const QdotArgs& a) {
  const __m256i ones = _mm256_set1_epi16(1), low4 = _mm256_set1_epi8(0x0F);
  const size_t group_bytes = static_cast<size_t>(a.blocks) * kQ4_0x8BlockBytes;
  const ActBlockQ8x32* x[kRows];
  const int32_t* sum8[kRows];
  for (int r = 0; r < kRows; ++r) {
    x[r] = qdot_act_row<ActBlockQ8x32>(a, r);
    sum8[r] = a.act_offset_sums + static_cast<size_t>(r) * static_cast<size_t>(a.blocks);
  }
  const char* ahead = reinterpret_cast<const char*>(a.w) + kPrefetchBytes;
  for (int64_t g = 0; g < a.outputs / kQ4_0GroupRows; ++g) {
    const uint8_t* w = a.w + group_bytes * static_cast<size_t>(g);
    __m256 acc[kRows];
    for (int r = 0; r < kRows; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < a.blocks; ++b) {
      const uint8_t* o = w + static_cast<size_t>(b) * kQ4_0x8BlockBytes;
      if (a.stream) prefetch_group_stream(ahead, o, kQ4_0x8BlockBytes, kPrefetchBytes);
      // Low and high levels of the four runs. Rows 0, 1, 4, 5 are in runs 0 and 2;
      // rows 2, 3, 6, 7 in runs 1 and 3.
      __m256i lo[4], hi[4];
      for (int i = 0; i < 4; ++i) {
        const __m256i v = run_of(o, i);
        lo[i] = _mm256_and_si256(v, low4);
        hi[i] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
      }
      const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o)));
      for (int r = 0; r < kRows; ++r) {
        const int8_t* xq = x[r][b].qs;
        const __m256i x0 = bcast8(xq), x1 = bcast8(xq + 8), x2 = bcast8(xq + 16), x3 = bcast8(xq + 24);
        const __m256i s0 = _mm256_add_epi16(
            _mm256_add_epi16(_mm256_maddubs_epi16(lo[0], x0), _mm256_maddubs_epi16(hi[0], x2)),
            _mm256_add_epi16(_mm256_maddubs_epi16(lo[2], x1), _mm256_maddubs_epi16(hi[2], x3)));
        const __m256i s1 = _mm256_add_epi16(
            _mm256_add_epi16(_mm256_maddubs_epi16(lo[1], x0), _mm256_maddubs_epi16(hi[1], x2)),
            _mm256_add_epi16(_mm256_maddubs_epi16(lo[3], x1), _mm256_maddubs_epi16(hi[3], x3)));
        const __m256i isum = _mm256_sub_epi32(_mm256_hadd_epi32(_mm256_madd_epi16(s0, ones), _mm256_madd_epi16(s1, ones)),
                                              _mm256_set1_epi32(sum8[r][b]));
        acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(x[r][b].d)), _mm256_cvtepi32_ps(isum), acc[r]);
      }
    }
    write_group_outputs<kRows>(a, g, acc);
  }
}

}  // namespace

LOOM_TARGET_AVX2 void qdot_q4_0x8_avx2(const QdotArgs& a) {
  LOOM_QDOT_X8_BY_ROWS(q4_0x8_rows, a)
}

}  // namespace loom::cpu::detail
#endif
