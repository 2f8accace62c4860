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

// Four lanes a vector (GCC/Clang vector extensions, baseline SSE2) for the searches
// over all sub-blocks of a block at once; every lane does the scalar search's
// operations in its order, so results are the same to the bit.
using f4 = float __attribute__((vector_size(16)));
using i4 = int32_t __attribute__((vector_size(16)));
f4 splat4(float v) { return f4{v, v, v, v}; }
f4 load4(const float* p) {
  f4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
void store4(float* p, f4 v) { std::memcpy(p, &v, sizeof v); }
i4 load4(const int32_t* p) {
  i4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
void store4(int32_t* p, i4 v) { std::memcpy(p, &v, sizeof v); }
// round_to_int of v clamped to [lo, hi] (integers): the same as clamping the rounded
// value, and it keeps every lane where the 1.5·2^23 shift rounds exactly.
i4 round_clamped4(f4 v, f4 lo, f4 hi) {
  v = v < lo ? lo : v;
  v = v > hi ? hi : v;
  const f4 shifted = v + splat4(12582912.0f);
  i4 bits;
  std::memcpy(&bits, &shifted, sizeof bits);
  return (bits & 0x007fffff) - 0x00400000;
}

// search_scale_symmetric(16, nmax, ...) on the 16 sub-blocks of a 256-element block
// at once, sub-block s in lane s (the scalar search was most of quantizing a model's
// Q6_K tensors).
void search_scales_symmetric16(const float* x, int nmax, int8_t* L, float* scales) {
  constexpr int kLanes = 16, kN = 16;
  // Transposed, element i of every sub-block in a row: the loops over lanes then read
  // and write contiguous floats and ints (no char stores, which may alias anything).
  float xt[kN][kLanes];
  for (int s = 0; s < kLanes; ++s)
    for (int i = 0; i < kN; ++i) xt[i][s] = x[kN * s + i];
  float amax[kLanes] = {}, extreme[kLanes] = {};
  for (int i = 0; i < kN; ++i)
    for (int s = 0; s < kLanes; ++s) {
      const float v = xt[i][s], a = std::fabs(v);
      extreme[s] = a > amax[s] ? v : extreme[s];
      amax[s] = a > amax[s] ? a : amax[s];
    }
  bool live[kLanes];
  for (int s = 0; s < kLanes; ++s) {
    live[s] = !(amax[s] < kGroupMaxEps);
    if (!live[s]) extreme[s] = -static_cast<float>(nmax);  // finite trial values; the lane is zeroed at the end
  }
  float sum_lx[kLanes], sum_l2[kLanes], best[kLanes], iscale[kLanes];
  int32_t trial[kN][kLanes], kept[kN][kLanes];
  int32_t take[kLanes];
  const float lo = static_cast<float>(-nmax), hi = static_cast<float>(nmax - 1);
  for (int is = -10; is <= 9; ++is) {  // -10: the first guess, nmax / extreme
    if (is == 0) continue;
    const float step = is == -10 ? 0.0f : 0.1f * is;
    for (int s = 0; s < kLanes; ++s) {
      iscale[s] = is == -10 ? -nmax / extreme[s] : -(nmax + step) / extreme[s];
    }
    for (int q = 0; q < kLanes / 4; ++q) {
      const f4 sc = load4(iscale + 4 * q);
      f4 lx = splat4(0), l2 = splat4(0);
      for (int i = 0; i < kN; ++i) {
        const f4 v = load4(&xt[i][4 * q]);
        const i4 l = round_clamped4(sc * v, splat4(lo), splat4(hi));
        store4(&trial[i][4 * q], l + nmax);
        const f4 lf = __builtin_convertvector(l, f4);
        const f4 w = v * v;
        lx += w * v * lf;
        l2 += w * lf * lf;
      }
      store4(sum_lx + 4 * q, lx);
      store4(sum_l2 + 4 * q, l2);
    }
    for (int s = 0; s < kLanes; ++s) {
      if (is == -10) {
        scales[s] = sum_l2[s] != 0 ? sum_lx[s] / sum_l2[s] : 0.0f;
        best[s] = scales[s] * sum_lx[s];
        take[s] = 1;
      } else {
        take[s] = sum_l2[s] > 0 && sum_lx[s] * sum_lx[s] > best[s] * sum_l2[s];
        if (take[s]) {
          scales[s] = sum_lx[s] / sum_l2[s];
          best[s] = scales[s] * sum_lx[s];
        }
      }
    }
    for (int i = 0; i < kN; ++i)
      for (int s = 0; s < kLanes; ++s) kept[i][s] = take[s] ? trial[i][s] : kept[i][s];
  }
  for (int s = 0; s < kLanes; ++s) {
    for (int i = 0; i < kN; ++i) L[kN * s + i] = live[s] ? static_cast<int8_t>(kept[i][s]) : 0;
    if (!live[s]) scales[s] = 0.0f;
  }
}

// search_scale_min(32, nmax, ...) on the 8 sub-blocks of a 256-element block at
// once, sub-block s in lane s.
void search_scales_min8(const float* x, const float* w, int nmax, uint8_t* L, float* scales, float* mins, float rmin,
                        float rdelta, int nstep) {
  constexpr int kLanes = 8, kN = 32;
  float xt[kN][kLanes], wt[kN][kLanes];
  for (int s = 0; s < kLanes; ++s)
    for (int i = 0; i < kN; ++i) {
      xt[i][s] = x[kN * s + i];
      wt[i][s] = w[kN * s + i];
    }
  float lo[kLanes], hi[kLanes], sum_w[kLanes] = {}, sum_x[kLanes] = {};
  for (int s = 0; s < kLanes; ++s) lo[s] = hi[s] = xt[0][s];
  for (int i = 0; i < kN; ++i)
    for (int s = 0; s < kLanes; ++s) {
      lo[s] = std::min(lo[s], xt[i][s]);
      hi[s] = std::max(hi[s], xt[i][s]);
      sum_w[s] += wt[i][s];
      sum_x[s] += wt[i][s] * xt[i][s];
    }
  bool flat[kLanes];
  float range[kLanes], iscale[kLanes], scale[kLanes], best_min[kLanes], best_error[kLanes];
  for (int s = 0; s < kLanes; ++s) {
    if (lo[s] > 0) lo[s] = 0;
    flat[s] = hi[s] == lo[s];
    range[s] = flat[s] ? 1.0f : hi[s] - lo[s];  // finite trial values; the lane is set at the end
  }
  const f4 zero = splat4(0), top = splat4(static_cast<float>(nmax));
  // Levels of x at iscale: round_to_int(iscale * (x - lo)) clamped to 0..nmax.
  const auto levels = [&](f4 sc, f4 vlo, f4 v) { return round_clamped4(sc * (v - vlo), zero, top); };
  int32_t kept[kN][kLanes], trial[kN][kLanes];
  for (int s = 0; s < kLanes; ++s) {
    iscale[s] = nmax / range[s];
    scale[s] = 1.0f / iscale[s];
  }
  for (int q = 0; q < kLanes / 4; ++q) {
    const f4 sc = load4(iscale + 4 * q), vlo = load4(lo + 4 * q), vscale = load4(scale + 4 * q);
    f4 err = zero;
    for (int i = 0; i < kN; ++i) {
      const f4 v = load4(&xt[i][4 * q]), wv = load4(&wt[i][4 * q]);
      const i4 l = levels(sc, vlo, v);
      store4(&kept[i][4 * q], l);
      const f4 diff = vscale * __builtin_convertvector(l, f4) + vlo - v;
      err += wv * diff * diff;
    }
    store4(best_error + 4 * q, err);
  }
  for (int s = 0; s < kLanes; ++s) best_min[s] = lo[s];
  float sum_l[kLanes], sum_l2[kLanes], sum_xl[kLanes], this_scale[kLanes], this_min[kLanes], trial_error[kLanes];
  bool ok[kLanes];
  for (int is = 0; is <= nstep; ++is) {
    for (int s = 0; s < kLanes; ++s) iscale[s] = (rmin + rdelta * is + nmax) / range[s];
    for (int q = 0; q < kLanes / 4; ++q) {
      const f4 sc = load4(iscale + 4 * q), vlo = load4(lo + 4 * q);
      f4 sl = zero, sl2 = zero, sxl = zero;
      for (int i = 0; i < kN; ++i) {
        const f4 v = load4(&xt[i][4 * q]), wv = load4(&wt[i][4 * q]);
        const i4 l = levels(sc, vlo, v);
        store4(&trial[i][4 * q], l);
        const f4 lf = __builtin_convertvector(l, f4);
        sl += wv * lf;
        sl2 += wv * lf * lf;
        sxl += wv * lf * v;
      }
      store4(sum_l + 4 * q, sl);
      store4(sum_l2 + 4 * q, sl2);
      store4(sum_xl + 4 * q, sxl);
    }
    for (int s = 0; s < kLanes; ++s) {
      const float det = sum_w[s] * sum_l2[s] - sum_l[s] * sum_l[s];
      ok[s] = det > 0;
      this_scale[s] = ok[s] ? (sum_w[s] * sum_xl[s] - sum_x[s] * sum_l[s]) / det : 0.0f;
      this_min[s] = ok[s] ? (sum_l2[s] * sum_x[s] - sum_l[s] * sum_xl[s]) / det : 0.0f;
      if (ok[s] && this_min[s] > 0) {
        this_min[s] = 0;
        this_scale[s] = sum_xl[s] / sum_l2[s];
      }
    }
    for (int q = 0; q < kLanes / 4; ++q) {
      const f4 vs = load4(this_scale + 4 * q), vm = load4(this_min + 4 * q);
      f4 err = zero;
      for (int i = 0; i < kN; ++i) {
        const f4 lf = __builtin_convertvector(load4(&trial[i][4 * q]), f4);
        const f4 diff = vs * lf + vm - load4(&xt[i][4 * q]);
        err += load4(&wt[i][4 * q]) * diff * diff;
      }
      store4(trial_error + 4 * q, err);
    }
    bool take[kLanes];
    for (int s = 0; s < kLanes; ++s) {
      take[s] = ok[s] && trial_error[s] < best_error[s];
      if (take[s]) {
        best_error[s] = trial_error[s];
        scale[s] = this_scale[s];
        best_min[s] = this_min[s];
      }
    }
    for (int i = 0; i < kN; ++i)
      for (int s = 0; s < kLanes; ++s) kept[i][s] = take[s] ? trial[i][s] : kept[i][s];
  }
  for (int s = 0; s < kLanes; ++s) {
    for (int i = 0; i < kN; ++i) L[kN * s + i] = flat[s] ? 0 : static_cast<uint8_t>(kept[i][s]);
    scales[s] = flat[s] ? 0.0f : scale[s];
    mins[s] = flat[s] ? -lo[s] : -best_min[s];
  }
}

// Shared by Q4_K and Q5_K: levels L[256] in 0..nmax, and the 6-bit scales/mins
// with their f16 super-scales written into (d, dmin, scales).
// kLanes: the eight sub-blocks' searches at once (search_scales_min8), else one at a
// time (the reference).
template <bool kLanes>
void quantize_k_asym(const float* x, int nmax, float rmin, float rdelta, int nstep, uint8_t* L, uint16_t* d_out,
                     uint16_t* dmin_out, uint8_t* packed) {
  float scales[8], mins[8], weights[256];
  uint8_t trial[32];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[32 * j + l] = av_x + std::fabs(xs[l]);
    if constexpr (!kLanes)
      scales[j] = search_scale_min(32, nmax, xs, weights + 32 * j, L + 32 * j, &mins[j], trial, rmin, rdelta, nstep);
  }
  if constexpr (kLanes) search_scales_min8(x, weights, nmax, L, scales, mins, rmin, rdelta, nstep);
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
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    unpack_scale_min_k4(j, packed, &sc, &m);
    const float ds = d * sc;
    if (ds == 0.0f) continue;
    const float dm = dmin * m;
    for (int l = 0; l < 32; ++l) {
      L[32 * j + l] = static_cast<uint8_t>(std::clamp(round_to_int((x[32 * j + l] + dm) / ds), 0, nmax));
    }
  }
}

}  // namespace

