// Q4_K, Q5_K and Q6_K row codecs. The quantizers follow llama.cpp's reference
// ones: per sub-block an error-weighted search for scale and min (Q4_K/Q5_K) or
// scale (Q6_K), then the sub-block scales quantized to 6 / 8 bits against one
// f16 super-scale, then every element re-rounded against the scale it will
// actually be decoded with.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "quantize_k.h"

namespace loom::detail {
namespace {

constexpr float kGroupMaxEps = 1e-15f;

// Asymmetric grid search: x ≈ scale·L − min_out, L in 0..nmax, minimizing
// Σ w·(scale·L + min − x)² over nstep + 1 trial inverse scales around nmax/range,
// each refined by weighted least squares. Returns the scale, min as a positive offset.
float search_scale_min(int n, int nmax, const float* x, const float* w, uint8_t* L, float* min_out, uint8_t* trial,
                       float rmin, float rdelta, int nstep) {
  float lo = x[0], hi = x[0];
  float sum_w = w[0], sum_x = w[0] * x[0];
  for (int i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (lo > 0) lo = 0;
  if (hi == lo) {
    std::memset(L, 0, static_cast<size_t>(n));
    *min_out = -lo;
    return 0.0f;
  }
  float iscale = nmax / (hi - lo);
  float scale = 1.0f / iscale;
  float best_error = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = std::clamp(round_to_int(iscale * (x[i] - lo)), 0, nmax);
    L[i] = static_cast<uint8_t>(l);
    const float diff = scale * l + lo - x[i];
    best_error += w[i] * diff * diff;
  }
  float best_min = lo;
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (hi - lo);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(round_to_int(iscale * (x[i] - lo)), 0, nmax);
      trial[i] = static_cast<uint8_t>(l);
      sum_l += w[i] * l;
      sum_l2 += w[i] * l * l;
      sum_xl += w[i] * l * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (det <= 0) continue;
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (this_min > 0) {
      this_min = 0;
      this_scale = sum_xl / sum_l2;
    }
    float err = 0;
    for (int i = 0; i < n; ++i) {
      const float diff = this_scale * trial[i] + this_min - x[i];
      err += w[i] * diff * diff;
    }
    if (err < best_error) {
      std::memcpy(L, trial, static_cast<size_t>(n));
      best_error = err;
      scale = this_scale;
      best_min = this_min;
    }
  }
  *min_out = -best_min;
  return scale;
}

// Symmetric grid search with weights x²: x ≈ scale·(L − nmax), L − nmax in
// −nmax..nmax−1, the value of largest magnitude on the grid's long side; 18
// trial scales around it, keeping the one of largest Σ(x·l)²/Σl² (least squares).
float search_scale_symmetric(int n, int nmax, const float* x, int8_t* L) {
  float amax = 0, extreme = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      extreme = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    std::memset(L, 0, static_cast<size_t>(n));
    return 0.0f;
  }
  float iscale = -nmax / extreme;
  float sum_lx = 0, sum_l2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::clamp(round_to_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = x[i] * x[i];
    sum_lx += w * x[i] * l;
    sum_l2 += w * l * l;
  }
  float scale = sum_l2 != 0 ? sum_lx / sum_l2 : 0.0f;
  float best = scale * sum_lx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(nmax + 0.1f * is) / extreme;
    sum_lx = sum_l2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(round_to_int(iscale * x[i]), -nmax, nmax - 1);
      const float w = x[i] * x[i];
      sum_lx += w * x[i] * l;
      sum_l2 += w * l * l;
    }
    if (sum_l2 > 0 && sum_lx * sum_lx > best * sum_l2) {
      for (int i = 0; i < n; ++i) {
        L[i] = static_cast<int8_t>(nmax + std::clamp(round_to_int(iscale * x[i]), -nmax, nmax - 1));
      }
      scale = sum_lx / sum_l2;
      best = scale * sum_lx;
    }
  }
  return scale;
}

// Shared by Q4_K and Q5_K. The searches of up to two blocks' sub-blocks: levels
// L[256·count] in 0..nmax, scales and mins [8·count]. kLanes: all sixteen at once
// (search_scales_min16; a lone block is padded with zero sub-blocks, whose lanes are
// dropped), else one at a time (the reference).
template <bool kLanes>
void search_k_asym(const float* x, int count, int nmax, float rmin, float rdelta, int nstep, uint8_t* L,
                   float* scales, float* mins) {
  alignas(64) float weights[512] = {};
  for (int j = 0; j < 8 * count; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[32 * j + l] = av_x + std::fabs(xs[l]);
  }
  if constexpr (kLanes) {
    if (count == 2) {
      search_scales_min16(x, weights, nmax, L, scales, mins, rmin, rdelta, nstep);
      return;
    }
    alignas(64) float padded[512] = {};
    std::memcpy(padded, x, 256 * sizeof(float));
    uint8_t levels[512];
    float s16[16], m16[16];
    search_scales_min16(padded, weights, nmax, levels, s16, m16, rmin, rdelta, nstep);
    std::memcpy(L, levels, 256);
    std::memcpy(scales, s16, 8 * sizeof(float));
    std::memcpy(mins, m16, 8 * sizeof(float));
  } else {
    uint8_t trial[32];
    for (int j = 0; j < 8 * count; ++j) {
      scales[j] = search_scale_min(32, nmax, x + 32 * j, weights + 32 * j, L + 32 * j, &mins[j], trial, rmin, rdelta,
                                   nstep);
    }
  }
}

