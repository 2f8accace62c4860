// What the AVX-512 decode kernels over groups of 8 interleaved rows share
// (qdot_<type>x8_avx512.cc): the layouts (qlayout_x8.h) put a run pair, rows
// 0, 1, 4, 5 then 2, 3, 6, 7, in 64 contiguous bytes, so one zmm holds both runs
// and every instruction works for the 8 rows the AVX2 kernels take two for; the
// run pair's per-row sums meet in one hadd of its halves, rows 0..7 in order.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "runtime/cpu/qdot_kernels.h"
#include "runtime/cpu/qdot_x8_avx2.h"

// AVX512BW for the byte and word ops, AVX512-VNNI for vpdpbusd / vpdpwssd.
#define LOOM_TARGET_X8_AVX512 \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")))

namespace loom::cpu::detail {
namespace {

LOOM_TARGET_X8_AVX512 LOOM_INLINE __m512i load512(const uint8_t* p) { return _mm512_loadu_si512(p); }

// 8 bytes at p in every qword: the same activations for both runs of a pair.
LOOM_TARGET_X8_AVX512 LOOM_INLINE __m512i bcast8_512(const void* p) {
  int64_t v;
  __builtin_memcpy(&v, p, 8);
  return _mm512_set1_epi64(v);
}

// (Zero-masked forms: GCC 12 warns that the plain ones' undefined pass-through is
// uninitialized.) A run pair's int32 sums (two lanes per row: rows 0, 1, 4, 5 in the low half,
// 2, 3, 6, 7 in the high one) → rows 0..7, one lane each.
LOOM_TARGET_X8_AVX512 LOOM_INLINE __m256i row_sums_x8(__m512i pair) {
  return _mm256_hadd_epi32(_mm512_maskz_extracti64x4_epi64(0xFF, pair, 0), _mm512_maskz_extracti64x4_epi64(0xFF, pair, 1));
}

}  // namespace
}  // namespace loom::cpu::detail