template <bool kLanes>
void quantize_q4_k_blocks(const float* x, BlockQ4_K* y, int64_t nblocks) {
  uint8_t L[256];
  for (int64_t b = 0; b < nblocks; ++b, x += 256) {
    quantize_k_asym<kLanes>(x, 15, -1.0f, 0.1f, 20, L, &y[b].d, &y[b].dmin, y[b].scales);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) y[b].qs[32 * c + l] = static_cast<uint8_t>(L[64 * c + l] | (L[64 * c + l + 32] << 4));
    }
  }
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
  uint8_t L[256];
  for (int64_t b = 0; b < nblocks; ++b, x += 256) {
    quantize_k_asym<kLanes>(x, 31, -0.5f, 0.1f, 15, L, &y[b].d, &y[b].dmin, y[b].scales);
    std::memset(y[b].qh, 0, 32);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const int lo = L[64 * c + l], hi = L[64 * c + l + 32];
        if (lo > 15) y[b].qh[l] |= static_cast<uint8_t>(1u << (2 * c));
        if (hi > 15) y[b].qh[l] |= static_cast<uint8_t>(2u << (2 * c));
        y[b].qs[32 * c + l] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
      }
    }
  }
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
    for (int s = 0; s < 16; ++s) {
      const float ds = d * y[b].scales[s];
      if (ds == 0.0f) continue;
      for (int i = 0; i < 16; ++i) {
        L[16 * s + i] = static_cast<int8_t>(std::clamp(round_to_int(x[16 * s + i] / ds), -32, 31) + 32);
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
