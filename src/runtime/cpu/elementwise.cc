// Element-wise routines, compiled once per ISA (Highway foreach_target) and picked at run time.
// A call's tail shorter than a vector goes through a zero-padded vector, so every element is
// computed by the same instructions wherever it sits.
#include <cstring>
#include <string>

#include "loom/runtime/cpu/elementwise.h"
#include "runtime/cpu/parallel_split.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "runtime/cpu/elementwise.cc"
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

constexpr int64_t kGrain = 64;  // chunk alignment when splitting across threads

template <class F>
HWY_INLINE void Map1(const float* x, int64_t n, float* out, const F& f) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(f(d, hn::LoadU(d, x + i)), d, out + i);
  if (i < n) {
    HWY_ALIGN float buf[HWY_MAX_BYTES / sizeof(float)] = {};
    std::memcpy(buf, x + i, static_cast<size_t>(n - i) * sizeof(float));
    hn::Store(f(d, hn::Load(d, buf)), d, buf);
    std::memcpy(out + i, buf, static_cast<size_t>(n - i) * sizeof(float));
  }
}

template <class F>
HWY_INLINE void Map2(const float* a, const float* b, int64_t n, float* out, const F& f) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(f(d, hn::LoadU(d, a + i), hn::LoadU(d, b + i)), d, out + i);
  if (i < n) {
    HWY_ALIGN float ba[HWY_MAX_BYTES / sizeof(float)] = {};
    HWY_ALIGN float bb[HWY_MAX_BYTES / sizeof(float)] = {};
    std::memcpy(ba, a + i, static_cast<size_t>(n - i) * sizeof(float));
    std::memcpy(bb, b + i, static_cast<size_t>(n - i) * sizeof(float));
    hn::Store(f(d, hn::Load(d, ba), hn::Load(d, bb)), d, ba);
    std::memcpy(out + i, ba, static_cast<size_t>(n - i) * sizeof(float));
  }
}

// e^x for x up to +inf: Highway's Exp is only valid up to ~88 (f32 overflow) and returns garbage
// beyond, so clamp to 88.72 where e^x ≈ 3.4e38 — dividing by it then gives the right ~0.
HWY_INLINE VF ExpCapped(DF d, VF x) { return hn::Exp(d, hn::Min(x, hn::Set(d, 88.72f))); }

// x * sigmoid(x) = x / (1 + e^-x), as PyTorch computes it.
HWY_INLINE VF Silu(DF d, VF x) {
  return hn::Div(x, hn::Add(hn::Set(d, 1.0f), ExpCapped(d, hn::Neg(x))));
}

// 0.5 x (1 + tanh(u)) rewritten as x / (1 + e^-2u): equal in exact arithmetic, and free of the
// cancellation 1 + tanh(u) suffers for negative x.
HWY_INLINE VF GeluTanh(DF d, VF x) {
  const VF k2 = hn::Set(d, -2.0f * 0.7978845608028654f);  // -2 sqrt(2/pi)
  const VF kappa = hn::Set(d, 0.044715f);
  const VF x3 = hn::Mul(hn::Mul(x, x), x);
  const VF minus_2u = hn::Mul(k2, hn::MulAdd(kappa, x3, x));
  return hn::Div(x, hn::Add(hn::Set(d, 1.0f), ExpCapped(d, minus_2u)));
}

