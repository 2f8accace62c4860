// The K quantizers' scale searches over 16 sub-blocks at once, sub-block s in lane
// s: one Q6_K block's 16, or two Q4_K/Q5_K blocks' 8 each; and the levels against
// the scales found, a sub-block's elements in the lanes. Every lane does the
// scalar search's (quantize_k.cc) operations in its order, so the bytes are the
// same as the references'; -ffp-contract=off (CMakeLists.txt) keeps a·b + c from
// becoming an FMA the reference does not do.
//
// Written with GCC/Clang vector extensions of the target's width (16 lanes on
// AVX-512, 8 on AVX2, else 4), a chunk of lanes at a time, and compiled once per
// Highway target (foreach_target, dispatched like the runtime's Highway kernels, so
// LOOM_FORCE_ISA reaches it). On four-lane vectors everywhere the searches were most
// of quantizing a 1B model's weights at load. Wider vectors than the target's are no
// shortcut: GCC lowers their comparisons and selects element by element.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/quantize_k.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "core/quantize_k_search.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace loom::detail {
namespace HWY_NAMESPACE {

constexpr int kLanes = 16;
constexpr int kW = HWY_TARGET <= HWY_AVX3 ? 16 : HWY_TARGET <= HWY_AVX2 ? 8 : 4;
using fv = float __attribute__((vector_size(4 * kW)));
using iv = int32_t __attribute__((vector_size(4 * kW)));

// -Wno-psabi (CMakeLists.txt) silences GCC's note that wide vectors pass differently
// per target (they never cross a non-inlined call).
HWY_INLINE fv splat(float v) { return fv{} + v; }
HWY_INLINE fv load(const float* p) {
  fv v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
HWY_INLINE iv load(const int32_t* p) {
  iv v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
HWY_INLINE void store(float* p, fv v) { std::memcpy(p, &v, sizeof v); }
HWY_INLINE void store(int32_t* p, iv v) { std::memcpy(p, &v, sizeof v); }
HWY_INLINE fv to_float(iv v) { return __builtin_convertvector(v, fv); }
HWY_INLINE fv abs(fv v) {
  iv bits;
  std::memcpy(&bits, &v, sizeof bits);
  bits &= 0x7fffffff;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}
// round_to_int of v clamped to [lo, hi] (integers): the same as clamping the rounded
// value, and it keeps every lane where the 1.5·2^23 shift rounds exactly.
HWY_INLINE iv round_clamped(fv v, fv lo, fv hi) {
  v = v < lo ? lo : v;
  v = v > hi ? hi : v;
  const fv shifted = v + splat(12582912.0f);
  iv bits;
  std::memcpy(&bits, &shifted, sizeof bits);
  return (bits & 0x007fffff) - 0x00400000;
}

// search_scale_symmetric(16, nmax, ...) on the 16 sub-blocks of a 256-element block.
void SearchScalesSymmetric16(const float* x, int nmax, int8_t* L, float* scales) {
  constexpr int kN = 16;
  // Transposed, element i of every sub-block in a row.
  alignas(64) float xt[kN][kLanes];
  for (int s = 0; s < kLanes; ++s)
    for (int i = 0; i < kN; ++i) xt[i][s] = x[kN * s + i];
  alignas(64) int32_t trial[kN][kLanes], kept[kN][kLanes];
  alignas(64) int32_t live_lanes[kLanes];
#pragma GCC unroll 4
  for (int q = 0; q < kLanes; q += kW) {
    fv amax = splat(0), extreme = splat(0);
    for (int i = 0; i < kN; ++i) {
      const fv v = load(xt[i] + q), a = abs(v);
      const iv gt = a > amax;
      extreme = gt ? v : extreme;
      amax = gt ? a : amax;
    }
    const iv live = !(amax < splat(1e-15f));  // kGroupMaxEps
    extreme = live ? extreme : splat(-static_cast<float>(nmax));  // finite trials; the lane is zeroed at the end
    const fv lo = splat(static_cast<float>(-nmax)), hi = splat(static_cast<float>(nmax - 1));
    fv scale = splat(0), best = splat(0);
    for (int is = -10; is <= 9; ++is) {  // -10: the first guess, nmax / extreme
      if (is == 0) continue;
      const fv iscale = is == -10 ? splat(static_cast<float>(-nmax)) / extreme
                                  : -(splat(static_cast<float>(nmax)) + splat(0.1f * static_cast<float>(is))) / extreme;
      fv lx = splat(0), l2 = splat(0);
      for (int i = 0; i < kN; ++i) {
        const fv v = load(xt[i] + q);
        const iv l = round_clamped(iscale * v, lo, hi);
        store(trial[i] + q, l + nmax);
        const fv lf = to_float(l);
        const fv w = v * v;
        lx += w * v * lf;
        l2 += w * lf * lf;
      }
      iv take;
      if (is == -10) {
        scale = l2 != splat(0) ? lx / l2 : splat(0);
        best = scale * lx;
        take = iv{} - 1;
      } else {
        take = (l2 > splat(0)) & (lx * lx > best * l2);
        scale = take ? lx / l2 : scale;
        best = take ? scale * lx : best;
      }
      for (int i = 0; i < kN; ++i) store(kept[i] + q, take ? load(trial[i] + q) : load(kept[i] + q));
    }
    store(scales + q, live ? scale : splat(0));
    store(live_lanes + q, live);
  }
  for (int s = 0; s < kLanes; ++s)
    for (int i = 0; i < kN; ++i) L[kN * s + i] = live_lanes[s] ? static_cast<int8_t>(kept[i][s]) : 0;
}

// search_scale_min(32, nmax, ...) on 16 sub-blocks of 32 (two Q4_K/Q5_K blocks).
void SearchScalesMin16(const float* x, const float* w, int nmax, uint8_t* L, float* scales, float* mins, float rmin,
                       float rdelta, int nstep) {
  constexpr int kN = 32;
  alignas(64) float xt[kN][kLanes], wt[kN][kLanes];
  for (int s = 0; s < kLanes; ++s)
    for (int i = 0; i < kN; ++i) {
      xt[i][s] = x[kN * s + i];
      wt[i][s] = w[kN * s + i];
    }
  alignas(64) int32_t kept[kN][kLanes], trial[kN][kLanes];
  alignas(64) int32_t flat_lanes[kLanes];
#pragma GCC unroll 4
  for (int q = 0; q < kLanes; q += kW) {
    fv lo = load(xt[0] + q), hi = lo, sum_w = load(wt[0] + q), sum_x = sum_w * lo;
    for (int i = 1; i < kN; ++i) {
      const fv v = load(xt[i] + q), wv = load(wt[i] + q);
      lo = v < lo ? v : lo;  // std::min(lo, v): lo unless v is smaller
      hi = hi < v ? v : hi;  // std::max(hi, v)
      sum_w += wv;
      sum_x += wv * v;
    }
    const fv zero = splat(0), top = splat(static_cast<float>(nmax));
    lo = lo > zero ? zero : lo;
    const iv flat = hi == lo;
    const fv range = flat ? splat(1) : hi - lo;  // finite trial values; the lane is set at the end
    // Levels of x at iscale: round_to_int(iscale * (x - lo)) clamped to 0..nmax.
    const auto levels = [&](fv sc, fv v) { return round_clamped(sc * (v - lo), zero, top); };
    fv iscale = top / range;
    fv scale = splat(1) / iscale;
    fv best_error = zero;
    for (int i = 0; i < kN; ++i) {
      const fv v = load(xt[i] + q);
      const iv l = levels(iscale, v);
      store(kept[i] + q, l);
      const fv diff = scale * to_float(l) + lo - v;
      best_error += load(wt[i] + q) * diff * diff;
    }
    fv best_min = lo;
    for (int is = 0; is <= nstep; ++is) {
      iscale = (splat(rmin + rdelta * static_cast<float>(is)) + top) / range;
      fv sl = zero, sl2 = zero, sxl = zero;
      for (int i = 0; i < kN; ++i) {
        const fv v = load(xt[i] + q), wv = load(wt[i] + q);
        const iv l = levels(iscale, v);
        store(trial[i] + q, l);
        const fv lf = to_float(l);
        sl += wv * lf;
        sl2 += wv * lf * lf;
        sxl += wv * lf * v;
      }
      const fv det = sum_w * sl2 - sl * sl;
      const iv ok = det > zero;
      fv this_scale = ok ? (sum_w * sxl - sum_x * sl) / det : zero;
      fv this_min = ok ? (sl2 * sum_x - sl * sxl) / det : zero;
      const iv clamp_min = ok & (this_min > zero);
      this_scale = clamp_min ? sxl / sl2 : this_scale;
      this_min = clamp_min ? zero : this_min;
      fv err = zero;
      for (int i = 0; i < kN; ++i) {
        const fv diff = this_scale * to_float(load(trial[i] + q)) + this_min - load(xt[i] + q);
        err += load(wt[i] + q) * diff * diff;
      }
      const iv take = ok & (err < best_error);
      best_error = take ? err : best_error;
      scale = take ? this_scale : scale;
      best_min = take ? this_min : best_min;
      for (int i = 0; i < kN; ++i) store(kept[i] + q, take ? load(trial[i] + q) : load(kept[i] + q));
    }
    store(scales + q, flat ? zero : scale);
    store(mins + q, flat ? -lo : -best_min);
    store(flat_lanes + q, flat);
  }
  for (int s = 0; s < kLanes; ++s)
    for (int i = 0; i < kN; ++i) L[kN * s + i] = flat_lanes[s] ? 0 : static_cast<uint8_t>(kept[i][s]);
}

// Each sub-block s of n elements (n a multiple of 16) with ds[s] != 0 gets its levels
// against the scale it decodes with: clamp(round_to_int((x + dm[s]) / ds[s]), lo, hi)
// + offset. Sub-blocks with ds[s] == 0 keep their levels.
void RoundLevels(const float* x, int n, int subblocks, const float* ds, const float* dm, int lo, int hi, int offset,
                 uint8_t* L) {
  const fv vlo = splat(static_cast<float>(lo)), vhi = splat(static_cast<float>(hi));
  for (int s = 0; s < subblocks; ++s) {
    if (ds[s] == 0.0f) continue;
    const fv d = splat(ds[s]), m = splat(dm[s]);
    for (int j = n * s; j < n * (s + 1); j += kW) {
      const iv l = round_clamped((load(x + j) + m) / d, vlo, vhi) + offset;
      for (int k = 0; k < kW; ++k) L[j + k] = static_cast<uint8_t>(l[k]);
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace loom::detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "loom/core/cpu_features.h"

namespace loom::detail {

// Chooses the process's tier (and so Highway's targets) before the first dispatch:
// LOOM_FORCE_ISA limits these as it limits every kernel (loom/core/cpu_features.h).
[[maybe_unused]] const cpu::Isa kTierAtStart = cpu::active_isa();

HWY_EXPORT(SearchScalesSymmetric16);
HWY_EXPORT(SearchScalesMin16);
HWY_EXPORT(RoundLevels);

void search_scales_symmetric16(const float* x, int nmax, int8_t* L, float* scales) {
  HWY_DYNAMIC_DISPATCH(SearchScalesSymmetric16)(x, nmax, L, scales);
}

void search_scales_min16(const float* x, const float* w, int nmax, uint8_t* L, float* scales, float* mins, float rmin,
                         float rdelta, int nstep) {
  HWY_DYNAMIC_DISPATCH(SearchScalesMin16)(x, w, nmax, L, scales, mins, rmin, rdelta, nstep);
}

void round_levels(const float* x, int n, int subblocks, const float* ds, const float* dm, int lo, int hi, int offset,
                  uint8_t* L) {
  HWY_DYNAMIC_DISPATCH(RoundLevels)(x, n, subblocks, ds, dm, lo, hi, offset, L);
}

}  // namespace loom::detail
#endif
