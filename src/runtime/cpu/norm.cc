// Row normalizations, compiled once per ISA (Highway foreach_target) and picked at run time.
// Statistics are accumulated in four f32 vector accumulators (pairwise-like error growth);
// the scalar factor per row is computed like PyTorch: 1 / sqrt(mean + eps) in f32.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "loom/runtime/cpu/norm.h"
#include "runtime/cpu/parallel_split.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "runtime/cpu/norm.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace loom {
namespace cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// Copies the last n < Lanes elements of src into a zero-padded vector.
HWY_INLINE VF LoadTail(DF d, const float* src, int64_t n) {
  HWY_ALIGN float buf[HWY_MAX_BYTES / sizeof(float)] = {};
  std::memcpy(buf, src, static_cast<size_t>(n) * sizeof(float));
  return hn::Load(d, buf);
}
HWY_INLINE void StoreTail(DF d, VF v, float* dst, int64_t n) {
  HWY_ALIGN float buf[HWY_MAX_BYTES / sizeof(float)];
  hn::Store(v, d, buf);
  std::memcpy(dst, buf, static_cast<size_t>(n) * sizeof(float));
}

// Sum of x[i]^2 over one row.
HWY_INLINE float SumSquares(const float* x, int64_t n) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  VF a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    const VF v0 = hn::LoadU(d, x + i), v1 = hn::LoadU(d, x + i + N);
    const VF v2 = hn::LoadU(d, x + i + 2 * N), v3 = hn::LoadU(d, x + i + 3 * N);
    a0 = hn::MulAdd(v0, v0, a0);
    a1 = hn::MulAdd(v1, v1, a1);
    a2 = hn::MulAdd(v2, v2, a2);
    a3 = hn::MulAdd(v3, v3, a3);
  }
  for (; i + N <= n; i += N) {
    const VF v = hn::LoadU(d, x + i);
    a0 = hn::MulAdd(v, v, a0);
  }
  if (i < n) {
    const VF v = LoadTail(d, x + i, n - i);
    a1 = hn::MulAdd(v, v, a1);
  }
  return hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
}

// Sum of (x[i] - shift) and of its square over one row.
HWY_INLINE void ShiftedMoments(const float* x, int64_t n, float shift, float* sum, float* sum_sq) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const VF sh = hn::Set(d, shift);
  VF s0 = hn::Zero(d), s1 = hn::Zero(d), q0 = hn::Zero(d), q1 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    const VF v0 = hn::Sub(hn::LoadU(d, x + i), sh), v1 = hn::Sub(hn::LoadU(d, x + i + N), sh);
    s0 = hn::Add(s0, v0);
    s1 = hn::Add(s1, v1);
    q0 = hn::MulAdd(v0, v0, q0);
    q1 = hn::MulAdd(v1, v1, q1);
  }
  for (; i + N <= n; i += N) {
    const VF v = hn::Sub(hn::LoadU(d, x + i), sh);
    s0 = hn::Add(s0, v);
    q0 = hn::MulAdd(v, v, q0);
  }
  if (i < n) {
    // Padding lanes hold `shift`, so they contribute 0 to both sums.
    HWY_ALIGN float buf[HWY_MAX_BYTES / sizeof(float)];
    for (int64_t k = 0; k < N; ++k) buf[k] = k < n - i ? x[i + k] : shift;
    const VF v = hn::Sub(hn::Load(d, buf), sh);
    s1 = hn::Add(s1, v);
    q1 = hn::MulAdd(v, v, q1);
  }
  *sum = hn::GetLane(hn::SumOfLanes(d, hn::Add(s0, s1)));
  *sum_sq = hn::GetLane(hn::SumOfLanes(d, hn::Add(q0, q1)));
}

HWY_INLINE float Sum(const float* x, int64_t n) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  VF a0 = hn::Zero(d), a1 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    a0 = hn::Add(a0, hn::LoadU(d, x + i));
    a1 = hn::Add(a1, hn::LoadU(d, x + i + N));
  }
  for (; i + N <= n; i += N) a0 = hn::Add(a0, hn::LoadU(d, x + i));
  if (i < n) a1 = hn::Add(a1, LoadTail(d, x + i, n - i));
  return hn::GetLane(hn::SumOfLanes(d, hn::Add(a0, a1)));
}

// out = (x * r) * (offset + w); w null → out = x * r.
HWY_INLINE void ScaleRow(const float* x, int64_t n, float r, const float* w, float offset, float* out) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const VF rv = hn::Set(d, r), off = hn::Set(d, offset);
  int64_t i = 0;
  if (w == nullptr) {
    for (; i + N <= n; i += N) hn::StoreU(hn::Mul(hn::LoadU(d, x + i), rv), d, out + i);
    if (i < n) StoreTail(d, hn::Mul(LoadTail(d, x + i, n - i), rv), out + i, n - i);
    return;
  }
  for (; i + N <= n; i += N)
    hn::StoreU(hn::Mul(hn::Mul(hn::LoadU(d, x + i), rv), hn::Add(off, hn::LoadU(d, w + i))), d, out + i);
  if (i < n)
    StoreTail(d, hn::Mul(hn::Mul(LoadTail(d, x + i, n - i), rv), hn::Add(off, LoadTail(d, w + i, n - i))), out + i,
              n - i);
}

HWY_INLINE float RmsFactor(float sum_sq, int64_t n, float eps) {
  const float mean = sum_sq / static_cast<float>(n);
  return 1.0f / std::sqrt(mean + eps);
}

