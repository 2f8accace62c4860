// KernelConfig is a Python mapping (upstream's form: layer name → kernel,
// fusion tuples → kernel); it crosses as loom's JSON form and is validated by
// loom's parser, whose errors name the entry.
#include "bindings.h"
#include "loom/kernels/kernel_config.h"
#include "loom/kernels/kernel_registry.h"

namespace loom::python {

void register_kernel_config(py::module_& m) {
  m.def("_validate_kernel_config", [](const std::string& json_text) { (void)unwrap(kernels::KernelConfig::parse(json_text)); });
  // Layer name → "loom:Kernel" for each built-in kernel of one layer (fusions need
  // module patterns, so use_kernels=True alone does not apply them).
  m.def("_builtin_kernel_layers", [] {
    std::map<std::string, std::string> out;
    for (const kernels::KernelSpec& s : kernels::builtin_kernels())
      if (s.layers.size() == 1 && s.layers[0].find('+') == std::string::npos) out[s.layers[0]] = s.repo + ":" + s.name;
    return out;
  });
}

}  // namespace loom::python
