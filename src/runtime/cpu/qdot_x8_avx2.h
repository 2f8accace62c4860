// What the AVX2 decode kernels over groups of 8 interleaved rows share
// (qdot_q4_0x8_avx2.cc, qdot_q4_Kx8_avx2.cc, qdot_q8_0x8_avx2.cc): the
// activation broadcast, the prefetch of the group stream, and writing a
// group's 8 outputs per activation row.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "runtime/cpu/qdot_kernels.h"

namespace loom::cpu::detail {
namespace {

constexpr int kX8Rows = 8;

LOOM_TARGET_AVX2 LOOM_INLINE __m256i bcast8(const void* p) {
  int64_t v;
  __builtin_memcpy(&v, p, 8);
  return _mm256_set1_epi64x(v);
}

// Keeps `ahead` `distance` bytes past the end of the group block at o
// (block_bytes long), one line at a time; non-temporal, as the weights are read once.
LOOM_TARGET_AVX2 LOOM_INLINE void prefetch_group_stream(const char*& ahead, const uint8_t* o, size_t block_bytes,
                                                        size_t distance) {
  for (const char* end = reinterpret_cast<const char*>(o) + block_bytes + distance; ahead < end; ahead += 64) {
    _mm_prefetch(ahead, _MM_HINT_NTA);
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

}  // namespace
}  // namespace loom::cpu::detail
