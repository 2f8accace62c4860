// Output constraints from Python: a request's constraint fields (OpenAI's
// response_format, vLLM's grammar / regex / choice, as `loom batch` lines take them)
// compiled once per model and shared, handed to generate and add_request as an opaque
// object.
#include <pybind11/pybind11.h>

#include "bindings.h"
#include "loom/structured/request_constraint.h"
#include "loom/structured/token_vocabulary.h"
#include "model_handle.h"

namespace loom::python {

namespace {

std::shared_ptr<structured::Constraint> compile_constraint(ModelHandle& h, const std::string& fields_json) {
  nlohmann::json fields = nlohmann::json::parse(fields_json, nullptr, /*allow_exceptions=*/false);
  if (fields.is_discarded() || !fields.is_object())
    throw Error(invalid_argument("constraint: the fields must be a JSON object"));
  std::optional<structured::ConstraintSpec> spec = unwrap(structured::constraint_spec_from_request(fields, ""));
  if (!spec) return nullptr;
  std::call_once(h.constraints_once, [&h] {
    if (h.tokenizer)
      h.constraints = std::make_unique<structured::ConstraintRegistry>(structured::TokenVocabulary::from_tokenizer(*h.tokenizer));
  });
  if (!h.constraints)
    throw Error(failed_precondition("constrained generation needs the model's tokenizer (tokenizer.json in its folder)"));
  return unwrap(h.constraints->get(*spec));
}

}  // namespace

void register_constraints(py::module_& m) {
  py::class_<structured::Constraint, std::shared_ptr<structured::Constraint>>(m, "_Constraint");
  m.def("_compile_constraint", &compile_constraint, py::arg("model"), py::arg("fields_json"),
        py::call_guard<py::gil_scoped_release>());
}

}  // namespace loom::python
