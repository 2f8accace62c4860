// Batched linear on quantized weights in AVX2, for CPUs without AVX512-VNNI
// (AMD Zen 2/3, Intel Skylake to Alder Lake): the weights unpacked per chunk as
// the AVX-512 tiles have them (qgemm_weights.h), activations in tiles of 8 rows,
// one ymm lane per row. Per output the 8 rows' block sums build up in registers
// from vpmaddubsw (weight bytes broadcast, u8, times each row's 4 activations,
// s8), and no lane is ever reduced, where the row kernels reduce every block of
// every output and row horizontally. 32 elements of the 8 rows' activations
// (8 registers) stay in registers across all the outputs of a tile, so each
// vpmaddubsw costs one load, the weights' broadcast.
//
// vpmaddubsw saturates its int16 pair sums, so the levels are kept small and
// unsigned where they can be (Q4_0 as q = level + 8, Q6_K as q = level + 32,
// Q4_K/Q5_K as they are; Q8_0 takes the sign trick, |w| against x·sign(w)), and
// int16 sums add up only as far as they cannot overflow (activations ≤ 127):
//   Q4_0, Q4_K: 8 groups (16 products ≤ 15·127 each: 30480)
//   Q5_K: 4 groups (≤ 31·127·8 = 31496); Q6_K: 2 groups (≤ 63·127·4 = 32004)
//   Q8_0: none (one pair ≤ 2·128·127 = 32512).
// vpmaddwd then widens to int32 and, for the K types, multiplies by the
// sub-block scale at once (pairs of int16 scales). The offsets come back as
// integer corrections per block and row (−8·Σx; −32·Σ_s sc_s·bsum_s), so every
// block's sum is the exact integer of the row kernels, and the f32 steps are
// theirs (qdot_kernels.h): the results are bitwise the row kernels'.
#include "loom/core/cpu_features.h"
#include "runtime/cpu/matmul_kernels.h"
#include "runtime/cpu/qgemm.h"

#if defined(LOOM_MATMUL_X86)
#define LOOM_QGEMM_TARGET __attribute__((target("avx2,fma,f16c")))
#include "runtime/cpu/qgemm_weights.h"
#include "runtime/cpu/share_chunks.h"
#endif

