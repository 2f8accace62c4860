// generation_config.json → GenerationConfig, read with io's typed field reader
// (generation/ itself uses only core). Unknown keys are ignored (Transformers keeps
// them as attributes; nothing in loom reads them).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "loom/core/status.h"
#include "loom/generation/generation_config.h"

namespace loom::batching {

// The keys GenerationConfig holds; null means "use the default". Type errors are
// kParseError naming the source and field; the result is validate()d.
Result<GenerationConfig> generation_config_from_json(const nlohmann::json& j, const std::string& source);
Result<GenerationConfig> generation_config_from_file(const std::string& path);
// dir/generation_config.json, or the defaults when that file does not exist (a
// checkpoint need not ship one), and for a single-file model (a .gguf path).
// kNotFound if `dir` itself is missing.
Result<GenerationConfig> generation_config_from_dir_or_default(const std::string& dir);

}  // namespace loom::batching