void RmsNormImpl(const float* x, int64_t x_stride, int64_t rows, int64_t n, const float* weight, float eps,
                 float offset, float* out, int64_t out_stride, ThreadPool* pool) {
  if (n <= 0) return;
  split_range(*pool, rows, rows * n * 2, 1, [&](int64_t b, int64_t e) HWY_ATTR {
    for (int64_t r = b; r < e; ++r) {
      const float* xr = x + r * x_stride;
      ScaleRow(xr, n, RmsFactor(SumSquares(xr, n), n, eps), weight, offset, out + r * out_stride);
    }
  });
}

void AddRmsNormImpl(const float* residual, const float* x, int64_t rows, int64_t n, const float* weight, float eps,
                    float offset, float* sum, float* out, ThreadPool* pool) {
  if (n <= 0) return;
  split_range(*pool, rows, rows * n * 3, 1, [&](int64_t b, int64_t e) HWY_ATTR {
    const DF d;
    const int64_t N = static_cast<int64_t>(hn::Lanes(d));
    for (int64_t r = b; r < e; ++r) {
      const float* res = residual + r * n;
      const float* xr = x + r * n;
      float* s = sum + r * n;
      int64_t i = 0;
      for (; i + N <= n; i += N) hn::StoreU(hn::Add(hn::LoadU(d, res + i), hn::LoadU(d, xr + i)), d, s + i);
      if (i < n) StoreTail(d, hn::Add(LoadTail(d, res + i, n - i), LoadTail(d, xr + i, n - i)), s + i, n - i);
      // The row just written is in L1: the norm's own passes over it cost no memory traffic
      // and keep rms_norm's accumulation order, so the fused op equals add + rms_norm bitwise.
      ScaleRow(s, n, RmsFactor(SumSquares(s, n), n, eps), weight, offset, out + r * n);
    }
  });
}

void LayerNormImpl(const float* x, int64_t rows, int64_t n, const float* weight, const float* bias, float eps,
                   float* out, ThreadPool* pool) {
  if (n <= 0) return;
  split_range(*pool, rows, rows * n * 3, 1, [&](int64_t b, int64_t e) HWY_ATTR {
    const DF d;
    const int64_t N = static_cast<int64_t>(hn::Lanes(d));
    for (int64_t r = b; r < e; ++r) {
      const float* xr = x + r * n;
      float* o = out + r * n;
      // Corrected two-pass moments: a first mean, then sums of the deviations from it. The
      // output subtracts the first mean and the correction separately, so a large common
      // offset (mean/std ~ 100) costs no precision to the f32 rounding of the mean.
      const float mean0 = Sum(xr, n) / static_cast<float>(n);
      float dev_sum, dev_sq;
      ShiftedMoments(xr, n, mean0, &dev_sum, &dev_sq);
      const float corr = dev_sum / static_cast<float>(n);
      const float var = std::max(0.0f, dev_sq / static_cast<float>(n) - corr * corr);
      const float rstd = 1.0f / std::sqrt(var + eps);
      const VF mv = hn::Set(d, mean0), cv = hn::Set(d, corr), rv = hn::Set(d, rstd);
      auto row = [&](VF v, int64_t i, int64_t len) HWY_ATTR {
        VF y = hn::Mul(hn::Sub(hn::Sub(v, mv), cv), rv);
        if (weight) y = hn::Mul(y, len == N ? hn::LoadU(d, weight + i) : LoadTail(d, weight + i, len));
        if (bias) y = hn::Add(y, len == N ? hn::LoadU(d, bias + i) : LoadTail(d, bias + i, len));
        return y;
      };
      int64_t i = 0;
      for (; i + N <= n; i += N) hn::StoreU(row(hn::LoadU(d, xr + i), i, N), d, o + i);
      if (i < n) StoreTail(d, row(LoadTail(d, xr + i, n - i), i, n - i), o + i, n - i);
    }
  });
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace cpu
}  // namespace loom
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace loom::cpu {

HWY_EXPORT(RmsNormImpl);
HWY_EXPORT(AddRmsNormImpl);
HWY_EXPORT(LayerNormImpl);

void rmsnorm(const float* x, int64_t rows, int64_t n, const float* weight, float eps, float weight_offset, float* out,
             ThreadPool& pool) {
  HWY_DYNAMIC_DISPATCH(RmsNormImpl)(x, n, rows, n, weight, eps, weight_offset, out, n, &pool);
}

void rmsnorm_strided(const float* x, int64_t x_stride, int64_t rows, int64_t n, const float* weight, float eps,
                     float weight_offset, float* out, int64_t out_stride, ThreadPool& pool) {
  HWY_DYNAMIC_DISPATCH(RmsNormImpl)(x, x_stride, rows, n, weight, eps, weight_offset, out, out_stride, &pool);
}

void add_rmsnorm(const float* residual, const float* x, int64_t rows, int64_t n, const float* weight, float eps,
                 float weight_offset, float* sum, float* out, ThreadPool& pool) {
  HWY_DYNAMIC_DISPATCH(AddRmsNormImpl)(residual, x, rows, n, weight, eps, weight_offset, sum, out, &pool);
}

void layernorm(const float* x, int64_t rows, int64_t n, const float* weight, const float* bias, float eps, float* out,
               ThreadPool& pool) {
  HWY_DYNAMIC_DISPATCH(LayerNormImpl)(x, rows, n, weight, bias, eps, out, &pool);
}

}  // namespace loom::cpu
#endif  // HWY_ONCE