namespace loom::cpu::detail {

#if defined(LOOM_MATMUL_X86)
namespace {

constexpr int kRows = 8;  // activation rows per tile: one ymm of int32 or f32 lanes

// Stored level = level + offset: Q4_0 and Q6_K as their raw unsigned q.
int8_t level_offset(DType dt) { return dt == DType::kQ4_0 ? 8 : dt == DType::kQ6_K ? 32 : 0; }

// One tile of 8 activation rows: the int8 values, per 4-element group G (k/4)
// the 8 rows' 4 bytes at 32·G; per block the 8 rows' scales (f32); then by type
//   Q4_0: per block the rows' −8·Σx (int32);
//   Q4_K/Q5_K: per block and pair p of 32-element sub-blocks, per row the two
//     sub-blocks' Σx as int16 (|Σ| ≤ 32·127);
//   Q6_K: per block and pair p of 16-element sub-blocks, per row the two bsums.
struct Act8Layout {
  int64_t K = 0, blocks = 0;
  DType dt = DType::kQ8_0;
  size_t dx_offset() const { return static_cast<size_t>(K) * kRows; }
  size_t extra_offset() const { return dx_offset() + static_cast<size_t>(blocks) * kRows * sizeof(float); }
  size_t extra_bytes_per_block() const {
    switch (dt) {
      case DType::kQ4_0: return kRows * sizeof(int32_t);
      case DType::kQ4_K:
      case DType::kQ5_K: return 4 * kRows * 2 * sizeof(int16_t);
      case DType::kQ6_K: return 8 * kRows * 2 * sizeof(int16_t);
      default: return 0;
    }
  }
  size_t tile_bytes() const {
    const size_t end = extra_offset() + static_cast<size_t>(blocks) * extra_bytes_per_block();
    return (end + 63) & ~size_t{63};
  }
};

void build_act8_tile(const uint8_t* act, size_t act_row_bytes, int rows, const Act8Layout& L, uint8_t* dst) {
  std::memset(dst, 0, L.tile_bytes());
  const bool k_types = dtype_block_elements(L.dt) == 256;
  const int64_t per_block = k_types ? 256 : 32;
  float* dx = reinterpret_cast<float*>(dst + L.dx_offset());
  uint8_t* extra = dst + L.extra_offset();
  for (int m = 0; m < rows; ++m) {
    const uint8_t* row = act + static_cast<size_t>(m) * act_row_bytes;
    for (int64_t b = 0; b < L.blocks; ++b) {
      const int8_t* qs;
      uint8_t* ex = extra + static_cast<size_t>(b) * L.extra_bytes_per_block();
      if (k_types) {
        const ActBlockQ8K& x = reinterpret_cast<const ActBlockQ8K*>(row)[b];
        qs = x.qs;
        dx[b * kRows + m] = x.d;
        int16_t* pairs = reinterpret_cast<int16_t*>(ex);
        if (L.dt == DType::kQ6_K) {
          for (int p = 0; p < 8; ++p) {
            pairs[(p * kRows + m) * 2] = x.bsums[2 * p];
            pairs[(p * kRows + m) * 2 + 1] = x.bsums[2 * p + 1];
          }
        } else {
          for (int p = 0; p < 4; ++p) {
            for (int h = 0; h < 2; ++h) {
              const int j = 2 * p + h;
              pairs[(p * kRows + m) * 2 + h] = static_cast<int16_t>(x.bsums[2 * j] + x.bsums[2 * j + 1]);
            }
          }
        }
      } else {
        const ActBlockQ8x32& x = reinterpret_cast<const ActBlockQ8x32*>(row)[b];
        qs = x.qs;
        dx[b * kRows + m] = x.d;
        if (L.dt == DType::kQ4_0) {
          int32_t s = 0;
          for (int k = 0; k < 32; ++k) s += qs[k];
          reinterpret_cast<int32_t*>(ex)[m] = -8 * s;
        }
      }
      uint8_t* out = dst + static_cast<size_t>(b * per_block / 4) * 32 + 4 * static_cast<size_t>(m);
      for (int64_t g = 0; g < per_block / 4; ++g) std::memcpy(out + g * 32, qs + 4 * g, 4);
    }
  }
}

// The K types' scales as int16 pairs for vpmaddwd, per [group][block][16 n]:
// Q4_K/Q5_K sc_j in both halves (8 per output) and (m_2p, m_2p+1) (4); Q6_K sc_s
// in both halves (16) and (sc_2p, sc_2p+1) (8).
struct ScalePairs {
  std::vector<int32_t> sc, pairs;
};

inline int32_t int16_pair(int lo, int hi) {
  return static_cast<int32_t>((static_cast<uint32_t>(static_cast<uint16_t>(hi)) << 16) |
                              static_cast<uint16_t>(lo));
}

void build_scale_pairs(DType dt, const WeightChunk& c, ScalePairs& s) {
  if (dt == DType::kQ4_K || dt == DType::kQ5_K) {
    const size_t n = c.sc.size() / 8;
    s.sc.resize(n * 8);
    s.pairs.resize(n * 4);
    for (size_t i = 0; i < n; ++i) {
      for (int j = 0; j < 8; ++j) {
        const int sc = static_cast<int>(c.sc[i * 8 + j]);
        s.sc[i * 8 + j] = int16_pair(sc, sc);
      }
      for (int p = 0; p < 4; ++p) {
        s.pairs[i * 4 + p] = int16_pair(static_cast<int>(c.mins[i * 8 + 2 * p]), static_cast<int>(c.mins[i * 8 + 2 * p + 1]));
      }
    }
  } else if (dt == DType::kQ6_K) {
    const size_t n = c.sc6.size() / 16;
    s.sc.resize(n * 16);
    s.pairs.resize(n * 8);
    for (size_t i = 0; i < n; ++i) {
      for (int j = 0; j < 16; ++j) s.sc[i * 16 + j] = int16_pair(c.sc6[i * 16 + j], c.sc6[i * 16 + j]);
      for (int p = 0; p < 8; ++p) s.pairs[i * 8 + p] = int16_pair(c.sc6[i * 16 + 2 * p], c.sc6[i * 16 + 2 * p + 1]);
    }
  }
}

struct Tile8Job {
  NextChunk* next;
  const int8_t* w;   // the group's weight tiles (kATile bytes per 32 elements)
  const uint8_t* x;  // activation tile
  const Act8Layout* L;
  const WeightChunk* c;
  const ScalePairs* sp;
  size_t first;      // the group's first scale index (group · blocks · 16)
  int rows, outputs;
  const float* bias;
  float* y;
  int64_t ldy;
};

LOOM_QGEMM_TARGET LOOM_INLINE __m256i bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}
LOOM_QGEMM_TARGET LOOM_INLINE __m256i load_x(const uint8_t* p) {
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(p));
}

