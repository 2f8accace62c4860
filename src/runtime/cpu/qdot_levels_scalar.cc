// The block types decoded to exact integer levels (qlevels.h) × int8 activations:
// the portable reference of their SIMD kernels.
#include "runtime/cpu/qdot_levels.h"

#include <iterator>
#include <utility>

#include "runtime/cpu/qlevels.h"

namespace loom::cpu::detail {
namespace {

template <DType dt>
void qdot_levels_scalar(const QdotArgs& a) {
  using T = LevelTraits<dt>;
  using Act = LevelAct<dt>;
  LevelBlock w;
  for (int64_t n = 0; n < a.outputs; ++n) {
    const auto* row = qdot_weight_row<typename T::Block>(a, n);
    float acc[kQTileRows] = {};
    for (int64_t b = 0; b < a.blocks; ++b) {
      levels::decode(row[b], w);
      for (int r = 0; r < a.m; ++r) {
        const Act& x = qdot_act_row<Act>(a, r)[b];
        int32_t s = 0;
        for (int e = 0; e < T::elements; ++e) s += w.L[e] * x.qs[e];
        acc[r] = qdot_step(acc[r], w.d * x.d, s);
        if constexpr (T::min_elements > 0) acc[r] = qdot_step(acc[r], w.dm * x.d, level_min_sum<dt>(w, x));
      }
    }
    for (int r = 0; r < a.m; ++r) a.y[r * a.ldy + n] = qdot_finish(acc[r], a.bias, n);
  }
}

template <size_t... I>
QdotFn pick(DType dt, std::index_sequence<I...>) {
  QdotFn fn = nullptr;
  ((dt == kLevelTypes[I] ? (fn = qdot_levels_scalar<kLevelTypes[I]>, 0) : 0), ...);
  return fn;
}

}  // namespace

QdotFn qdot_levels_scalar_for(DType dt) { return pick(dt, std::make_index_sequence<std::size(kLevelTypes)>()); }

}  // namespace loom::cpu::detail
