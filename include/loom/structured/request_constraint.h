// A request's constraint fields (one JSON object: a `loom batch` line now, a server
// body later) → a ConstraintSpec. OpenAI's response_format ({"type": "text"},
// {"type": "json_object"}, {"type": "json_schema", "json_schema": {"name", "schema",
// "strict"}}) and vLLM's structured-output extras as plain fields: "grammar" (GBNF),
// "regex", "choice" (a list of strings). At most one may be given; errors name the field.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "loom/structured/constraint.h"

namespace loom::structured {

// nullopt: the request is unconstrained. `where` prefixes messages ("input line 3: ").
Result<std::optional<ConstraintSpec>> constraint_spec_from_request(const nlohmann::json& request,
                                                                   const std::string& where);

}  // namespace loom::structured