// The f32 accumulators of a tile, output n's 8 rows at acc[n]: in memory (L1),
// touched once per block and output, so that the registers hold the block's
// activations and the integer sums.
struct alignas(32) TileAcc {
  float v[kTile][kRows] = {};
  LOOM_QGEMM_TARGET LOOM_INLINE void fma(int n, __m256 d, __m256i isum) {
    _mm256_store_ps(v[n], _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(isum), _mm256_load_ps(v[n])));
  }
};

LOOM_QGEMM_TARGET void write_outputs(const TileAcc& acc, const Tile8Job& j) {
  for (int m = 0; m < j.rows; ++m) {
    for (int n = 0; n < j.outputs; ++n) j.y[m * j.ldy + n] = j.bias ? acc.v[n][m] + j.bias[n] : acc.v[n][m];
  }
}

// Q8_0 and Q4_0: per block acc = fma(d_w·d_x, isum, acc).
template <DType dt>
LOOM_QGEMM_TARGET __attribute__((noinline)) void tile_q8x32(const Tile8Job& j) {
  const int64_t blocks = j.L->blocks;
  const float* dw = j.c->d.data() + j.first;
  const float* dx = reinterpret_cast<const float*>(j.x + j.L->dx_offset());
  const int32_t* corr = reinterpret_cast<const int32_t*>(j.x + j.L->extra_offset());
  const __m256i ones = _mm256_set1_epi16(1);
  TileAcc acc;
  for (int64_t b = 0; b < blocks; ++b) {
    j.next->step();
    const uint8_t* xb = j.x + static_cast<size_t>(b) * 256;
    const __m256 dxv = _mm256_loadu_ps(dx + b * kRows);
#pragma GCC unroll 1
    for (int n = 0; n < j.outputs; ++n) {
      const int8_t* wn = j.w + static_cast<size_t>(b) * kATile + 32 * n;
      __m256i isum;
      if constexpr (dt == DType::kQ4_0) {
        __m256i s16 = _mm256_maddubs_epi16(bcast4(wn), load_x(xb));
#pragma GCC unroll 8
        for (int g = 1; g < 8; ++g) s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(bcast4(wn + 4 * g), load_x(xb + 32 * g)));
        isum = _mm256_add_epi32(_mm256_madd_epi16(s16, ones), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(corr + b * kRows)));
      } else {
        isum = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int g = 0; g < 8; ++g) {
          const __m256i wb = bcast4(wn + 4 * g);
          const __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(wb), _mm256_sign_epi8(load_x(xb + 32 * g), wb));
          isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, ones));
        }
      }
      acc.fma(n, _mm256_mul_ps(_mm256_set1_ps(dw[b * kTile + n]), dxv), isum);
    }
  }
  write_outputs(acc, j);
}

