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

/* Version 2 adds the parameters a kernel owns (LoomKernelParam). loom loads
 * manifests of every version from LOOM_KERNEL_ABI_MIN_VERSION up: a version 1
 * manifest's kernels are LoomKernelEntryV1 (no parameters of their own). */
#define LOOM_KERNEL_ABI_VERSION 2u
#define LOOM_KERNEL_ABI_MIN_VERSION 1u
#define LOOM_KERNEL_MANIFEST_SYMBOL "loom_kernel_manifest"

/* A parameter a kernel owns (upstream's `<Name>Layout` with its
 * conversion_mapping), made at load from the checkpoint's parameters of the
 * module(s) it replaces:
 *   - `sources` name them as "<i>:<name>", <name> relative to module i of the
 *     replaced modules (0 for a single module; for a fusion, the chain's
 *     order): "0:q_proj.weight";
 *   - one source and nothing else: a renaming; several: concatenated along
 *     `concat_dim` (the other dimensions must agree);
 *   - `transpose` then swaps the two dimensions of a 2-D result (a weight the
 *     kernel reads as [in, out]).
 * The result is stored under module 0's path as `name` (e.g. "qkv_t.weight"),
 * in the dtype of its first source; the sources are no longer loaded under their
 * own names, except a single untransformed source of the same name (kept). The
 * kernel receives its parameters as f32 (external_call_abi.h). */
typedef struct LoomKernelParam {
  const char* name;
  const char* const* sources;
  int32_t concat_dim;
  int32_t transpose;
} LoomKernelParam;

/* Lists are NULL-terminated arrays of strings. */
typedef struct LoomKernelEntryV1 {
  const char* name;
  const char* version;
  const char* revision;
  const char* const* devices;
  const char* const* cpu_features;
  const char* max_cpu_level;
  const char* const* layers;
  const char* entry_signature;
  void (*entry)(void);
} LoomKernelEntryV1;

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
  /* ABI 2: */
  const LoomKernelParam* params;   /* the parameters it owns, in the order `entry` takes them; */
  uint32_t num_params;             /* NULL/0: it reads the replaced module's own parameters */
} LoomKernelEntry;

typedef struct LoomKernelManifest {
  uint32_t abi_version;            /* LOOM_KERNEL_ABI_VERSION (or 1: kernels are LoomKernelEntryV1) */
  const char* repo;                /* "owner/name": must match the directory it was found in */
  uint32_t num_kernels;
  const void* kernels;             /* LoomKernelEntry[num_kernels] (LoomKernelEntryV1[] for ABI 1) */
} LoomKernelManifest;

typedef const LoomKernelManifest* (*LoomKernelManifestFn)(void);

#ifdef __cplusplus
}
#endif

#endif /* LOOM_KERNELS_PLUGIN_ABI_H_ */
