// KernelConfig is a Python mapping (upstream's form: layer name → kernel,
// fusion tuples → kernel); it crosses as loom's JSON form and is validated by
// loom's parser, whose errors name the entry.
#include "bindings.h"
#include "loom/kernels/kernel_config.h"

namespace loom::python {

void register_kernel_config(py::module_& m) {
  m.def("_validate_kernel_config", [](const std::string& json_text) { (void)unwrap(kernels::KernelConfig::parse(json_text)); });
}

}  // namespace loom::python
