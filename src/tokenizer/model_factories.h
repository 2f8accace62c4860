// Per-model factories behind make_model().
#pragma once

#include "tokenizer/components.h"

namespace loom::tok {

Result<std::unique_ptr<Model>> make_bpe(const json& j, const std::string& path, ModelTables* tables);
Result<std::unique_ptr<Model>> make_unigram(const json& j, const std::string& path);
Result<std::unique_ptr<Model>> make_wordpiece(const json& j, const std::string& path, ModelTables* tables);
Result<std::unique_ptr<Model>> make_wordlevel(const json& j, const std::string& path, ModelTables* tables);

}  // namespace loom::tok
