// The tiled GEMM over quantized weights that the AMX-INT8 (qgemm_amx.cc) and the
// AVX512-VNNI (qgemm_avx512vnni.cc) batched paths share: both produce, per 16
// outputs × 16 activation rows, each block's (or sub-block's) exact int32 sums
// C[n][m] = Σ_k W[n][k]·X[m][k], and this file does everything around those
// products, the same for both:
//  - weights: unpacked per chunk of outputs (qgemm_weights.h; Q6_K as q − 32 so a
//    sub-block's sum is already dot − 32·bsum);
//  - activations: rearranged once per call into 4-byte groups (row k/4, column m)
//    per tile of 16 rows, with each row's block scales (and sums);
//  - each block's sums combine in AVX-512, 16 rows per output vector, in the row
//    kernels' order (qdot_kernels.h): integer Σ_j sc_j·isum_j for the K types, then
//    acc = fma(d_w·d_x, isum, acc) (and the min term), acc + bias at the end.
// So either engine gives the row kernels' bits.
//
// An engine E supplies the products (it sees A = 16 weight rows ws bytes apart, B
// = one activation group tile):
//   E::biased(kind)          levels stored as u8 = s8 + 128 (then the activation
//                            tile carries −128·Σx per row and unit to start from)
//   E::Scope scope(k)        around a chunk's products (k = 32 or 16 elements)
//   E::dot<k>(w, ws, x, corr, out)   out[16n + m] = C[n][m]; corr: 16 × int32 or null
//                            (corr[m] + Σ_k (w[n][k] + 128)·x[m][k] when biased)
//   E::dot4<k>(w[4], ws, x[4], corr[4], out)   four of them, at out + 256·i
// The includer defines LOOM_QGEMM_TARGET (its ISA attribute) first.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <vector>

#include <immintrin.h>

#include "loom/core/quantize.h"
#include "runtime/cpu/matmul_kernels.h"
#include "runtime/cpu/qgemm_weights.h"
#include "runtime/cpu/share_chunks.h"

