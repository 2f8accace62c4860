// Builds the statement tree from tokens with jinja2's grammar and operator
// precedence. Unknown filters/tests and tags loom does not implement (include,
// extends, import, do, …) are errors at parse time, naming the construct and
// its line and column.
#pragma once

#include <string>
#include <vector>

#include "loom/core/status.h"
#include "loom/tokenizer/jinja/ast.h"
#include "loom/tokenizer/jinja/lexer.h"

namespace loom::jinja {

Result<Body> parse(const std::vector<Token>& tokens, const SourceMap& source_map);

}  // namespace loom::jinja
