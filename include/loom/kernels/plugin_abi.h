/* The C ABI a kernel plugin exports: one function returning a static manifest.
 *
 *   extern "C" const LoomKernelManifest* loom_kernel_manifest(void);
 *
 * A plugin for repo "owner/name" is a shared library anywhere under
 * <plugin dir>/owner/name/ (one repo may ship several libraries, e.g. one per
 * version). loom checks trust before dlopen-ing it (loading runs its code), then
 * copies the manifest; the strings must stay valid while the library is loaded.
 * Plain C so a plugin needs no loom headers beyond this one and no C++ ABI match.
 */
#ifndef LOOM_KERNELS_PLUGIN_ABI_H_
#define LOOM_KERNELS_PLUGIN_ABI_H_

#include <stdint.h>

#include "loom/graph/external_call_abi.h" /* the calling conventions `entry` may follow */

#ifdef __cplusplus
extern "C" {
#endif

#define LOOM_KERNEL_ABI_VERSION 1u
#define LOOM_KERNEL_MANIFEST_SYMBOL "loom_kernel_manifest"

/* Lists are NULL-terminated arrays of strings. */
typedef struct LoomKernelEntry {
  const char* name;                /* "CustomRMSNorm": the Name in "repo:Name" */
  const char* version;             /* "2.1.0" (major.minor.patch) */
  const char* revision;            /* tag or commit matched by {"revision": ...}; may be NULL */
  const char* const* devices;      /* {"cpu", NULL} */
  const char* const* cpu_features; /* {"avx512f", "avx512bw", NULL}; NULL = none needed */
  const char* max_cpu_level;       /* highest tier it is meant for ("avx2"); NULL = no cap */
  const char* const* layers;       /* {"RMSNorm", NULL}; a fusion is "RMSNorm+MLP" */
  const char* entry_signature;     /* calling convention of `entry`: a LOOM_CALL_* of
                                      external_call_abi.h makes the kernel runnable; may be NULL */
  void (*entry)(void);             /* cast to the signature's type by whoever calls it */
} LoomKernelEntry;

typedef struct LoomKernelManifest {
  uint32_t abi_version;            /* LOOM_KERNEL_ABI_VERSION */
  const char* repo;                /* "owner/name": must match the directory it was found in */
  uint32_t num_kernels;
  const LoomKernelEntry* kernels;
} LoomKernelManifest;

typedef const LoomKernelManifest* (*LoomKernelManifestFn)(void);

#ifdef __cplusplus
}
#endif

#endif /* LOOM_KERNELS_PLUGIN_ABI_H_ */
