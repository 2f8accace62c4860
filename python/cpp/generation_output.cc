// GenerationOutput and RequestStatus with upstream's names: a snapshot of one
// request (its tokens, status and timing), never a live view.
#include "bindings.h"
#include "loom/batching/generation_output.h"

namespace loom::python {

void register_generation_output(py::module_& m) {
  using batching::GenerationOutput;
  using batching::RequestStatus;
  py::enum_<RequestStatus>(m, "RequestStatus")
      .value("PENDING", RequestStatus::kPending)
      .value("PREFILLING", RequestStatus::kPrefilling)
      .value("DECODING", RequestStatus::kDecoding)
      .value("FINISHED", RequestStatus::kFinished)
      .value("FAILED", RequestStatus::kFailed);

  py::class_<GenerationOutput>(m, "GenerationOutput")
      .def_readonly("request_id", &GenerationOutput::request_id)
      .def_readonly("sequence_index", &GenerationOutput::sequence_index)
      .def_readonly("parent_request_id", &GenerationOutput::parent_request_id)
      .def_readonly("prompt_ids", &GenerationOutput::prompt_ids)
      .def_readonly("generated_tokens", &GenerationOutput::generated_tokens)
      .def_readonly("logprobs", &GenerationOutput::logprobs)
      .def_property_readonly("error",
                             [](const GenerationOutput& o) -> py::object {
                               return o.error.empty() ? py::none() : py::cast(o.error);
                             })
      .def_readonly("status", &GenerationOutput::status)
      .def_property_readonly("finish_reason",
                             [](const GenerationOutput& o) { return generation::finish_reason_name(o.finish_reason); })
      .def_readonly("created_time", &GenerationOutput::created_time)
      .def_readonly("lifespan", &GenerationOutput::lifespan)
      .def_readonly("timestamps", &GenerationOutput::timestamps)
      .def_readonly("text", &GenerationOutput::text)
      .def_readonly("drafted_tokens", &GenerationOutput::drafted_tokens)
      .def_readonly("accepted_draft_tokens", &GenerationOutput::accepted_draft_tokens)
      .def("is_finished", &GenerationOutput::is_final)
      .def("__repr__", [](const GenerationOutput& o) {
        return "GenerationOutput(request_id='" + o.request_id + "', status=" + batching::request_status_name(o.status) +
               ", generated_tokens=" + std::to_string(o.generated_tokens.size()) + " tokens)";
      });
}

}  // namespace loom::python
