// Q4_K × int8 activations, AVX-VNNI (VEX vpdpbusd, for CPUs without AVX-512).
#include "runtime/cpu/matmul_kernels.h"
#if defined(LOOM_MATMUL_X86)
#define LOOM_QDOT_VNNI 2
#include "runtime/cpu/qdot_q4_K_x86.h"

namespace loom::cpu::detail {

LOOM_QDOT_TARGET void qdot_q4_K_avxvnni(const QdotArgs& a) { qdot_q4_K_body(a); }

}  // namespace loom::cpu::detail
#endif
