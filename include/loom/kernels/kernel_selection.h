// Choosing one variant of a kernel for one module: by layer, version (highest
// minor.patch of the requested major) or revision, device, and CPU capability
// range (the most specialised variant the CPU can run wins among equal versions).
#pragma once

#include <memory>
#include <string>

#include "loom/core/status.h"
#include "loom/kernels/cpu_capability.h"
#include "loom/kernels/kernel_ref.h"
#include "loom/kernels/kernel_registry.h"

namespace loom::kernels {

struct KernelSelection {
  std::shared_ptr<const KernelSpec> kernel;  // null: fall back to the module's own forward
  std::string reason;                        // why this variant, or why none
};

// Errors, whatever use_fallback says (the config is wrong): the registry's
// (not found, untrusted), no variant providing `layer_key`, no variant with
// the requested version/revision. When no variant runs on device/cpu: a
// fallback selection (null kernel) if use_fallback, else kFailedPrecondition
// listing why each variant was passed over.
Result<KernelSelection> select_kernel(KernelRegistry& registry, const KernelRef& ref, const std::string& layer_key,
                                      const std::string& device, const CpuFeatures& cpu, bool use_fallback);

}  // namespace loom::kernels
