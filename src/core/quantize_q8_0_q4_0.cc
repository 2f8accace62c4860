// Q8_0 and Q4_0 quantizers on SIMD vectors, compiled once per Highway target
// (foreach_target; LOOM_FORCE_ISA reaches them as it reaches the runtime's Highway
// kernels). Each block's bytes are the scalar references' (quantize.cc,
// quantize_q8_0_ref / quantize_q4_0_ref, llama.cpp's semantics): products and sums
// are separately rounded (-ffp-contract=off, CMakeLists.txt), the extreme is the
// first of largest magnitude, and Q8_0 rounds half away from zero.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/quantize_k.h"
#include "loom/core/dtype.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "core/quantize_q8_0_q4_0.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace loom::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// At most 16 lanes, so that a half block (16 elements) is whole vectors.
using DF = hn::CappedTag<float, 16>;
using DI = hn::RebindToSigned<DF>;

// max |x| over a block of 32.
HWY_INLINE float BlockAmax(DF df, const float* x) {
  auto amax = hn::Zero(df);
  for (size_t j = 0; j < 32; j += hn::Lanes(df)) amax = hn::Max(amax, hn::Abs(hn::LoadU(df, x + j)));
  return hn::GetLane(hn::MaxOfLanes(df, amax));
}

void QuantizeQ8_0(const float* x, BlockQ8_0* y, int64_t nblocks) {
  const DF df;
  const DI di;
  const size_t N = hn::Lanes(df);
  for (int64_t b = 0; b < nblocks; ++b, x += 32) {
    const float d = BlockAmax(df, x) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = f32_to_f16(d);
    const auto vid = hn::Set(df, id), half = hn::Set(df, 0.5f), one = hn::Set(df, 1.0f);
    for (size_t j = 0; j < 32; j += N) {
      // roundf: the integer part, one more away from zero where the exact fraction
      // is half or more.
      const auto t = hn::Mul(hn::LoadU(df, x + j), vid);
      const auto whole = hn::Trunc(t);
      const auto away = hn::CopySign(one, t);
      const auto r = hn::IfThenElse(hn::Ge(hn::Abs(hn::Sub(t, whole)), half), hn::Add(whole, away), whole);
      alignas(64) int32_t q[16];
      hn::Store(hn::ConvertTo(di, r), di, q);
      for (size_t k = 0; k < N; ++k) y[b].qs[j + k] = static_cast<int8_t>(q[k]);
    }
  }
}

void QuantizeQ4_0(const float* x, BlockQ4_0* y, int64_t nblocks) {
  const DF df;
  const DI di;
  const size_t N = hn::Lanes(df);
  for (int64_t b = 0; b < nblocks; ++b, x += 32) {
    const float m = BlockAmax(df, x);
    // The signed value of largest magnitude, the first of them (the reference keeps
    // the first); 0 when all are zero (the reference never takes a −0).
    float extreme = 0.0f;
    if (m > 0.0f) {
      const auto vm = hn::Set(df, m);
      for (size_t j = 0; j < 32; j += N) {
        const intptr_t at = hn::FindFirstTrue(df, hn::Eq(hn::Abs(hn::LoadU(df, x + j)), vm));
        if (at >= 0) {
          extreme = x[j + static_cast<size_t>(at)];
          break;
        }
      }
    }
    const float d = extreme / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = f32_to_f16(d);
    // Truncation of (v + 8.5) is round-half-up onto 0..16, then capped at 15.
    const auto vid = hn::Set(df, id), offset = hn::Set(df, 8.5f);
    const auto cap = hn::Set(di, 15);
    for (size_t j = 0; j < 16; j += N) {
      const auto lo = hn::Min(hn::ConvertTo(di, hn::Add(hn::Mul(hn::LoadU(df, x + j), vid), offset)), cap);
      const auto hi = hn::Min(hn::ConvertTo(di, hn::Add(hn::Mul(hn::LoadU(df, x + j + 16), vid), offset)), cap);
      alignas(64) int32_t q[16];
      hn::Store(hn::Or(lo, hn::ShiftLeft<4>(hi)), di, q);
      for (size_t k = 0; k < N; ++k) y[b].qs[j + k] = static_cast<uint8_t>(q[k]);
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

HWY_EXPORT(QuantizeQ8_0);
HWY_EXPORT(QuantizeQ4_0);

void quantize_q8_0(const float* x, BlockQ8_0* y, int64_t nblocks) { HWY_DYNAMIC_DISPATCH(QuantizeQ8_0)(x, y, nblocks); }
void quantize_q4_0(const float* x, BlockQ4_0* y, int64_t nblocks) { HWY_DYNAMIC_DISPATCH(QuantizeQ4_0)(x, y, nblocks); }

}  // namespace loom::detail
#endif
