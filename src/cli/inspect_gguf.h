// `loom inspect FILE.gguf`: the header of a GGUF file as it is stored, without
// mapping it onto a model (versions, metadata, tensor types and shapes).
#pragma once

#include <string>

namespace loom::cli {

bool is_gguf_path(const std::string& path);
// Prints to stdout; throws loom::Error naming what is wrong with the file.
void inspect_gguf(const std::string& path);

}  // namespace loom::cli
