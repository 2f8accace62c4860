// GenerationConfig is a Python class (its fields are plain attributes, as
// upstream); loom's C++ parser validates it, so a bad value raises ValueError
// naming the field exactly as `loom` says it.
#include <nlohmann/json.hpp>

#include "bindings.h"
#include "generation_config_json.h"
#include "loom/batching/generation_config_file.h"

namespace loom::python {

GenerationConfig parse_generation_config(const std::string& json_text) {
  const auto j = nlohmann::json::parse(json_text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw Error(invalid_argument("GenerationConfig: not a JSON object"));
  return unwrap(batching::generation_config_from_json(j, "GenerationConfig"));
}

void register_generation_config(py::module_& m) {
  m.def("_validate_generation_config", [](const std::string& j) { parse_generation_config(j); });
}

}  // namespace loom::python