// One block's 6-bit scales/mins and f16 super-scales (d, dmin, packed) from its
// searches, and its levels L[256] re-rounded against the scales they decode with
// (kLanes: on SIMD vectors, round_levels; else the reference's loop).
template <bool kLanes>
void pack_k_asym(const float* x, int nmax, const float* scales, const float* mins, uint8_t* L, uint16_t* d_out,
                 uint16_t* dmin_out, uint8_t* packed) {
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  std::memset(packed, 0, 12);
  for (int j = 0; j < 8; ++j) {
    const int ls = std::min(63, round_to_int(inv_scale * scales[j]));
    const int lm = std::min(63, round_to_int(inv_min * mins[j]));
    if (j < 4) {
      packed[j] = static_cast<uint8_t>(ls);
      packed[j + 4] = static_cast<uint8_t>(lm);
    } else {
      packed[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      packed[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      packed[j] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
  *d_out = f32_to_f16(max_scale / 63.0f);
  *dmin_out = f32_to_f16(max_min / 63.0f);
  const float d = f16_to_f32(*d_out), dmin = f16_to_f32(*dmin_out);
  float ds[8], dm[8];
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    unpack_scale_min_k4(j, packed, &sc, &m);
    ds[j] = d * sc;
    dm[j] = dmin * m;
  }
  if constexpr (kLanes) {
    round_levels(x, 32, 8, ds, dm, 0, nmax, 0, L);
    return;
  }
  for (int j = 0; j < 8; ++j) {
    if (ds[j] == 0.0f) continue;
    for (int l = 0; l < 32; ++l) {
      L[32 * j + l] = static_cast<uint8_t>(std::clamp(round_to_int((x[32 * j + l] + dm[j]) / ds[j]), 0, nmax));
    }
  }
}

// Each block's scales packed, then pack_levels(L, block) stores its levels; the
// searches run two blocks at a time.
template <bool kLanes, typename Block, typename PackLevels>
void quantize_k_asym_blocks(const float* x, Block* y, int64_t nblocks, int nmax, float rmin, float rdelta, int nstep,
                            PackLevels pack_levels) {
  uint8_t L[512];
  float scales[16], mins[16];
  for (int64_t b = 0; b < nblocks; b += 2) {
    const int count = nblocks - b >= 2 ? 2 : 1;
    search_k_asym<kLanes>(x + 256 * b, count, nmax, rmin, rdelta, nstep, L, scales, mins);
    for (int c = 0; c < count; ++c) {
      Block& out = y[b + c];
      pack_k_asym<kLanes>(x + 256 * (b + c), nmax, scales + 8 * c, mins + 8 * c, L + 256 * c, &out.d, &out.dmin, out.scales);
      pack_levels(L + 256 * c, out);
    }
  }
}

}  // namespace

template <bool kLanes>
void quantize_q4_k_blocks(const float* x, BlockQ4_K* y, int64_t nblocks) {
  quantize_k_asym_blocks<kLanes>(x, y, nblocks, 15, -1.0f, 0.1f, 20, [](const uint8_t* L, BlockQ4_K& out) {
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) out.qs[32 * c + l] = static_cast<uint8_t>(L[64 * c + l] | (L[64 * c + l + 32] << 4));
    }
  });
}

void quantize_q4_k(const float* x, BlockQ4_K* y, int64_t nblocks) { quantize_q4_k_blocks<true>(x, y, nblocks); }
void quantize_q4_k_ref(const float* x, BlockQ4_K* y, int64_t nblocks) { quantize_q4_k_blocks<false>(x, y, nblocks); }

void dequantize_q4_k(const BlockQ4_K* x, float* y, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b) {
    const float d = f16_to_f32(x[b].d), dmin = f16_to_f32(x[b].dmin);
    const uint8_t* q = x[b].qs;
    for (int c = 0; c < 4; ++c, q += 32) {
      uint8_t sc, m;
      unpack_scale_min_k4(2 * c, x[b].scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      unpack_scale_min_k4(2 * c + 1, x[b].scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
    }
  }
}

template <bool kLanes>
void quantize_q5_k_blocks(const float* x, BlockQ5_K* y, int64_t nblocks) {
  quantize_k_asym_blocks<kLanes>(x, y, nblocks, 31, -0.5f, 0.1f, 15, [](const uint8_t* L, BlockQ5_K& out) {
    std::memset(out.qh, 0, 32);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const int lo = L[64 * c + l], hi = L[64 * c + l + 32];
        if (lo > 15) out.qh[l] |= static_cast<uint8_t>(1u << (2 * c));
        if (hi > 15) out.qh[l] |= static_cast<uint8_t>(2u << (2 * c));
        out.qs[32 * c + l] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
      }
    }
  });
}

