// Reading a whole JSON file with errors that name it.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "loom/core/status.h"

namespace loom::io {

// kNotFound if absent, kIoError if unreadable, kParseError (with the parser's
// line/column) if not JSON.
Result<nlohmann::json> read_json_file(const std::string& path);

}  // namespace loom::io