// Q4_K and Q5_K: acc = fma(d_w·d_x, Σ_j sc_j·isum_j, acc); acc = fma(−(dmin_w·d_x), Σ_j m_j·xsum_j, acc).
// Sub-block by sub-block, its 8 rows' activations held in 8 registers for every
// output (one load per vpmaddubsw, the weight's broadcast), and each output's
// Σ_j sc_j·isum_j built up in L1 across the sub-blocks.
template <DType dt>
LOOM_QGEMM_TARGET __attribute__((noinline)) void tile_q4_K(const Tile8Job& j) {
  constexpr int run = dt == DType::kQ4_K ? 8 : 4;  // groups whose int16 sums cannot overflow
  const int64_t blocks = j.L->blocks;
  const float* dx = reinterpret_cast<const float*>(j.x + j.L->dx_offset());
  const uint8_t* xsum = j.x + j.L->extra_offset();
  const __m256 sign = _mm256_set1_ps(-0.0f);
  TileAcc acc;
  alignas(32) int32_t scaled[kTile][kRows];
  for (int64_t b = 0; b < blocks; ++b) {
    j.next->step();
    const uint8_t* xb = j.x + static_cast<size_t>(b) * 2048;
    const size_t at0 = j.first + static_cast<size_t>(b) * kTile;
    const int32_t* sc = j.sp->sc.data() + at0 * 8;
#pragma GCC unroll 1
    for (int s = 0; s < 8; ++s) {
      __m256i x[8];
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) x[g] = load_x(xb + 256 * s + 32 * g);
      const int8_t* ws = j.w + static_cast<size_t>(8 * b + s) * kATile;
#pragma GCC unroll 1
      for (int n = 0; n < j.outputs; ++n) {
        const int8_t* wn = ws + 32 * n;
        const __m256i scale = _mm256_set1_epi32(sc[n * 8 + s]);
        __m256i sum = s == 0 ? _mm256_setzero_si256() : _mm256_load_si256(reinterpret_cast<const __m256i*>(scaled[n]));
#pragma GCC unroll 2
        for (int g0 = 0; g0 < 8; g0 += run) {
          __m256i s16 = _mm256_maddubs_epi16(bcast4(wn + 4 * g0), x[g0]);
#pragma GCC unroll 8
          for (int g = g0 + 1; g < g0 + run; ++g) s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(bcast4(wn + 4 * g), x[g]));
          sum = _mm256_add_epi32(sum, _mm256_madd_epi16(s16, scale));
        }
        _mm256_store_si256(reinterpret_cast<__m256i*>(scaled[n]), sum);
      }
    }
    const __m256 dxv = _mm256_loadu_ps(dx + b * kRows);
    const uint8_t* xs = xsum + static_cast<size_t>(b) * j.L->extra_bytes_per_block();
#pragma GCC unroll 1
    for (int n = 0; n < j.outputs; ++n) {
      const size_t at = at0 + static_cast<size_t>(n);
      const int32_t* mn = j.sp->pairs.data() + at * 4;
      __m256i mins = _mm256_setzero_si256();
#pragma GCC unroll 4
      for (int p = 0; p < 4; ++p) mins = _mm256_add_epi32(mins, _mm256_madd_epi16(load_x(xs + 32 * p), _mm256_set1_epi32(mn[p])));
      const __m256 d = _mm256_mul_ps(_mm256_set1_ps(j.c->d[at]), dxv);
      const __m256 dm = _mm256_xor_ps(_mm256_mul_ps(_mm256_set1_ps(j.c->dmin[at]), dxv), sign);
      acc.fma(n, d, _mm256_load_si256(reinterpret_cast<const __m256i*>(scaled[n])));
      acc.fma(n, dm, mins);
    }
  }
  write_outputs(acc, j);
}

