// What the AVX2 decode kernels over groups of 8 interleaved rows share
// (qdot_<type>x8_avx2.cc; the AVX-512 ones include it too): the
// activation broadcast, the prefetch of the group stream, writing a group's 8
// outputs per activation row, the entry points' dispatch on the row count, and
// Q4_Kx8's scale unpacking.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "runtime/cpu/qdot_kernels.h"
#include "runtime/cpu/qlayout_q4_Kx8.h"

namespace loom::cpu::detail {
namespace {

constexpr int kX8Rows = 8;

LOOM_TARGET_AVX2 LOOM_INLINE __m256i bcast8(const void* p) {
  int64_t v;
  __builtin_memcpy(&v, p, 8);
  return _mm256_set1_epi64x(v);
}

LOOM_TARGET_AVX2 LOOM_INLINE __m256i bcast4(const void* p) {
  int32_t v;
  __builtin_memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

LOOM_TARGET_AVX2 LOOM_INLINE __m256i load256(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// 16 in byte j of the result where bit j of m is set, else 0: Q5_Kx8's fifth bits
// (qlayout_q5_Kx8.h), 32 levels' worth, ready to be or-ed into their low nibbles. Byte j
// takes byte j / 8 of m (vpbroadcastd puts m's four bytes in each 128-bit lane), then
// its bit j % 8.
LOOM_TARGET_AVX2 LOOM_INLINE __m256i sixteen_where_bits(uint32_t m) {
  const __m256i byte_of = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                           2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bit_of = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  const __m256i bits = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int32_t>(m)), byte_of), bit_of);
  return _mm256_and_si256(_mm256_cmpeq_epi8(bits, bit_of), _mm256_set1_epi8(0x10));
}

// Keeps `ahead` `distance` bytes past the end of the group block at o
// (block_bytes long), one line at a time; non-temporal by default, as the weights
// are read once. Q6_Kx8 prefetches into L2 (_MM_HINT_T1) instead: each of its
// group blocks is read as two streams a kilobyte apart (ql, qh), and on a Zen 4
// (32 KB L1) non-temporal lines were gone before use: 2048->8192 and 8192->2048
// at M = 1 ran at 26 GB/s with NTA, 23 with T0, 53-57 with T1 (a plain read 57-60).
template <int kHint = _MM_HINT_NTA>
LOOM_TARGET_AVX2 LOOM_INLINE void prefetch_group_stream(const char*& ahead, const uint8_t* o, size_t block_bytes,
                                                        size_t distance) {
  for (const char* end = reinterpret_cast<const char*>(o) + block_bytes + distance; ahead < end; ahead += 64) {
    __builtin_prefetch(ahead, 0, kHint & 3);  // what _mm_prefetch(ahead, kHint) expands to
  }
}

// Group g's outputs: acc[r] lane i is output 8g + i of activation row r.
template <int kRows>
LOOM_TARGET_AVX2 LOOM_INLINE void write_group_outputs(const QdotArgs& a, int64_t g, const __m256* acc) {
  for (int r = 0; r < kRows; ++r) {
    alignas(32) float out[kX8Rows];
    _mm256_store_ps(out, acc[r]);
    for (int i = 0; i < kX8Rows; ++i) {
      const int64_t n = g * kX8Rows + i;
      a.y[r * a.ldy + n] = qdot_finish(out[i], a.bias, n);
    }
  }
}

// The body of a kernel entry point: kernel<kRows> for a.m activation rows (1..kQTileRows).
#define LOOM_QDOT_X8_BY_ROWS(kernel, a) \
  switch ((a).m) {                      \
    case 1: kernel<1>(a); break;        \
    case 2: kernel<2>(a); break;        \
    case 3: kernel<3>(a); break;        \
    default: kernel<4>(a); break;       \
  }
static_assert(kQTileRows == 4, "LOOM_QDOT_X8_BY_ROWS instantiates 1..4 rows");

// Q4_Kx8: the group block at o's scales (bytes 8j + r of `scales`: sub-block j's
// six-bit scale of row r, unpack_scale_min_k4) and mins, as four vectors of int16
// pairs (m_j, m_j+1) in row r's int32 lane for j = 0, 2, 4, 6.
LOOM_TARGET_AVX2 LOOM_INLINE void q4_Kx8_scales_mins(const uint8_t* o, uint8_t* scales, __m256i* mins) {
  // Rows' mins of sub-blocks j, j + 1 (bytes 8j + r, 8(j + 1) + r) side by side.
  alignas(32) static constexpr int8_t kPairMins[32] = {0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15,
                                                       0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15};
  const __m256i low4 = _mm256_set1_epi8(0x0F), low6 = _mm256_set1_epi8(0x3F), top2 = _mm256_set1_epi8(0x30);
  const __m256i pair_mins = _mm256_load_si256(reinterpret_cast<const __m256i*>(kPairMins));
  const __m256i s0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(o + kQ4_Kx8ScalesOffset));
  const __m256i s1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(o + kQ4_Kx8ScalesOffset + 32));
  const __m256i s2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(o + kQ4_Kx8ScalesOffset + 64));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(scales), _mm256_and_si256(s0, low6));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(scales + 32),
                      _mm256_or_si256(_mm256_and_si256(s2, low4), _mm256_and_si256(_mm256_srli_epi16(s0, 2), top2)));
  const __m256i mins_lo = _mm256_shuffle_epi8(_mm256_and_si256(s1, low6), pair_mins);
  const __m256i mins_hi = _mm256_shuffle_epi8(
      _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(s2, 4), low4), _mm256_and_si256(_mm256_srli_epi16(s1, 2), top2)),
      pair_mins);
  mins[0] = _mm256_cvtepu8_epi16(_mm256_castsi256_si128(mins_lo));
  mins[1] = _mm256_cvtepu8_epi16(_mm256_extracti128_si256(mins_lo, 1));
  mins[2] = _mm256_cvtepu8_epi16(_mm256_castsi256_si128(mins_hi));
  mins[3] = _mm256_cvtepu8_epi16(_mm256_extracti128_si256(mins_hi, 1));
}

}  // namespace
}  // namespace loom::cpu::detail
