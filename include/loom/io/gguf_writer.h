// Writing GGUF version 3 files: the metadata in the order given, general.alignment
// (default 32) honoured for the data section and every tensor, tensor infos with
// shapes reversed to GGUF's ne order (see gguf.h), quantized tensors written as
// their blocks. Readers (loom's GgufFile, llama.cpp's gguf) read it back as written.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "loom/core/status.h"
#include "loom/core/tensor.h"
#include "loom/io/gguf.h"

namespace loom::io {

using GgufMetadata = std::vector<std::pair<std::string, GgufValue>>;
using GgufTensors = std::vector<std::pair<std::string, Tensor>>;

// Writes to a temporary file beside `path` and renames it over `path`.
// kInvalidArgument for a duplicate key or tensor name, a tensor dtype GGUF cannot
// hold, a quantized tensor whose last dimension is not a multiple of its block;
// kIoError naming the file when writing fails.
Status write_gguf(const std::string& path, const GgufMetadata& metadata, const GgufTensors& tensors,
                  uint64_t alignment = 32);

}  // namespace loom::io