namespace loom::cpu::detail {
namespace {


// Units: the element runs one product covers, and so one correction vector:
// Q8x32 one per block, Q6_K sixteen (16 elements each). Q4_K is never biased.
inline int64_t units_per_block(Kind kind) { return kind == Kind::kQ6_K ? 16 : 1; }

// One tile of 16 activation rows: the int8 values in B layout (byte (k/4)·64 +
// 4m + k%4), then per block the 16 rows' scales, then (K types with mins) per
// block and sub-block j the 16 rows' Σ of the sub-block's 32 values, as f32
// (exact: |Σ| ≤ 32·127), then (biased engines) per unit the 16 rows' −128·Σx,
// where a product of levels + 128 starts so that it ends at Σ w·x.
struct ActLayout {
  int64_t K = 0, blocks = 0;
  bool sums = false;
  int64_t units = 0;  // correction vectors, 0 when the weights are not biased
  size_t qs_bytes() const { return static_cast<size_t>(K) * kTile; }
  size_t dx_offset() const { return qs_bytes(); }
  size_t sums_offset() const { return dx_offset() + static_cast<size_t>(blocks) * kTile * sizeof(float); }
  size_t corr_offset() const {
    return sums_offset() + (sums ? static_cast<size_t>(blocks) * 8 * kTile * sizeof(float) : 0);
  }
  size_t tile_bytes() const {
    const size_t end = corr_offset() + static_cast<size_t>(units) * kTile * sizeof(int32_t);
    return (end + 63) & ~size_t{63};
  }
};

inline void build_act_tile(const uint8_t* act, size_t act_row_bytes, int rows, bool k_types, const ActLayout& L,
                           uint8_t* dst) {
  std::memset(dst, 0, L.tile_bytes());
  float* dx = reinterpret_cast<float*>(dst + L.dx_offset());
  float* sums = reinterpret_cast<float*>(dst + L.sums_offset());
  int32_t* corr = reinterpret_cast<int32_t*>(dst + L.corr_offset());
  const int64_t per_block = k_types ? 256 : 32;
  const int64_t per_unit = L.units > 0 ? per_block * L.blocks / L.units : per_block;
  for (int m = 0; m < rows; ++m) {
    const uint8_t* row = act + static_cast<size_t>(m) * act_row_bytes;
    for (int64_t b = 0; b < L.blocks; ++b) {
      const int8_t* qs;
      if (k_types) {
        const ActBlockQ8K& x = reinterpret_cast<const ActBlockQ8K*>(row)[b];
        qs = x.qs;
        dx[b * kTile + m] = x.d;
        if (L.sums) {
          for (int j = 0; j < 8; ++j) {
            sums[(b * 8 + j) * kTile + m] = static_cast<float>(x.bsums[2 * j] + x.bsums[2 * j + 1]);
          }
        }
      } else {
        const ActBlockQ8x32& x = reinterpret_cast<const ActBlockQ8x32*>(row)[b];
        qs = x.qs;
        dx[b * kTile + m] = x.d;
      }
      uint8_t* out = dst + static_cast<size_t>(b * per_block / 4) * 64 + 4 * static_cast<size_t>(m);
      for (int64_t g = 0; g < per_block / 4; ++g) std::memcpy(out + g * 64, qs + 4 * g, 4);
      if (L.units > 0) {
        for (int64_t u0 = 0; u0 < per_block; u0 += per_unit) {
          int32_t s = 0;
          for (int64_t k = u0; k < u0 + per_unit; ++k) s += qs[k];
          corr[(b * per_block + u0) / per_unit * kTile + m] = -128 * s;
        }
      }
    }
  }
}


// vcvtdq2ps (exact for the |sums| < 2^24 of a block). The zero-masked form, as
// GCC 12 warns that the plain one's undefined pass-through is uninitialized.
LOOM_QGEMM_TARGET LOOM_INLINE __m512 int_to_f32(__m512i v) { return _mm512_maskz_cvtepi32_ps(0xFFFF, v); }

// acc[n] (16 rows of output n) = fma(d_w[n]·d_x, isum[n], acc[n]).
LOOM_QGEMM_TARGET LOOM_INLINE void combine_q8x32(__m512* acc, const int32_t* cb, const float* dw, const float* dx) {
  const __m512 dxv = _mm512_loadu_ps(dx);
#pragma GCC unroll 16
  for (int n = 0; n < kTile; ++n) {
    const __m512 isum = int_to_f32(_mm512_loadu_si512(cb + 16 * n));
    acc[n] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(dw[n]), dxv), isum, acc[n]);
  }
}

LOOM_QGEMM_TARGET void write_tile(const __m512* acc, int rows, int outputs, const float* bias, float* y,
                                  int64_t ldy) {
  alignas(64) float out[kTile][kTile];
  for (int n = 0; n < kTile; ++n) _mm512_store_ps(out[n], acc[n]);
  for (int m = 0; m < rows; ++m) {
    for (int n = 0; n < outputs; ++n) y[m * ldy + n] = bias ? out[n][m] + bias[n] : out[n][m];
  }
}


struct TileJob {
  NextChunk* next;
  const int8_t* w;   // the group's A tiles, one per 32 elements (kATile bytes)
  const uint8_t* x;  // activation tile
  const ActLayout* L;
  const WeightChunk* c;
  int64_t group;
  int rows, outputs;
  const float* bias;
  float* y;
  int64_t ldy;
};

// Unit u's correction vector in the activation tile, or null (not biased).
LOOM_QGEMM_TARGET LOOM_INLINE const int32_t* corr_of(const TileJob& j, int64_t u) {
  return j.L->units > 0 ? reinterpret_cast<const int32_t*>(j.x + j.L->corr_offset()) + u * kTile : nullptr;
}

// One pass's tile products (stored at out): Q8_0/Q4_0 four blocks from b, the
// K types every sub-block of block b.
template <class E>
LOOM_QGEMM_TARGET LOOM_INLINE void dots_q8x32(const TileJob& j, int64_t b, int32_t* out) {
  const int8_t* w[4];
  const uint8_t* x[4];
  const int32_t* corr[4];
  for (int i = 0; i < 4; ++i) w[i] = j.w + (b + i) * kATile, x[i] = j.x + (b + i) * 512, corr[i] = corr_of(j, b + i);
  E::template dot4<32>(w, 32, x, corr, out);
}

