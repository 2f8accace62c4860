// The levels kernels in AVX2 (qdot_levels_x86.h).
#include "runtime/cpu/matmul_kernels.h"
#if defined(LOOM_MATMUL_X86)
#define LOOM_LEVELS_ZMM 0
#include "runtime/cpu/qdot_levels_x86.h"

namespace loom::cpu::detail {

QdotFn qdot_levels_avx2_for(DType dt) { return pick_levels_x86(dt, std::make_index_sequence<std::size(kLevelTypes)>()); }

}  // namespace loom::cpu::detail
#endif
