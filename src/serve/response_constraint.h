// The output-constraint fields of a generation request, in OpenAI's and vLLM's names:
// response_format ({"type": "text" | "json_object" | "json_schema"}), vLLM's
// structured_outputs object (choice, regex, grammar, json, json_object) and its older
// top-level guided_json / guided_regex / guided_choice / guided_grammar. At most one
// may constrain a request; a problem is a 400 whose param names the field.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "loom/batching/request_options.h"
#include "loom/structured/constraint.h"
#include "serve/api_error.h"

namespace loom::serve {

class Engine;

// What a request asks its output to match, and the field that asked (for errors).
struct RequestedConstraint {
  structured::ConstraintSpec spec;
  std::string param;
};

// nullopt in *out: unconstrained. Returns the 400 of a malformed field.
std::optional<ApiError> read_requested_constraint(const nlohmann::ordered_json& body,
                                                  std::optional<RequestedConstraint>* out);

// Compiles (or finds, shared with other requests) the constraint and sets it on the
// options. A schema the compiler refuses (unsupported keyword, bad grammar, over the
// time or size budget) is a 400 naming `c.param`; a full compile queue a 503; a client
// that left while it compiled (`client_connected` false) a 499, its compilation stopped.
std::optional<ApiError> attach_constraint(Engine& engine, const RequestedConstraint& c,
                                          batching::RequestOptions* options,
                                          const std::function<bool()>& client_connected = {});

}  // namespace loom::serve