template <class E>
LOOM_QGEMM_TARGET LOOM_INLINE void dots_q4_K(const TileJob& j, int64_t b, int32_t* out) {
  for (int h = 0; h < 2; ++h) {
    const int8_t* w[4];
    const uint8_t* x[4];
    const int32_t* corr[4] = {};
    for (int i = 0; i < 4; ++i) w[i] = j.w + (8 * b + 4 * h + i) * kATile, x[i] = j.x + (8 * b + 4 * h + i) * 512;
    E::template dot4<32>(w, 32, x, corr, out + 1024 * h);
  }
}

// Sub-block s (16 elements): A at half s % 2 of the group's 32-element tile s / 2.
template <class E>
LOOM_QGEMM_TARGET LOOM_INLINE void dots_q6_K(const TileJob& j, int64_t b, int32_t* out) {
  for (int q = 0; q < 4; ++q) {
    const int8_t* w[4];
    const uint8_t* x[4];
    const int32_t* corr[4];
    for (int i = 0; i < 4; ++i) {
      const int sub = 4 * q + i;
      w[i] = j.w + (8 * b + sub / 2) * kATile + 16 * (sub % 2);
      x[i] = j.x + b * 4096 + 256 * sub;
      corr[i] = corr_of(j, 16 * b + sub);
    }
    E::template dot4<16>(w, 32, x, corr, out + 1024 * q);
  }
}

// The tile products of the next pass are issued before this pass's stored
// tiles combine, so the two overlap (double-buffered stores; AMX runs the
// products beside the AVX-512 combination).
template <class E>
LOOM_QGEMM_TARGET void tile_q8x32(const TileJob& j) {
  const int64_t blocks = j.L->blocks;
  const float* dw = j.c->d.data() + static_cast<size_t>(j.group * blocks) * kTile;
  const float* dx = reinterpret_cast<const float*>(j.x + j.L->dx_offset());
  alignas(64) int32_t cb[2][4 * 256];
  __m512 acc[kTile];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  const int64_t whole = blocks / 4 * 4;
  if (whole > 0) dots_q8x32<E>(j, 0, cb[0]);
  for (int64_t b = 0; b < whole; b += 4) {
    const int32_t* now = cb[(b / 4) & 1];
    if (b + 4 < whole) dots_q8x32<E>(j, b + 4, cb[((b / 4) & 1) ^ 1]);
    j.next->step();
    for (int i = 0; i < 4; ++i) combine_q8x32(acc, now + 256 * i, dw + (b + i) * kTile, dx + (b + i) * kTile);
  }
  for (int64_t b = whole; b < blocks; ++b) {
    E::template dot<32>(j.w + b * kATile, 32, j.x + b * 512, corr_of(j, b), cb[0]);
    combine_q8x32(acc, cb[0], dw + b * kTile, dx + b * kTile);
  }
  write_tile(acc, j.rows, j.outputs, j.bias, j.y, j.ldy);
}

// Σ_s sc_s·isum_s over `subs` sub-blocks of output n as an exact int32: in f32,
// `exact` terms at a time (each partial sum an integer below 2^24, so no f32 step
// rounds: Q4_K 4 terms of ≤ 63·15·127·32, Q5_K 2 of ≤ 63·31·127·32), the
// partial sums added as int32. The f32 FMAs are cheaper
// than vpmulld (two uops on one port).
template <int subs, int exact>
LOOM_QGEMM_TARGET LOOM_INLINE __m512i scaled_sum(const int32_t* cb, const float* sc, int n) {
  static_assert(subs % exact == 0);
  __m512i total = _mm512_setzero_si512();
  for (int s0 = 0; s0 < subs; s0 += exact) {
    __m512 part = _mm512_mul_ps(int_to_f32(_mm512_loadu_si512(cb + 256 * s0 + 16 * n)), _mm512_set1_ps(sc[s0]));
    for (int s = s0 + 1; s < s0 + exact; ++s) {
      part = _mm512_fmadd_ps(int_to_f32(_mm512_loadu_si512(cb + 256 * s + 16 * n)), _mm512_set1_ps(sc[s]), part);
    }
    total = _mm512_add_epi32(total, _mm512_maskz_cvtps_epi32(0xFFFF, part));
  }
  return total;
}