// 0.5 x (1 + erf(z)), z = x / sqrt(2). |z| < 1: erf(z) = z P(z^2); beyond, 1 + erf(z) is
// 2 - erfc(|z|) or erfc(|z|) by sign, with erfc(a) = e^(-a^2) Q(1 / (1 + a/2)) — so negative
// inputs keep their relative precision. P and Q are least-squares fits (degree 6 and 9) made
// for loom: relative error about 2e-9 before f32 rounding.
HWY_INLINE VF GeluErf(DF d, VF x) {
  const VF z = hn::Mul(x, hn::Set(d, 0.7071067811865476f));
  const VF z2 = hn::Mul(z, z);
  const VF az = hn::Abs(z);
  VF p = hn::Set(d, 7.958700734889135e-05f);
  p = hn::MulAdd(p, z2, hn::Set(d, -0.0008041412802413106f));
  p = hn::MulAdd(p, z2, hn::Set(d, 0.005191823933273554f));
  p = hn::MulAdd(p, z2, hn::Set(d, -0.026855627074837685f));
  p = hn::MulAdd(p, z2, hn::Set(d, 0.11283628642559052f));
  p = hn::MulAdd(p, z2, hn::Set(d, -0.3761262893676758f));
  p = hn::MulAdd(p, z2, hn::Set(d, 1.128379225730896f));
  const VF one = hn::Set(d, 1.0f);
  const VF small = hn::MulAdd(z, p, one);  // 1 + erf(z), |z| < 1
  const VF t = hn::Div(one, hn::MulAdd(hn::Set(d, 0.5f), az, one));
  VF q = hn::Set(d, -0.06718205660581589f);
  q = hn::MulAdd(q, t, hn::Set(d, 0.3257618546485901f));
  q = hn::MulAdd(q, t, hn::Set(d, -0.5722441077232361f));
  q = hn::MulAdd(q, t, hn::Set(d, 0.37316352128982544f));
  q = hn::MulAdd(q, t, hn::Set(d, -0.09045849740505219f));
  q = hn::MulAdd(q, t, hn::Set(d, 0.22940658032894135f));
  q = hn::MulAdd(q, t, hn::Set(d, 0.23613102734088898f));
  q = hn::MulAdd(q, t, hn::Set(d, 0.28346797823905945f));
  q = hn::MulAdd(q, t, hn::Set(d, 0.28199321031570435f));
  q = hn::MulAdd(q, t, hn::Set(d, 3.293336703791283e-06f));
  const VF erfc = hn::Mul(hn::Exp(d, hn::Neg(z2)), q);
  const VF large = hn::IfThenElse(hn::Lt(z, hn::Zero(d)), erfc, hn::Sub(hn::Set(d, 2.0f), erfc));
  const VF one_plus_erf = hn::IfThenElse(hn::Lt(az, one), small, large);
  return hn::Mul(hn::Mul(hn::Set(d, 0.5f), x), one_plus_erf);
}

template <Activation A>
HWY_INLINE VF Act(DF d, VF x) {
  if constexpr (A == Activation::kSilu) return Silu(d, x);
  if constexpr (A == Activation::kGeluTanh) return GeluTanh(d, x);
  if constexpr (A == Activation::kGeluErf) return GeluErf(d, x);
}

void AddImpl(const float* a, const float* b, int64_t n, float* out, ThreadPool* pool) {
  split_range(*pool, n, n, kGrain, [&](int64_t s, int64_t e) HWY_ATTR {
    Map2(a + s, b + s, e - s, out + s, [](DF, VF x, VF y) HWY_ATTR { return hn::Add(x, y); });
  });
}

void AddBiasImpl(const float* x, const float* bias, int64_t rows, int64_t n, float* out, ThreadPool* pool) {
  split_rows(*pool, rows, n, 1, kGrain, [&](int64_t r, int64_t s, int64_t e) HWY_ATTR {
    Map2(x + r * n + s, bias + s, e - s, out + r * n + s, [](DF, VF v, VF b) HWY_ATTR { return hn::Add(v, b); });
  });
}

void MulImpl(const float* a, const float* b, int64_t n, float* out, ThreadPool* pool) {
  split_range(*pool, n, n, kGrain, [&](int64_t s, int64_t e) HWY_ATTR {
    Map2(a + s, b + s, e - s, out + s, [](DF, VF x, VF y) HWY_ATTR { return hn::Mul(x, y); });
  });
}

void ScaleImpl(const float* x, float factor, int64_t n, float* out, ThreadPool* pool) {
  split_range(*pool, n, n, kGrain, [&](int64_t s, int64_t e) HWY_ATTR {
    Map1(x + s, e - s, out + s, [factor](DF d, VF v) HWY_ATTR { return hn::Mul(v, hn::Set(d, factor)); });
  });
}

// Gemma 2's logit soft-capping; Highway's Tanh is accurate to a few ulp over all of f32.
void SoftcapImpl(const float* x, float cap, int64_t n, float* out, ThreadPool* pool) {
  split_range(*pool, n, n * 8, kGrain, [&](int64_t s, int64_t e) HWY_ATTR {
    Map1(x + s, e - s, out + s, [cap](DF d, VF v) HWY_ATTR {
      return hn::Mul(hn::Set(d, cap), hn::Tanh(d, hn::Div(v, hn::Set(d, cap))));
    });
  });
}

template <Activation A>
void ActivationT(const float* x, int64_t n, float* out, ThreadPool* pool) {
  // Transcendental activations cost ~10 element-ops each.
  split_range(*pool, n, n * 8, kGrain, [&](int64_t s, int64_t e) HWY_ATTR {
    Map1(x + s, e - s, out + s, [](DF d, VF v) HWY_ATTR { return Act<A>(d, v); });
  });
}

