// Q4_K × int8 activations over Q4_Kx8 groups, AVX2 (maddubs): qdot_k4x8_avx2.h.
#include "runtime/cpu/qdot_k4x8_avx2.h"

#if defined(LOOM_MATMUL_X86)
namespace loom::cpu::detail {

LOOM_TARGET_AVX2 void qdot_q4_Kx8_avx2(const QdotArgs& a) {
  LOOM_QDOT_X8_BY_ROWS(q4_Kx8_rows_avx2, a)
}

}  // namespace loom::cpu::detail
#endif
