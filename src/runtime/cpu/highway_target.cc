// Which Highway target the Highway-built kernels (elementwise, norm, softmax,
// rope, attention, core's quantizers) dispatch to right now, found by dispatching:
// tests use it to check that the tier (LOOM_FORCE_ISA) reaches them.
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
#include "loom/runtime/cpu/highway_target.h"

namespace loom::cpu {

HWY_EXPORT(CompiledTargetName);

std::string highway_target_name() { return HWY_DYNAMIC_DISPATCH(CompiledTargetName)(); }

}  // namespace loom::cpu
#endif