void quantize_q5_k(const float* x, BlockQ5_K* y, int64_t nblocks) { quantize_q5_k_blocks<true>(x, y, nblocks); }
void quantize_q5_k_ref(const float* x, BlockQ5_K* y, int64_t nblocks) { quantize_q5_k_blocks<false>(x, y, nblocks); }

void dequantize_q5_k(const BlockQ5_K* x, float* y, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b) {
    const float d = f16_to_f32(x[b].d), dmin = f16_to_f32(x[b].dmin);
    const uint8_t* q = x[b].qs;
    const uint8_t* qh = x[b].qh;
    for (int c = 0; c < 4; ++c, q += 32) {
      uint8_t sc, m;
      unpack_scale_min_k4(2 * c, x[b].scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      unpack_scale_min_k4(2 * c + 1, x[b].scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      const uint8_t u1 = static_cast<uint8_t>(1u << (2 * c)), u2 = static_cast<uint8_t>(2u << (2 * c));
      for (int l = 0; l < 32; ++l) *y++ = d1 * ((q[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * ((q[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
    }
  }
}

// Q6_K layout: two halves of 128 elements; in half h, for l in 0..31, ql[64h + l]
// holds elements l (low nibble) and l + 64 (high), ql[64h + l + 32] elements l + 32
// and l + 96, and qh[32h + l] the top 2 bits of l, l + 32, l + 64, l + 96 (bits 0-1,
// 2-3, 4-5, 6-7). Sub-block s covers elements 16s..16s+15.
template <bool kLanes>
void quantize_q6_k_blocks(const float* x, BlockQ6_K* y, int64_t nblocks) {
  int8_t L[256];
  float scales[16];
  for (int64_t b = 0; b < nblocks; ++b, x += 256) {
    float max_scale = 0, max_abs = 0;
    if constexpr (kLanes) {
      search_scales_symmetric16(x, 32, L, scales);
    } else {
      for (int s = 0; s < 16; ++s) scales[s] = search_scale_symmetric(16, 32, x + 16 * s, L + 16 * s);
    }
    for (int s = 0; s < 16; ++s) {
      if (std::fabs(scales[s]) > max_abs) {
        max_abs = std::fabs(scales[s]);
        max_scale = scales[s];
      }
    }
    if (max_abs < kGroupMaxEps) {
      std::memset(&y[b], 0, sizeof(BlockQ6_K));
      continue;
    }
    const float iscale = -128.0f / max_scale;
    y[b].d = f32_to_f16(1.0f / iscale);
    for (int s = 0; s < 16; ++s) y[b].scales[s] = static_cast<int8_t>(std::min(127, round_to_int(iscale * scales[s])));
    const float d = f16_to_f32(y[b].d);
    float ds[16];
    for (int s = 0; s < 16; ++s) ds[s] = d * y[b].scales[s];
    if constexpr (kLanes) {
      static constexpr float kNoOffset[16] = {};
      round_levels(x, 16, 16, ds, kNoOffset, -32, 31, 32, reinterpret_cast<uint8_t*>(L));
    } else {
      for (int s = 0; s < 16; ++s) {
        if (ds[s] == 0.0f) continue;
        for (int i = 0; i < 16; ++i) {
          L[16 * s + i] = static_cast<int8_t>(std::clamp(round_to_int(x[16 * s + i] / ds[s]), -32, 31) + 32);
        }
      }
    }
    for (int h = 0; h < 2; ++h) {
      const int8_t* Lh = L + 128 * h;
      uint8_t* ql = y[b].ql + 64 * h;
      uint8_t* qh = y[b].qh + 32 * h;
      for (int l = 0; l < 32; ++l) {
        ql[l] = static_cast<uint8_t>((Lh[l] & 0xF) | ((Lh[l + 64] & 0xF) << 4));
        ql[l + 32] = static_cast<uint8_t>((Lh[l + 32] & 0xF) | ((Lh[l + 96] & 0xF) << 4));
        qh[l] = static_cast<uint8_t>((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) | ((Lh[l + 64] >> 4) << 4) |
                                     ((Lh[l + 96] >> 4) << 6));
      }
    }
  }
}

void quantize_q6_k(const float* x, BlockQ6_K* y, int64_t nblocks) { quantize_q6_k_blocks<true>(x, y, nblocks); }
void quantize_q6_k_ref(const float* x, BlockQ6_K* y, int64_t nblocks) { quantize_q6_k_blocks<false>(x, y, nblocks); }

void dequantize_q6_k(const BlockQ6_K* x, float* y, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b) {
    const float d = f16_to_f32(x[b].d);
    for (int h = 0; h < 2; ++h, y += 128) {
      const uint8_t* ql = x[b].ql + 64 * h;
      const uint8_t* qh = x[b].qh + 32 * h;
      const int8_t* sc = x[b].scales + 8 * h;
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * sc[is] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
    }
  }
}

}  // namespace loom::detail
