// Loading a kernel plugin (plugin_abi.h) from a shared library. Callers check
// trust first: dlopen runs the library's constructors.
#pragma once

#include <string>
#include <vector>

#include "loom/core/status.h"
#include "loom/kernels/kernel_spec.h"

namespace loom::kernels {

// dlopens `path`, reads its manifest and returns one KernelSpec per entry; each
// holds the library open (keep_alive) for as long as it lives. Errors name the
// file: dlopen failure, missing symbol, ABI version, manifest repo differing
// from `expected_repo`, bad entries (version, layers, devices, features).
Result<std::vector<KernelSpec>> load_plugin_library(const std::string& path, const std::string& expected_repo);

}  // namespace loom::kernels
