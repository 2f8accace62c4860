// Which Highway target the Highway-built kernels (elementwise, norm, softmax,
// rope, attention) dispatch to right now; tests use it to check that
// LOOM_FORCE_ISA reaches them as it reaches the hand-written ones.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "runtime/cpu/highway_target.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace loom::cpu {
namespace HWY_NAMESPACE {

const char* CompiledTargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace loom::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "loom/runtime/cpu/cpu_features.h"

namespace loom::cpu {

HWY_EXPORT(CompiledTargetName);

std::string highway_target_name() { return HWY_DYNAMIC_DISPATCH(CompiledTargetName)(); }

int64_t highway_targets_for(Isa isa) {
  // Each loom path admits the Highway targets that need no more than it does;
  // Highway picks the best of those it compiled, else its static baseline.
  constexpr int64_t kBelowAvx2 = HWY_SSE4 | HWY_SSSE3 | HWY_EMU128 | HWY_SCALAR;
  switch (isa) {
    case Isa::kScalar: return HWY_EMU128 | HWY_SCALAR;
    case Isa::kAvx2: return HWY_AVX2 | kBelowAvx2;
    case Isa::kAvx512:
    case Isa::kAvx512Bf16: return HWY_AVX3_DL | HWY_AVX3 | HWY_AVX2 | kBelowAvx2;
  }
  return 0;
}

void sync_highway_targets(int forced_isa) {
  // 0 returns Highway to its own detection (the unforced case).
  hwy::SetSupportedTargetsForTest(forced_isa < 0 ? 0 : highway_targets_for(static_cast<Isa>(forced_isa)));
}

}  // namespace loom::cpu
#endif