template <class E, int exact>
LOOM_QGEMM_TARGET void tile_q4_K(const TileJob& j) {
  const int64_t blocks = j.L->blocks;
  const size_t first = static_cast<size_t>(j.group * blocks) * kTile;
  const float* dx = reinterpret_cast<const float*>(j.x + j.L->dx_offset());
  const float* xsum = reinterpret_cast<const float*>(j.x + j.L->sums_offset());
  const __m512 sign = _mm512_set1_ps(-0.0f);
  alignas(64) int32_t cbs[2][8 * 256];
  __m512 acc[kTile];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  dots_q4_K<E>(j, 0, cbs[0]);
  for (int64_t b = 0; b < blocks; ++b) {
    if (b + 1 < blocks) dots_q4_K<E>(j, b + 1, cbs[(b + 1) & 1]);
    j.next->step();
    const int32_t* cb = cbs[b & 1];
    const size_t at = first + static_cast<size_t>(b) * kTile;
    const float* sc = j.c->sc.data() + at * 8;
    const float* mn = j.c->mins.data() + at * 8;
    const __m512 dxv = _mm512_loadu_ps(dx + b * kTile);
    const float* xs = xsum + b * 8 * kTile;
#pragma GCC unroll 16
    for (int n = 0; n < kTile; ++n) {
      const __m512i scaled = scaled_sum<8, exact>(cb, sc + 8 * n, n);
      // Σ_j m_j·xsum_j: integers below 2^24 throughout (8·63·32·127), exact in f32
      __m512 mins = _mm512_mul_ps(_mm512_set1_ps(mn[8 * n]), _mm512_loadu_ps(xs));
      for (int s = 1; s < 8; ++s) {
        mins = _mm512_fmadd_ps(_mm512_set1_ps(mn[8 * n + s]), _mm512_loadu_ps(xs + s * kTile), mins);
      }
      const __m512 d = _mm512_mul_ps(_mm512_set1_ps(j.c->d[at + n]), dxv);
      const __m512 dm = _mm512_xor_ps(_mm512_mul_ps(_mm512_set1_ps(j.c->dmin[at + n]), dxv), sign);
      acc[n] = _mm512_fmadd_ps(d, int_to_f32(scaled), acc[n]);
      acc[n] = _mm512_fmadd_ps(dm, mins, acc[n]);
    }
  }
  write_tile(acc, j.rows, j.outputs, j.bias, j.y, j.ldy);
}

template <class E>
LOOM_QGEMM_TARGET void tile_q6_K(const TileJob& j) {
  const int64_t blocks = j.L->blocks;
  const size_t first = static_cast<size_t>(j.group * blocks) * kTile;
  const float* dx = reinterpret_cast<const float*>(j.x + j.L->dx_offset());
  alignas(64) int32_t cbs[2][16 * 256];
  __m512 acc[kTile];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  dots_q6_K<E>(j, 0, cbs[0]);
  for (int64_t b = 0; b < blocks; ++b) {
    if (b + 1 < blocks) dots_q6_K<E>(j, b + 1, cbs[(b + 1) & 1]);
    j.next->step();
    const int32_t* cb = cbs[b & 1];
    const size_t at = first + static_cast<size_t>(b) * kTile;
    const int32_t* sc = j.c->sc6.data() + at * 16;
    const __m512 dxv = _mm512_loadu_ps(dx + b * kTile);
#pragma GCC unroll 16
    for (int n = 0; n < kTile; ++n) {
      // vpmulld here: Q6_K's two-term f32 sums measured no faster
      __m512i total = _mm512_mullo_epi32(_mm512_loadu_si512(cb + 16 * n), _mm512_set1_epi32(sc[16 * n]));
      for (int s = 1; s < 16; ++s) {
        total = _mm512_add_epi32(total, _mm512_mullo_epi32(_mm512_loadu_si512(cb + 256 * s + 16 * n),
                                                           _mm512_set1_epi32(sc[16 * n + s])));
      }
      acc[n] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(j.c->d[at + n]), dxv), int_to_f32(total), acc[n]);
    }
  }
  write_tile(acc, j.rows, j.outputs, j.bias, j.y, j.ldy);
}

