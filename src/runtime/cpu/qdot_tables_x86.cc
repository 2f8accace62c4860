// The AVX2 and AVX512-VNNI quantized kernel tables.
#include "runtime/cpu/qdot_kernels.h"

#if defined(LOOM_MATMUL_X86)
namespace loom::cpu::detail {

const QdotTable& qdot_avx2() {
  static const QdotTable t{"AVX2", qdot_q8_0_avx2, qdot_q4_0_avx2, qdot_q4_K_avx2, qdot_q5_K_avx2, qdot_q6_K_avx2};
  return t;
}

const QdotTable& qdot_avx512vnni() {
  static const QdotTable t{"AVX512_VNNI", qdot_q8_0_avx512vnni, qdot_q4_0_avx512vnni, qdot_q4_K_avx512vnni,
                           qdot_q5_K_avx512vnni, qdot_q6_K_avx512vnni};
  return t;
}

}  // namespace loom::cpu::detail
#endif
