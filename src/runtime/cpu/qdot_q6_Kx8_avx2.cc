// Q6_K × int8 activations for up to kQTileRows rows (decode and small batches),
// AVX2 (maddubs), over weights interleaved in groups of 8 rows
// (qlayout_q6_Kx8.h). Per group block and run set, the levels of two 8-byte
// pieces of a sub-block are built once for all activation rows; per activation
// row, their two maddubs add up in int16 (levels ≤ 63, |x| ≤ 127: each pair sum
// ≤ 2·63·127 = 16002, two ≤ 32004) and one madd with the sub-block's scales,
// spread sign-extended to their rows' lanes, widens them to int32; one hadd of the
// two run sets gives rows 0..7 in order. The −32 of every level is Σ_s sc_s·bsum_s
// per row, one madd per pair of sub-blocks with the scales as stored in pairs.
// The integers and the f32 steps are the row kernels' (qdot_kernels.h), so
// results are bitwise theirs.
#include "runtime/cpu/matmul_kernels.h"
#if defined(LOOM_MATMUL_X86)
#include <immintrin.h>

#include "runtime/cpu/qdot_kernels.h"
#include "runtime/cpu/qdot_x8_avx2.h"
#include "runtime/cpu/qlayout_q6_Kx8.h"

namespace loom::cpu::detail {
namespace {

// How far ahead the group stream is prefetched (as Q4_Kx8, whose group blocks are
// of the same order of size).
constexpr size_t kPrefetchBytes = 4096;

// [t][set]: from a scale pair's 16 bytes (row r's sub-block 2j + t at 2r + t) in
// both 128-bit lanes, each row of the run set (rows 0, 1, 4, 5 or 2, 3, 6, 7) gets
// its scale in the high byte of its four int16 lanes (an arithmetic shift by 8
// then sign-extends it).
alignas(32) constexpr int8_t kSpreadScales[2][2][32] = {
#define LOOM_ROW(r, t) -1, 2 * (r) + (t), -1, 2 * (r) + (t), -1, 2 * (r) + (t), -1, 2 * (r) + (t)
    {{LOOM_ROW(0, 0), LOOM_ROW(1, 0), LOOM_ROW(4, 0), LOOM_ROW(5, 0)},
     {LOOM_ROW(2, 0), LOOM_ROW(3, 0), LOOM_ROW(6, 0), LOOM_ROW(7, 0)}},
    {{LOOM_ROW(0, 1), LOOM_ROW(1, 1), LOOM_ROW(4, 1), LOOM_ROW(5, 1)},
     {LOOM_ROW(2, 1), LOOM_ROW(3, 1), LOOM_ROW(6, 1), LOOM_ROW(7, 1)}},
#undef LOOM_ROW
};

template <int kRows>
LOOM_TARGET_AVX2 void q6_Kx8_rows(const QdotArgs& a) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), bits45 = _mm256_set1_epi8(0x30);
  const size_t group_bytes = static_cast<size_t>(a.blocks) * kQ6_Kx8BlockBytes;
  const ActBlockQ8K* x[kRows];
  for (int r = 0; r < kRows; ++r) x[r] = qdot_act_row<ActBlockQ8K>(a, r);
  const char* ahead = reinterpret_cast<const char*>(a.w) + kPrefetchBytes;
  for (int64_t g = 0; g < a.outputs / kQ6_KGroupRows; ++g) {
    const uint8_t* w = a.w + group_bytes * static_cast<size_t>(g);
    __m256 acc[kRows];
    for (int r = 0; r < kRows; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < a.blocks; ++b) {
      const uint8_t* o = w + static_cast<size_t>(b) * kQ6_Kx8BlockBytes;
      if (a.stream) prefetch_group_stream<_MM_HINT_T1>(ahead, o, kQ6_Kx8BlockBytes, kPrefetchBytes);
      const uint8_t* scales = o + kQ6_Kx8ScalesOffset;
      __m256i isum[2][kRows];
      for (int set = 0; set < 2; ++set) {
        for (int r = 0; r < kRows; ++r) isum[set][r] = _mm256_setzero_si256();
      }
      // Quarter h (elements 128h..128h + 127), pieces p = 2t, 2t + 1 of each of its
      // 32-element runs: sub-blocks 8h + 2k + t for k = 0..3.
      for (int h = 0; h < 2; ++h) {
        for (int t = 0; t < 2; ++t) {
          for (int set = 0; set < 2; ++set) {
            __m256i level[4][2];
            for (int i = 0; i < 2; ++i) {
              const int p = 2 * t + i;
              const __m256i ql_a = load256(o + kQ6_Kx8QlOffset + 64 * (8 * h + p) + 32 * set);
              const __m256i ql_b = load256(o + kQ6_Kx8QlOffset + 64 * (8 * h + 4 + p) + 32 * set);
              const __m256i hb = load256(o + kQ6_Kx8QhOffset + 64 * (4 * h + p) + 32 * set);
              // qh bits 2k, 2k + 1 to bits 4-5 (16-bit shifts: what crosses into the
              // neighbouring byte lands outside 0x30).
              level[0][i] = _mm256_or_si256(_mm256_and_si256(ql_a, low4),
                                            _mm256_and_si256(_mm256_slli_epi16(hb, 4), bits45));
              level[1][i] = _mm256_or_si256(_mm256_and_si256(ql_b, low4),
                                            _mm256_and_si256(_mm256_slli_epi16(hb, 2), bits45));
              level[2][i] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql_a, 4), low4),
                                            _mm256_and_si256(hb, bits45));
              level[3][i] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql_b, 4), low4),
                                            _mm256_and_si256(_mm256_srli_epi16(hb, 2), bits45));
            }
            const __m256i spread = _mm256_load_si256(reinterpret_cast<const __m256i*>(kSpreadScales[t][set]));
            __m256i sc[4];
            for (int k = 0; k < 4; ++k) {
              const __m256i pair = _mm256_broadcastsi128_si256(
                  _mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + 16 * (4 * h + k))));
              sc[k] = _mm256_srai_epi16(_mm256_shuffle_epi8(pair, spread), 8);
            }
            for (int r = 0; r < kRows; ++r) {
              const int8_t* xq = x[r][b].qs + 128 * h + 16 * t;
              for (int k = 0; k < 4; ++k) {
                const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(level[k][0], bcast8(xq + 32 * k)),
                                                       _mm256_maddubs_epi16(level[k][1], bcast8(xq + 32 * k + 8)));
                isum[set][r] = _mm256_add_epi32(isum[set][r], _mm256_madd_epi16(pairs, sc[k]));
              }
            }
          }
        }
      }
      const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o)));
      for (int r = 0; r < kRows; ++r) {
        // Σ_s sc_s·bsum_s of every row (lane r), two sub-blocks per madd.
        __m256i offset = _mm256_setzero_si256();
        for (int j = 0; j < 8; ++j) {
          const __m256i pair = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + 16 * j)));
          offset = _mm256_add_epi32(offset, _mm256_madd_epi16(pair, bcast4(x[r][b].bsums + 2 * j)));
        }
        const __m256i total = _mm256_sub_epi32(_mm256_hadd_epi32(isum[0][r], isum[1][r]), _mm256_slli_epi32(offset, 5));
        acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(x[r][b].d)), _mm256_cvtepi32_ps(total), acc[r]);
      }
    }
    write_group_outputs<kRows>(a, g, acc);
  }
}

}  // namespace

LOOM_TARGET_AVX2 void qdot_q6_Kx8_avx2(const QdotArgs& a) {
  LOOM_QDOT_X8_BY_ROWS(q6_Kx8_rows, a)
}

}  // namespace loom::cpu::detail
#endif
