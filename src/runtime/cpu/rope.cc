// RoPE rotation, compiled once per ISA (Highway foreach_target) and picked at run time. The
// angles' cos/sin are computed once per token with the C library's f32 cos/sin (accurate for
// any position, where vector sin/cos approximations lose accuracy past ~10^4 radians) and
// shared by all heads; the rotation itself is vectorized over the rotary half.
#include <cmath>
#include <string>
#include <vector>

#include "loom/runtime/cpu/rope.h"
#include "runtime/cpu/parallel_split.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "runtime/cpu/rope.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#ifndef LOOM_RUNTIME_CPU_ROPE_ARGS_
#define LOOM_RUNTIME_CPU_ROPE_ARGS_
namespace loom::cpu::rope_detail {

inline void check_rope_args(int64_t rows, int64_t num_heads, int64_t head_dim, int64_t row_stride,
                            int64_t rotary_dim) {
  auto fail = [](const std::string& m) { throw Error(invalid_argument("rope: " + m)); };
  if (rows < 0 || num_heads < 0 || head_dim < 1) fail("rows, num_heads must be >= 0 and head_dim >= 1");
  if (rotary_dim < 2 || rotary_dim % 2 != 0 || rotary_dim > head_dim)
    fail("rotary_dim " + std::to_string(rotary_dim) + " must be even, >= 2 and <= head_dim " +
         std::to_string(head_dim));
  if (row_stride < num_heads * head_dim)
    fail("row_stride " + std::to_string(row_stride) + " shorter than num_heads * head_dim = " +
         std::to_string(num_heads * head_dim));
}

}  // namespace loom::cpu::rope_detail
#endif  // LOOM_RUNTIME_CPU_ROPE_ARGS_

HWY_BEFORE_NAMESPACE();
namespace loom {
namespace cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// Rotates the heads of rows [b, e). Products are rounded separately before the add, like
// PyTorch's q * cos + rotate_half(q) * sin (the build does not contract them into FMAs).
HWY_INLINE void RotateRows(float* x, int64_t b, int64_t e, int64_t num_heads, int64_t head_dim, int64_t row_stride,
                           const float* cos_sin, int64_t rotary_dim) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const int64_t half = rotary_dim / 2;
  for (int64_t r = b; r < e; ++r) {
    const float* cs = cos_sin + r * rotary_dim;
    const float* sn = cs + half;
    for (int64_t h = 0; h < num_heads; ++h) {
      float* x1 = x + r * row_stride + h * head_dim;
      float* x2 = x1 + half;
      int64_t i = 0;
      for (; i + N <= half; i += N) {
        const VF a = hn::LoadU(d, x1 + i), bb = hn::LoadU(d, x2 + i);
        const VF c = hn::LoadU(d, cs + i), s = hn::LoadU(d, sn + i);
        hn::StoreU(hn::Sub(hn::Mul(a, c), hn::Mul(bb, s)), d, x1 + i);
        hn::StoreU(hn::Add(hn::Mul(bb, c), hn::Mul(a, s)), d, x2 + i);
      }
      for (; i < half; ++i) {
        const float a = x1[i], bb = x2[i];
        x1[i] = a * cs[i] - bb * sn[i];
        x2[i] = bb * cs[i] + a * sn[i];
      }
    }
  }
}

void RopeApplyCosSinImpl(float* x, int64_t rows, int64_t num_heads, int64_t head_dim, int64_t row_stride,
                         const float* cos_sin, int64_t rotary_dim, ThreadPool* pool) {
  split_range(*pool, rows, rows * num_heads * rotary_dim * 2, 1, [&](int64_t b, int64_t e) HWY_ATTR {
    RotateRows(x, b, e, num_heads, head_dim, row_stride, cos_sin, rotary_dim);
  });
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace cpu
}  // namespace loom
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace loom::cpu {

HWY_EXPORT(RopeApplyCosSinImpl);

void rope_cos_sin(const int32_t* positions, int64_t rows, const float* inv_freq, int64_t rotary_dim,
                  float attention_scaling, float* cos_sin) {
  const int64_t half = rotary_dim / 2;
  for (int64_t r = 0; r < rows; ++r) {
    const float pos = static_cast<float>(positions[r]);
    float* c = cos_sin + r * rotary_dim;
    for (int64_t i = 0; i < half; ++i) {
      const float angle = inv_freq[i] * pos;
      c[i] = std::cos(angle) * attention_scaling;
      c[half + i] = std::sin(angle) * attention_scaling;
    }
  }
}

void rope_apply_cos_sin(float* x, int64_t rows, int64_t num_heads, int64_t head_dim, int64_t row_stride,
                        const float* cos_sin, int64_t rotary_dim, ThreadPool& pool) {
  rope_detail::check_rope_args(rows, num_heads, head_dim, row_stride, rotary_dim);
  HWY_DYNAMIC_DISPATCH(RopeApplyCosSinImpl)(x, rows, num_heads, head_dim, row_stride, cos_sin, rotary_dim, &pool);
}

void rope_apply(float* x, int64_t rows, int64_t num_heads, int64_t head_dim, int64_t row_stride,
                const int32_t* positions, const float* inv_freq, int64_t rotary_dim, float attention_scaling,
                ThreadPool& pool) {
  rope_detail::check_rope_args(rows, num_heads, head_dim, row_stride, rotary_dim);
  thread_local std::vector<float> buffer;
  buffer.resize(static_cast<size_t>(rows * rotary_dim));
  float* cos_sin = buffer.data();  // workers must see this thread's buffer, not their own
  // cos/sin cost ~40 ns a pair; worth splitting for prefill-sized calls.
  split_range(pool, rows, rows * rotary_dim * 16, 1, [&](int64_t b, int64_t e) {
    rope_cos_sin(positions + b, e - b, inv_freq, rotary_dim, attention_scaling, cos_sin + b * rotary_dim);
  });
  HWY_DYNAMIC_DISPATCH(RopeApplyCosSinImpl)(x, rows, num_heads, head_dim, row_stride, cos_sin, rotary_dim, &pool);
}

}  // namespace loom::cpu
#endif  // HWY_ONCE
