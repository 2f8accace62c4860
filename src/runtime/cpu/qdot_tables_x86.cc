// The AVX2, AVX-VNNI and AVX512-VNNI quantized kernel tables.
#include "runtime/cpu/qdot_kernels.h"
#include "runtime/cpu/qdot_levels.h"

#if defined(LOOM_MATMUL_X86)
namespace loom::cpu::detail {

const QdotTable& qdot_avx2() {
  static const QdotTable t{"AVX2", qdot_q8_0_avx2, qdot_q4_0_avx2, qdot_q4_K_avx2, qdot_q5_K_avx2, qdot_q6_K_avx2,
                           qdot_levels_avx2_for};
  return t;
}

const QdotTable& qdot_avxvnni() {
  static const QdotTable t{"AVX_VNNI", qdot_q8_0_avxvnni, qdot_q4_0_avxvnni, qdot_q4_K_avxvnni, qdot_q5_K_avxvnni,
                           qdot_q6_K_avxvnni, qdot_levels_avx2_for};
  return t;
}

const QdotTable& qdot_avx512vnni() {
  static const QdotTable t{"AVX512_VNNI", qdot_q8_0_avx512vnni, qdot_q4_0_avx512vnni, qdot_q4_K_avx512vnni,
                           qdot_q5_K_avx512vnni, qdot_q6_K_avx512vnni, qdot_levels_avx512_for};
  return t;
}

}  // namespace loom::cpu::detail
#endif
