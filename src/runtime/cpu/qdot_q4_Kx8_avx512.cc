// Q4_K × int8 activations over Q4_Kx8 groups, AVX-512 (BW, VNNI): qdot_k4x8_avx512.h.
#include "runtime/cpu/qdot_k4x8_avx512.h"

#if defined(LOOM_MATMUL_X86)
namespace loom::cpu::detail {

LOOM_TARGET_X8_AVX512 void qdot_q4_Kx8_avx512(const QdotArgs& a) { k4x8_by_rows<false>(a); }

}  // namespace loom::cpu::detail
#endif
