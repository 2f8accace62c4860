/* Calling conventions of functions loom did not compile (kernel plugins) that
 * a graph may call through the `external_call` op. A plugin's manifest entry
 * names one of these in `entry_signature` (kernels/plugin_abi.h); loom records
 * an external_call node only for the conventions listed here, so a graph never
 * calls a function with a signature it does not know.
 *
 * Activations are f32 rows, dense (row stride = cols). Weights arrive as f32
 * whatever the checkpoint's dtype, with the module's conventions already
 * applied (e.g. Gemma's 1 + w norm weight), so a plugin sees plain math.
 * Plain C: plugins need no C++ ABI match. */
#ifndef LOOM_GRAPH_EXTERNAL_CALL_ABI_H_
#define LOOM_GRAPH_EXTERNAL_CALL_ABI_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* y[r, c] = x[r, c] / sqrt(mean_c(x[r, :]^2) + eps) * weight[c] */
#define LOOM_CALL_RMS_NORM_F32_V1 "loom.rms_norm_f32.v1"
typedef void (*LoomRmsNormF32V1)(const float* x, const float* weight, float* y, int64_t rows, int64_t cols, float eps);

/* y[r, c] = silu(gate[r, c]) * up[r, c] */
#define LOOM_CALL_SILU_AND_MUL_F32_V1 "loom.silu_and_mul_f32.v1"
typedef void (*LoomSiluAndMulF32V1)(const float* gate, const float* up, float* y, int64_t rows, int64_t cols);

/* y[r, o] = sum_i x[r, i] * w_t[i, o]: a projection whose weight the kernel
 * keeps transposed, [in, out] (its own layout, made at load: plugin_abi.h's
 * LoomKernelParam). Used for an Attention kernel owning the merged q/k/v weight. */
#define LOOM_CALL_LINEAR_T_F32_V1 "loom.linear_t_f32.v1"
typedef void (*LoomLinearTF32V1)(const float* x, const float* w_t, float* y, int64_t rows, int64_t in, int64_t out);

/* sum[r, c] = residual[r, c] + x[r, c];
 * y[r, c] = sum[r, c] / sqrt(mean_c(sum[r, :]^2) + eps) * weight[c]
 * The residual add of a pre-norm block and the norm after it: a fused kernel
 * (layers "Attention+RMSNorm", …) whose chain joins its children through a
 * residual add; the first child keeps its own forward and the kernel runs at the
 * norm (kernels/kernel_spec.h residual_tail). sum and y are distinct buffers. */
#define LOOM_CALL_ADD_RMS_NORM_F32_V1 "loom.add_rms_norm_f32.v1"
typedef void (*LoomAddRmsNormF32V1)(const float* residual, const float* x, const float* weight, float* sum, float* y,
                                    int64_t rows, int64_t cols, float eps);

#ifdef __cplusplus
}
#endif

#endif /* LOOM_GRAPH_EXTERNAL_CALL_ABI_H_ */
