// Writes a loaded model as one GGUF file llama.cpp (and loom) can run: the
// hyperparameters as llama.cpp's metadata keys, every parameter under its GGUF
// name (q/k rows back in interleaved rotary order for the Llama family, a tied
// lm_head left out), norms and biases as F32, matrices as stored or converted to
// the type `tensor_type` picks. Tokenizer metadata comes from the caller (the
// tokenizer layer builds it), so models/ stays free of tokenizer code.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "loom/core/status.h"
#include "loom/io/gguf.h"
#include "loom/models/model.h"

namespace loom::models {

struct GgufSaveOptions {
  // Extra metadata written after the model's (tokenizer.ggml.*, general.name).
  std::vector<std::pair<std::string, io::GgufValue>> metadata;
  // For each 2-D parameter (by its loom name): the dtype to store it as, or
  // nullopt to keep it. Unset: keep every dtype.
  std::function<Result<std::optional<DType>>(const std::string& name, const Tensor& t)> tensor_type;
  // llama.cpp's general.file_type (LLAMA_FTYPE_*), when the caller knows it.
  std::optional<uint32_t> file_type;
  // Called once per tensor written (name, index, count), for progress.
  std::function<void(const std::string& name, size_t index, size_t count)> on_tensor;
};

Status save_gguf(const Model& model, const std::string& path, const GgufSaveOptions& options = {});

}  // namespace loom::models
