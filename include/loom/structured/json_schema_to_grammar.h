// JSON Schema → grammar (as GBNF text, then parsed). Supported: type (one or a list),
// properties / required / additionalProperties (declared properties in their order,
// optional ones omissible, extra keys only when additionalProperties allows them and
// never a declared key), enum, const, items / prefixItems / minItems / maxItems,
// anyOf / oneOf (as alternatives), a one-element allOf, $ref to #, #/$defs/… and
// #/definitions/… (recursion allowed), string minLength / maxLength / pattern / format
// (date, time, date-time, uuid), integer and number minimum / maximum /
// exclusiveMinimum / exclusiveMaximum (bounded numbers are written without an exponent,
// at most 16 decimal places). Annotations (title, description, default, examples, …) are
// ignored. Any other keyword is refused by name and path when `strict`, ignored when not.
// Output is compact JSON: at most one space where JSON allows whitespace.
#pragma once

#include <string>
#include <string_view>

#include "loom/structured/grammar.h"

namespace loom::structured {

Result<std::string> json_schema_to_gbnf(std::string_view schema_json, bool strict = true);
Result<Grammar> json_schema_to_grammar(std::string_view schema_json, bool strict = true);
// A JSON object of any content (response_format json_object, as OpenAI means it and
// llama.cpp's json.gbnf starts), compact spacing.
Result<Grammar> any_json_grammar();
std::string any_json_gbnf();

}  // namespace loom::structured