void ActivationImpl(Activation act, const float* x, int64_t n, float* out, ThreadPool* pool) {
  switch (act) {
    case Activation::kSilu: return ActivationT<Activation::kSilu>(x, n, out, pool);
    case Activation::kGeluTanh: return ActivationT<Activation::kGeluTanh>(x, n, out, pool);
    case Activation::kGeluErf: return ActivationT<Activation::kGeluErf>(x, n, out, pool);
  }
}

template <Activation A>
void GatedT(const float* gate, int64_t gate_stride, const float* up, int64_t up_stride, int64_t rows, int64_t n,
            float* out, int64_t out_stride, ThreadPool* pool) {
  split_rows(*pool, rows, n, 8, kGrain, [&](int64_t r, int64_t s, int64_t e) HWY_ATTR {
    Map2(gate + r * gate_stride + s, up + r * up_stride + s, e - s, out + r * out_stride + s,
         [](DF d, VF g, VF u) HWY_ATTR { return hn::Mul(Act<A>(d, g), u); });
  });
}

void GatedImpl(Activation act, const float* gate, int64_t gate_stride, const float* up, int64_t up_stride,
               int64_t rows, int64_t n, float* out, int64_t out_stride, ThreadPool* pool) {
  switch (act) {
    case Activation::kSilu:
      return GatedT<Activation::kSilu>(gate, gate_stride, up, up_stride, rows, n, out, out_stride, pool);
    case Activation::kGeluTanh:
      return GatedT<Activation::kGeluTanh>(gate, gate_stride, up, up_stride, rows, n, out, out_stride, pool);
    case Activation::kGeluErf:
      return GatedT<Activation::kGeluErf>(gate, gate_stride, up, up_stride, rows, n, out, out_stride, pool);
  }
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace cpu
}  // namespace loom
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace loom::cpu {

HWY_EXPORT(AddImpl);
HWY_EXPORT(AddBiasImpl);
HWY_EXPORT(MulImpl);
HWY_EXPORT(ScaleImpl);
HWY_EXPORT(SoftcapImpl);
HWY_EXPORT(ActivationImpl);
HWY_EXPORT(GatedImpl);

Result<Activation> activation_from_name(std::string_view name) {
  if (name == "silu" || name == "swish") return Activation::kSilu;
  if (name == "gelu") return Activation::kGeluErf;
  if (name == "gelu_new" || name == "gelu_pytorch_tanh" || name == "gelu_fast") return Activation::kGeluTanh;
  return unsupported("hidden_act '" + std::string(name) +
                     "' has no CPU kernel (supported: silu, swish, gelu, gelu_new, gelu_pytorch_tanh, gelu_fast)");
}

const char* activation_name(Activation act) {
  switch (act) {
    case Activation::kSilu: return "silu";
    case Activation::kGeluTanh: return "gelu_tanh";
    case Activation::kGeluErf: return "gelu";
  }
  return "?";
}

void add(const float* a, const float* b, int64_t n, float* out, ThreadPool& pool) {
  HWY_DYNAMIC_DISPATCH(AddImpl)(a, b, n, out, &pool);
}
void add_bias(const float* x, const float* bias, int64_t rows, int64_t n, float* out, ThreadPool& pool) {
  HWY_DYNAMIC_DISPATCH(AddBiasImpl)(x, bias, rows, n, out, &pool);
}
void mul(const float* a, const float* b, int64_t n, float* out, ThreadPool& pool) {
  HWY_DYNAMIC_DISPATCH(MulImpl)(a, b, n, out, &pool);
}
void scale(const float* x, float s, int64_t n, float* out, ThreadPool& pool) {
  HWY_DYNAMIC_DISPATCH(ScaleImpl)(x, s, n, out, &pool);
}
void softcap(const float* x, float cap, int64_t n, float* out, ThreadPool& pool) {
  HWY_DYNAMIC_DISPATCH(SoftcapImpl)(x, cap, n, out, &pool);
}
void activation(Activation act, const float* x, int64_t n, float* out, ThreadPool& pool) {
  HWY_DYNAMIC_DISPATCH(ActivationImpl)(act, x, n, out, &pool);
}
void gated_activation(Activation act, const float* gate, int64_t gate_stride, const float* up, int64_t up_stride,
                      int64_t rows, int64_t n, float* out, int64_t out_stride, ThreadPool& pool) {
  HWY_DYNAMIC_DISPATCH(GatedImpl)(act, gate, gate_stride, up, up_stride, rows, n, out, out_stride, &pool);
}

}  // namespace loom::cpu
#endif  // HWY_ONCE
