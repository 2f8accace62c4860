// Kernels for the block types that decode to integer levels (qlevels.h): Q4_1, Q5_0,
// Q5_1, IQ4_NL, MXFP4, Q2_K, Q3_K, IQ4_XS, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S,
// IQ1_S, IQ1_M, TQ1_0, TQ2_0. Each decodes a weight block once per call of up to
// kQTileRows activation rows and takes its exact int32 sums; every ISA gives the
// scalar kernel's bits.
#pragma once

#include "runtime/cpu/qdot_kernels.h"

namespace loom::cpu::detail {

// Null for a type that is not one of those.
QdotFn qdot_levels_scalar_for(DType dt);
#if defined(LOOM_MATMUL_X86)
QdotFn qdot_levels_avx2_for(DType dt);
QdotFn qdot_levels_avx512_for(DType dt);  // AVX512BW
#endif

}  // namespace loom::cpu::detail