template <class E>
LOOM_QGEMM_TARGET void run_chunk(const PackedLinear& w, int64_t n0, int64_t n1, int64_t blocks, const uint8_t* tiles,
                                 const ActLayout& L, int64_t M, float* y, int64_t y_stride) {
  static thread_local WeightChunk t_chunk;
  const DType dt = w.weight_dtype();
  const Kind kind = kind_of(dt);
  WeightChunk& c = t_chunk;
  pack_chunk(w, n0, n1, blocks, E::biased(kind) ? static_cast<int8_t>(-128) : int8_t{0}, c);
  typename E::Scope scope(kind == Kind::kQ6_K ? 16 : 32);
  const int64_t groups = (n1 - n0 + kTile - 1) / kTile;
  const int64_t K = w.in_features();
  // Usually the next chunk of this thread's share (share_chunks runs each share
  // front to back); a wrong guess costs only the prefetches.
  const int64_t steps_per_tile = kind == Kind::kQ8x32 ? std::max<int64_t>(1, blocks / 4) : blocks;
  NextChunk next = next_chunk_after(w, n0, n1, (M + kTile - 1) / kTile * groups * steps_per_tile);
  for (int64_t m0 = 0; m0 < M; m0 += kTile) {
    const uint8_t* x = tiles + static_cast<size_t>(m0 / kTile) * L.tile_bytes();
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t first = n0 + g * kTile;
      TileJob j;
      j.next = &next;
      j.outputs = static_cast<int>(std::min<int64_t>(kTile, n1 - first));
      j.w = c.levels.data() + static_cast<size_t>(g * kTile) * static_cast<size_t>(K);
      j.x = x;
      j.L = &L;
      j.c = &c;
      j.group = g;
      j.rows = static_cast<int>(std::min<int64_t>(kTile, M - m0));
      j.bias = w.bias() ? w.bias() + first : nullptr;
      j.y = y + m0 * y_stride + first;
      j.ldy = y_stride;
      switch (kind) {
        case Kind::kQ8x32: tile_q8x32<E>(j); break;
        case Kind::kQ4_K: dt == DType::kQ4_K ? tile_q4_K<E, 4>(j) : tile_q4_K<E, 2>(j); break;
        case Kind::kQ6_K: tile_q6_K<E>(j); break;
      }
    }
  }
}

// y = act · wᵀ (+ bias) for M quantized activation rows, on engine E.
template <class E>
void linear_quantized_tiles(const uint8_t* act, size_t act_row_bytes, int64_t M, const PackedLinear& w, float* y,
                            int64_t y_stride, ThreadPool& pool) {
  const DType dt = w.weight_dtype();
  const bool k_types = dtype_block_elements(dt) == 256;
  ActLayout L;
  L.K = w.in_features();
  L.blocks = L.K / dtype_block_elements(dt);
  L.sums = kind_of(dt) == Kind::kQ4_K;
  L.units = E::biased(kind_of(dt)) ? L.blocks * units_per_block(kind_of(dt)) : 0;
  const int64_t tiles = (M + kTile - 1) / kTile;
  uint8_t* tile_data = act_tile_buffer(static_cast<size_t>(tiles) * L.tile_bytes());
  pool.parallel_for(tiles, [&](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t) {
      const int rows = static_cast<int>(std::min<int64_t>(kTile, M - t * kTile));
      build_act_tile(act + static_cast<size_t>(t * kTile) * act_row_bytes, act_row_bytes, rows, k_types, L,
                     tile_data + static_cast<size_t>(t) * L.tile_bytes());
    }
  });
  compiler_barrier();
  const int64_t N = w.out_features();
  const int64_t chunk_outputs = tile_chunk_outputs(L.K, N, pool.num_threads());
  share_chunks(pool, N, chunk_outputs, [&](int64_t n0, int64_t n1) {
    run_chunk<E>(w, n0, n1, L.blocks, tile_data, L, M, y, y_stride);
  });
}

}  // namespace
}  // namespace loom::cpu::detail
