// Q5_K × int8 activations over Q5_Kx8 groups (qlayout_q5_Kx8.h), AVX-512 (BW, VNNI):
// qdot_k4x8_avx512.h with each level's fifth bit added from its mask.
#include "runtime/cpu/qdot_k4x8_avx512.h"

#if defined(LOOM_MATMUL_X86)
namespace loom::cpu::detail {

LOOM_TARGET_X8_AVX512 void qdot_q5_Kx8_avx512(const QdotArgs& a) { k4x8_by_rows<true>(a); }

}  // namespace loom::cpu::detail
#endif
