// Q8_0 × int8 activations for up to kQTileRows rows (decode and small batches),
// AVX2 (maddubs), over weights interleaved in groups of 8 rows
// (qlayout_q8_0x8.h): per group block, eight 32-byte runs of four rows × 8 bytes;
// run pair h meets the block's activations 8h..8h+7 broadcast to every row, by
// the sign trick (|w| against x·sign(w), |w| taken once per block for all the
// rows). Pair sums (≤ 2·128·127) leave no room to add in int16, so each product
// widens by one madd; the int32 sums add up and one hadd of the two runs' gives
// rows 0..7 in order. The integers and the f32 steps are the row kernels'
// (qdot_kernels.h), so results are bitwise theirs.
#include "runtime/cpu/matmul_kernels.h"
#if defined(LOOM_MATMUL_X86)
#include <immintrin.h>

#include "runtime/cpu/qdot_kernels.h"
#include "runtime/cpu/qdot_x8_avx2.h"
#include "runtime/cpu/qlayout_q8_0x8.h"

namespace loom::cpu::detail {
namespace {

// How far ahead the group stream is prefetched. 2048→8192 and 8192→2048 at batch
// 1 on 2 threads of a Zen 3, min of 3: 2 KB 0.52 ms, 4 KB 0.54-0.55.
constexpr size_t kPrefetchBytes = 2048;

template <int kRows>
LOOM_TARGET_AVX2 void q8_0x8_rows(const QdotArgs& a) {
  const __m256i ones = _mm256_set1_epi16(1);
  const size_t group_bytes = static_cast<size_t>(a.blocks) * kQ8_0x8BlockBytes;
  const ActBlockQ8x32* x[kRows];
  for (int r = 0; r < kRows; ++r) x[r] = qdot_act_row<ActBlockQ8x32>(a, r);
  const char* ahead = reinterpret_cast<const char*>(a.w) + kPrefetchBytes;
  for (int64_t g = 0; g < a.outputs / kQ8_0GroupRows; ++g) {
    const uint8_t* w = a.w + group_bytes * static_cast<size_t>(g);
    __m256 acc[kRows];
    for (int r = 0; r < kRows; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < a.blocks; ++b) {
      const uint8_t* o = w + static_cast<size_t>(b) * kQ8_0x8BlockBytes;
      if (a.stream) prefetch_group_stream(ahead, o, kQ8_0x8BlockBytes, kPrefetchBytes);
      // Run i = 2h + j: qs bytes 8h.. of rows 0, 1, 4, 5 (j = 0) or 2, 3, 6, 7 (j = 1).
      __m256i q[8], u[8];
      for (int i = 0; i < 8; ++i) {
        q[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(o + 16 + 32 * i));
        u[i] = _mm256_sign_epi8(q[i], q[i]);  // |q| ≤ 128 as u8
      }
      const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o)));
      for (int r = 0; r < kRows; ++r) {
        const int8_t* xq = x[r][b].qs;
        __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
        for (int h = 0; h < 4; ++h) {
          const __m256i xh = bcast8(xq + 8 * h);
          s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(_mm256_maddubs_epi16(u[2 * h], _mm256_sign_epi8(xh, q[2 * h])), ones));
          s1 = _mm256_add_epi32(
              s1, _mm256_madd_epi16(_mm256_maddubs_epi16(u[2 * h + 1], _mm256_sign_epi8(xh, q[2 * h + 1])), ones));
        }
        const __m256i isum = _mm256_hadd_epi32(s0, s1);
        acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(x[r][b].d)), _mm256_cvtepi32_ps(isum), acc[r]);
      }
    }
    write_group_outputs<kRows>(a, g, acc);
  }
}

}  // namespace

LOOM_TARGET_AVX2 void qdot_q8_0x8_avx2(const QdotArgs& a) {
  LOOM_QDOT_X8_BY_ROWS(q8_0x8_rows, a)
}

}  // namespace loom::cpu::detail
#endif
