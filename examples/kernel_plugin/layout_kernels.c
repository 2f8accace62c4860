/* An example kernel plugin that owns its parameters (plugin ABI 2, plugin_abi.h):
 * the writing-kernels guide's `<Name>Layout` pattern in plain C.
 *
 *   MergedQKV      (Attention) keeps q, k and v projections as one weight in its
 *                  own layout: concatenated along the output rows, then
 *                  transposed to [in, q + k + v], so one pass over x's row reads
 *                  the weight contiguously. loom makes it at load (and caches
 *                  nothing: the rules are this model instance's).
 *   ScaledRMSNorm  (RMSNorm) keeps the norm's weight under its own name, "scale".
 *   AddScaledRMSNorm  a fusion ("Attention+RMSNorm", "RMSNorm+RMSNorm"): the
 *                  residual add after the first module and the norm after it in
 *                  one pass, reading the norm's weight (module 1 of the chain)
 *                  as its own "scale". Its calling convention,
 *                  LOOM_CALL_ADD_RMS_NORM_F32_V1, makes it a residual-tail
 *                  fusion: the module before the add keeps its own kernel.
 *
 * Repo "example/layout_kernels": install the library anywhere under
 * <plugin dir>/example/layout_kernels/ and name the kernels in a KernelConfig
 * (docs/kernels.md). Plain C, scalar code: it shows the ABI, not speed. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "loom/kernels/plugin_abi.h"

/* LOOM_CALL_LINEAR_T_F32_V1: y[r, o] = sum_i x[r, i] * w_t[i, o]. */
static void merged_qkv_f32(const float* x, const float* w_t, float* y, int64_t rows, int64_t in, int64_t out) {
  for (int64_t r = 0; r < rows; ++r) {
    float* yr = y + r * out;
    for (int64_t o = 0; o < out; ++o) yr[o] = 0.0f;
    for (int64_t i = 0; i < in; ++i) {
      const float xi = x[r * in + i];
      const float* wi = w_t + i * out;
      for (int64_t o = 0; o < out; ++o) yr[o] += xi * wi[o];
    }
  }
}

/* LOOM_CALL_RMS_NORM_F32_V1 over the kernel's own "scale". */
static void scaled_rms_norm_f32(const float* x, const float* scale, float* y, int64_t rows, int64_t cols, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float ss = 0.0f;
    for (int64_t c = 0; c < cols; ++c) ss += xr[c] * xr[c];
    const float inv = 1.0f / sqrtf(ss / (float)cols + eps);
    for (int64_t c = 0; c < cols; ++c) yr[c] = xr[c] * inv * scale[c];
  }
}

/* LOOM_CALL_ADD_RMS_NORM_F32_V1: sum = residual + x, y = rms_norm(sum) * scale. */
static void add_scaled_rms_norm_f32(const float* residual, const float* x, const float* scale, float* sum, float* y,
                                    int64_t rows, int64_t cols, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    float* sr = sum + r * cols;
    for (int64_t c = 0; c < cols; ++c) sr[c] = residual[r * cols + c] + x[r * cols + c];
  }
  scaled_rms_norm_f32(sum, scale, y, rows, cols, eps);
}

static const char* const kDevices[] = {"cpu", NULL};
static const char* const kAttention[] = {"Attention", NULL};
static const char* const kNorm[] = {"RMSNorm", NULL};

static const char* const kQkvSources[] = {"0:q_proj.weight", "0:k_proj.weight", "0:v_proj.weight", NULL};
static const LoomKernelParam kQkvParams[] = {{"qkv_t.weight", kQkvSources, /*concat_dim=*/0, /*transpose=*/1}};
static const char* const kScaleSources[] = {"0:weight", NULL};
static const LoomKernelParam kNormParams[] = {{"scale", kScaleSources, 0, 0}};
/* The modules it fuses, in chain order; its parameters name them by index. */
static const char* const kAddNorm[] = {"Attention+RMSNorm", "RMSNorm+RMSNorm", NULL};
static const char* const kAddNormScaleSources[] = {"1:weight", NULL};
static const LoomKernelParam kAddNormParams[] = {{"scale", kAddNormScaleSources, 0, 0}};

static const LoomKernelEntry kKernels[] = {
    {"MergedQKV", "1.0.0", "v1.0.0", kDevices, NULL, NULL, kAttention, LOOM_CALL_LINEAR_T_F32_V1,
     (void (*)(void))merged_qkv_f32, kQkvParams, 1},
    {"ScaledRMSNorm", "1.0.0", "v1.0.0", kDevices, NULL, NULL, kNorm, LOOM_CALL_RMS_NORM_F32_V1,
     (void (*)(void))scaled_rms_norm_f32, kNormParams, 1},
    {"AddScaledRMSNorm", "1.0.0", "v1.0.0", kDevices, NULL, NULL, kAddNorm, LOOM_CALL_ADD_RMS_NORM_F32_V1,
     (void (*)(void))add_scaled_rms_norm_f32, kAddNormParams, 1},
};

static const LoomKernelManifest kManifest = {LOOM_KERNEL_ABI_VERSION, "example/layout_kernels",
                                             sizeof(kKernels) / sizeof(kKernels[0]), kKernels};

__attribute__((visibility("default"))) const LoomKernelManifest* loom_kernel_manifest(void) { return &kManifest; }
