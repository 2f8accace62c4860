/* An example kernel plugin for repo "acme/norms" (plugin_abi.h), written in C
 * to show the ABI needs nothing from C++. CMake builds this one file several
 * times with different EXAMPLE_* definitions to get the variants the kernels
 * tests choose between (versions, CPU tiers); see CMakeLists.txt here. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "loom/kernels/plugin_abi.h"

#define EXAMPLE_STR2(x) #x
#define EXAMPLE_STR(x) EXAMPLE_STR2(x)
#define EXAMPLE_VERSION EXAMPLE_STR(EXAMPLE_MAJOR) "." EXAMPLE_STR(EXAMPLE_MINOR) "." EXAMPLE_STR(EXAMPLE_PATCH)

#ifndef EXAMPLE_ABI
#define EXAMPLE_ABI LOOM_KERNEL_ABI_VERSION
#endif
#ifndef EXAMPLE_REPO
#define EXAMPLE_REPO "acme/norms"
#endif

/* y = x * rsqrt(mean(x^2) + eps) * w, row by row: calling convention
 * LOOM_CALL_RMS_NORM_F32_V1. */
static void custom_rms_norm_f32(const float* x, const float* w, float* y, int64_t rows, int64_t cols, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    double ss = 0.0;
    for (int64_t c = 0; c < cols; ++c) ss += (double)xr[c] * xr[c];
    const float inv = (float)(1.0 / sqrt(ss / (double)cols + eps));
    for (int64_t c = 0; c < cols; ++c) yr[c] = xr[c] * inv * w[c];
  }
}

/* y = silu(gate) * up: calling convention LOOM_CALL_SILU_AND_MUL_F32_V1. */
static void custom_silu_and_mul_f32(const float* gate, const float* up, float* y, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows * cols; ++i) y[i] = (float)((double)gate[i] / (1.0 + exp(-(double)gate[i])) * up[i]);
}

static const char* const kDevices[] = {"cpu", NULL};
static const char* const kActLayers[] = {"SiLUAndMul", NULL};
static const char* const kNormLayers[] = {"RMSNorm", NULL};
static const char* const kFusedLayers[] = {"RMSNorm+MLP", NULL};
#if EXAMPLE_TIER == 3
static const char* const kFeatures[] = {"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16", NULL};
#elif EXAMPLE_TIER == 1
static const char* const kFeatures[] = {"avx2", "fma", NULL};
#else
static const char* const* const kFeatures = NULL;
#endif
#ifdef EXAMPLE_MAX_LEVEL
static const char* const kMaxLevel = EXAMPLE_MAX_LEVEL;
#else
static const char* const kMaxLevel = NULL;
#endif

#if EXAMPLE_ABI == 1
/* A plugin built for ABI 1: its entries are the shorter LoomKernelEntryV1. */
typedef LoomKernelEntryV1 ExampleEntry;
#else
typedef LoomKernelEntry ExampleEntry;
/* ABI 2: a kernel owning a parameter declared against a module it does not
 * replace (source module 1 of a single-module kernel): an error at load. */
static const char* const kBadSources[] = {"1:weight", NULL};
static const LoomKernelParam kBadParams[] = {{"scale", kBadSources, 0, 0}};
#endif

static const ExampleEntry kKernels[] = {
    {"CustomRMSNorm", EXAMPLE_VERSION, EXAMPLE_REVISION, kDevices, kFeatures, kMaxLevel, kNormLayers,
     LOOM_CALL_RMS_NORM_F32_V1, (void (*)(void))custom_rms_norm_f32},
    {"CustomSiLUAndMul", EXAMPLE_VERSION, EXAMPLE_REVISION, kDevices, kFeatures, kMaxLevel, kActLayers,
     LOOM_CALL_SILU_AND_MUL_F32_V1, (void (*)(void))custom_silu_and_mul_f32},
    {"CustomRMSNormMLP", EXAMPLE_VERSION, EXAMPLE_REVISION, kDevices, kFeatures, kMaxLevel, kFusedLayers, NULL, NULL},
#if EXAMPLE_ABI != 1
    {"MisdeclaredRMSNorm", EXAMPLE_VERSION, EXAMPLE_REVISION, kDevices, kFeatures, kMaxLevel, kNormLayers,
     LOOM_CALL_RMS_NORM_F32_V1, (void (*)(void))custom_rms_norm_f32, kBadParams, 1},
#endif
};

static const LoomKernelManifest kManifest = {EXAMPLE_ABI, EXAMPLE_REPO, sizeof(kKernels) / sizeof(kKernels[0]), kKernels};

__attribute__((visibility("default"))) const LoomKernelManifest* loom_kernel_manifest(void) { return &kManifest; }
