// Row softmax / log-softmax, compiled once per ISA (Highway foreach_target) and picked at run
// time. Three streaming passes per row (max, exp-sum, normalize); rows split across the pool.
#include <cmath>
#include <cstring>
#include <limits>

#include "loom/runtime/cpu/softmax.h"
#include "runtime/cpu/parallel_split.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "runtime/cpu/softmax.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"

HWY_BEFORE_NAMESPACE();
namespace loom {
namespace cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// The last n < Lanes elements, padded with `fill`.
HWY_INLINE VF LoadTail(DF d, const float* src, int64_t n, float fill) {
  HWY_ALIGN float buf[HWY_MAX_BYTES / sizeof(float)];
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t k = 0; k < N; ++k) buf[k] = k < n ? src[k] : fill;
  return hn::Load(d, buf);
}
HWY_INLINE void StoreTail(DF d, VF v, float* dst, int64_t n) {
  HWY_ALIGN float buf[HWY_MAX_BYTES / sizeof(float)];
  hn::Store(v, d, buf);
  std::memcpy(dst, buf, static_cast<size_t>(n) * sizeof(float));
}

HWY_INLINE float RowMax(const float* x, int64_t n) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const float ninf = -std::numeric_limits<float>::infinity();
  VF m0 = hn::Set(d, ninf), m1 = m0;
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    m0 = hn::Max(m0, hn::LoadU(d, x + i));
    m1 = hn::Max(m1, hn::LoadU(d, x + i + N));
  }
  for (; i + N <= n; i += N) m0 = hn::Max(m0, hn::LoadU(d, x + i));
  if (i < n) m1 = hn::Max(m1, LoadTail(d, x + i, n - i, ninf));
  return hn::GetLane(hn::MaxOfLanes(d, hn::Max(m0, m1)));
}

// sum_i exp(x[i] - mx); stores the exponentials to `e` when non-null.
HWY_INLINE float ExpSum(const float* x, int64_t n, float mx, float* e) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const VF mv = hn::Set(d, mx);
  VF s0 = hn::Zero(d), s1 = hn::Zero(d);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const VF v = hn::Exp(d, hn::Sub(hn::LoadU(d, x + i), mv));
    if (e) hn::StoreU(v, d, e + i);
    s0 = hn::Add(s0, v);
  }
  if (i < n) {
    // Padding with -inf gives exp() = 0.
    const VF v = hn::Exp(d, hn::Sub(LoadTail(d, x + i, n - i, -std::numeric_limits<float>::infinity()), mv));
    if (e) StoreTail(d, v, e + i, n - i);
    s1 = hn::Add(s1, v);
  }
  return hn::GetLane(hn::SumOfLanes(d, hn::Add(s0, s1)));
}

void SoftmaxImpl(const float* x, int64_t rows, int64_t n, float* out, ThreadPool* pool) {
  if (n <= 0) return;
  split_range(*pool, rows, rows * n * 6, 1, [&](int64_t b, int64_t e) HWY_ATTR {
    const DF d;
    const int64_t N = static_cast<int64_t>(hn::Lanes(d));
    for (int64_t r = b; r < e; ++r) {
      const float* xr = x + r * n;
      float* o = out + r * n;
      const float sum = ExpSum(xr, n, RowMax(xr, n), o);
      const VF inv = hn::Set(d, 1.0f / sum);
      int64_t i = 0;
      for (; i + N <= n; i += N) hn::StoreU(hn::Mul(hn::LoadU(d, o + i), inv), d, o + i);
      for (; i < n; ++i) o[i] *= 1.0f / sum;
    }
  });
}

void LogSoftmaxImpl(const float* x, int64_t rows, int64_t n, float* out, ThreadPool* pool) {
  if (n <= 0) return;
  split_range(*pool, rows, rows * n * 6, 1, [&](int64_t b, int64_t e) HWY_ATTR {
    const DF d;
    const int64_t N = static_cast<int64_t>(hn::Lanes(d));
    for (int64_t r = b; r < e; ++r) {
      const float* xr = x + r * n;
      float* o = out + r * n;
      const float mx = RowMax(xr, n);
      const float log_sum = std::log(ExpSum(xr, n, mx, nullptr));
      const VF mv = hn::Set(d, mx), lv = hn::Set(d, log_sum);
      int64_t i = 0;
      for (; i + N <= n; i += N) hn::StoreU(hn::Sub(hn::Sub(hn::LoadU(d, xr + i), mv), lv), d, o + i);
      for (; i < n; ++i) o[i] = (xr[i] - mx) - log_sum;
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

HWY_EXPORT(SoftmaxImpl);
HWY_EXPORT(LogSoftmaxImpl);

void softmax(const float* x, int64_t rows, int64_t n, float* out, ThreadPool& pool) {
  HWY_DYNAMIC_DISPATCH(SoftmaxImpl)(x, rows, n, out, &pool);
}

void log_softmax(const float* x, int64_t rows, int64_t n, float* out, ThreadPool& pool) {
  HWY_DYNAMIC_DISPATCH(LogSoftmaxImpl)(x, rows, n, out, &pool);
}

}  // namespace loom::cpu
#endif  // HWY_ONCE