// Q6_K: acc = fma(d_w·d_x, Σ_s sc_s·(Σ q·x − 32·bsum_s), acc), q = level + 32.
// As Q4_K: two 16-element sub-blocks at a time, their activations in 8 registers
// for every output, each output's Σ_s sc_s·Σ q·x built up in L1.
LOOM_QGEMM_TARGET __attribute__((noinline)) void tile_q6_K(const Tile8Job& j) {
  const int64_t blocks = j.L->blocks;
  const float* dx = reinterpret_cast<const float*>(j.x + j.L->dx_offset());
  const uint8_t* bsum = j.x + j.L->extra_offset();
  TileAcc acc;
  alignas(32) int32_t dots[kTile][kRows];
  for (int64_t b = 0; b < blocks; ++b) {
    j.next->step();
    const uint8_t* xb = j.x + static_cast<size_t>(b) * 2048;
    const size_t at0 = j.first + static_cast<size_t>(b) * kTile;
    const int32_t* sc = j.sp->sc.data() + at0 * 16;
#pragma GCC unroll 1
    for (int t = 0; t < 8; ++t) {  // sub-blocks 2t and 2t + 1: the 32-element tile t
      __m256i x[8];
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) x[g] = load_x(xb + 256 * t + 32 * g);
      const int8_t* wt = j.w + static_cast<size_t>(8 * b + t) * kATile;
#pragma GCC unroll 1
      for (int n = 0; n < j.outputs; ++n) {
        const int8_t* ws = wt + 32 * n;
        __m256i sum = t == 0 ? _mm256_setzero_si256() : _mm256_load_si256(reinterpret_cast<const __m256i*>(dots[n]));
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
          const __m256i scale = _mm256_set1_epi32(sc[n * 16 + 2 * t + h]);
          const int8_t* w = ws + 16 * h;
          const __m256i lo = _mm256_add_epi16(_mm256_maddubs_epi16(bcast4(w), x[4 * h]),
                                              _mm256_maddubs_epi16(bcast4(w + 4), x[4 * h + 1]));
          const __m256i hi = _mm256_add_epi16(_mm256_maddubs_epi16(bcast4(w + 8), x[4 * h + 2]),
                                              _mm256_maddubs_epi16(bcast4(w + 12), x[4 * h + 3]));
          sum = _mm256_add_epi32(sum, _mm256_add_epi32(_mm256_madd_epi16(lo, scale), _mm256_madd_epi16(hi, scale)));
        }
        _mm256_store_si256(reinterpret_cast<__m256i*>(dots[n]), sum);
      }
    }
    const __m256 dxv = _mm256_loadu_ps(dx + b * kRows);
    const uint8_t* bs = bsum + static_cast<size_t>(b) * j.L->extra_bytes_per_block();
#pragma GCC unroll 1
    for (int n = 0; n < j.outputs; ++n) {
      const size_t at = at0 + static_cast<size_t>(n);
      const int32_t* pairs = j.sp->pairs.data() + at * 8;
      __m256i corr = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int p = 0; p < 8; ++p) corr = _mm256_add_epi32(corr, _mm256_madd_epi16(load_x(bs + 32 * p), _mm256_set1_epi32(pairs[p])));
      const __m256i total =
          _mm256_sub_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(dots[n])), _mm256_slli_epi32(corr, 5));
      const __m256 d = _mm256_mul_ps(_mm256_set1_ps(j.c->d[at]), dxv);
      acc.fma(n, d, total);
    }
  }
  write_outputs(acc, j);
}

