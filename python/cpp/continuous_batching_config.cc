// ContinuousBatchingConfig is a Python class with every field of loom's (and
// upstream's); loom's parser validates it: unknown fields and bad values raise
// ValueError naming the field.
#include <nlohmann/json.hpp>

#include "bindings.h"
#include "generation_config_json.h"
#include "loom/batching/continuous_batching_config.h"

namespace loom::python {

batching::ContinuousBatchingConfig parse_cb_config(const std::string& json_text) {
  const auto j = nlohmann::json::parse(json_text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw Error(invalid_argument("ContinuousBatchingConfig: not a JSON object"));
  batching::ContinuousBatchingConfig c = unwrap(batching::ContinuousBatchingConfig::from_json(j, "ContinuousBatchingConfig"));
  check(c.validate());
  return c;
}

void register_continuous_batching_config(py::module_& m) {
  m.def("_validate_continuous_batching_config", [](const std::string& j) { parse_cb_config(j); });
  m.def("_continuous_batching_config_defaults", [] { return batching::ContinuousBatchingConfig{}.to_json().dump(); });
  m.def("_continuous_batching_config_no_op_fields",
        [](const std::string& j) { return parse_cb_config(j).cpu_no_op_fields(); });
}

}  // namespace loom::python