LOOM_QGEMM_TARGET void run_tile(DType dt, const Tile8Job& j) {
  switch (dt) {
    case DType::kQ8_0: tile_q8x32<DType::kQ8_0>(j); break;
    case DType::kQ4_0: tile_q8x32<DType::kQ4_0>(j); break;
    case DType::kQ4_K: tile_q4_K<DType::kQ4_K>(j); break;
    case DType::kQ5_K: tile_q4_K<DType::kQ5_K>(j); break;
    case DType::kQ6_K: tile_q6_K(j); break;
    default: break;
  }
}

LOOM_QGEMM_TARGET void run_chunk(const PackedLinear& w, int64_t n0, int64_t n1, const uint8_t* tiles,
                                 const Act8Layout& L, int64_t M, float* y, int64_t y_stride) {
  static thread_local WeightChunk t_chunk;
  static thread_local ScalePairs t_pairs;
  const DType dt = w.weight_dtype();
  WeightChunk& c = t_chunk;
  pack_chunk(w, n0, n1, L.blocks, level_offset(dt), c);
  build_scale_pairs(dt, c, t_pairs);
  const int64_t groups = (n1 - n0 + kTile - 1) / kTile;
  const int64_t K = w.in_features();
  // The thread's next chunk (usually), into L2 while these tiles run.
  NextChunk next = next_chunk_after(w, n0, n1, (M + kRows - 1) / kRows * groups * L.blocks);
  for (int64_t m0 = 0; m0 < M; m0 += kRows) {
    const uint8_t* x = tiles + static_cast<size_t>(m0 / kRows) * L.tile_bytes();
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t first = n0 + g * kTile;
      Tile8Job j;
      j.next = &next;
      j.w = c.levels.data() + static_cast<size_t>(g * kTile) * static_cast<size_t>(K);
      j.x = x;
      j.L = &L;
      j.c = &c;
      j.sp = &t_pairs;
      j.first = static_cast<size_t>(g * L.blocks) * kTile;
      j.rows = static_cast<int>(std::min<int64_t>(kRows, M - m0));
      j.outputs = static_cast<int>(std::min<int64_t>(kTile, n1 - first));
      j.bias = w.bias() ? w.bias() + first : nullptr;
      j.y = y + m0 * y_stride + first;
      j.ldy = y_stride;
      run_tile(dt, j);
    }
  }
}

}  // namespace

bool avx2_tiles_usable() {
  const CpuFeatures& f = cpu_features();
  return f.avx2 && f.fma && f.f16c;
}

void linear_quantized_avx2(const uint8_t* act, size_t act_row_bytes, int64_t M, const PackedLinear& w, float* y,
                           int64_t y_stride, ThreadPool& pool) {
  Act8Layout L;
  L.dt = w.weight_dtype();
  L.K = w.in_features();
  L.blocks = L.K / dtype_block_elements(L.dt);
  const int64_t tiles = (M + kRows - 1) / kRows;
  uint8_t* tile_data = act_tile_buffer(static_cast<size_t>(tiles) * L.tile_bytes());
  pool.parallel_for(tiles, [&](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t) {
      const int rows = static_cast<int>(std::min<int64_t>(kRows, M - t * kRows));
      build_act8_tile(act + static_cast<size_t>(t * kRows) * act_row_bytes, act_row_bytes, rows, L,
                      tile_data + static_cast<size_t>(t) * L.tile_bytes());
    }
  });
  const int64_t N = w.out_features();
  const int64_t chunk_outputs = tile_chunk_outputs(L.K, N, pool.num_threads());
  share_chunks(pool, N, chunk_outputs, [&](int64_t n0, int64_t n1) {
    run_chunk(w, n0, n1, tile_data, L, M, y, y_stride);
  });
}

#else

bool avx2_tiles_usable() { return false; }

void linear_quantized_avx2(const uint8_t*, size_t, int64_t, const PackedLinear&, float*, int64_t, ThreadPool&) {
  throw Error(unsupported("linear: the AVX2 tiles are not available in this build"));
}

#endif

}  // namespace loom::cpu::detail
