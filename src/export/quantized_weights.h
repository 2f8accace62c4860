// Exporters whose formats have no GGUF block types (ONNX initializers, the portable
// program's weights) write a quantized model's weights dequantized to f32, and say so
// once per export; the program format, whose safetensors cannot hold blocks, refuses.
#pragma once

#include <string>

#include "loom/core/status.h"
#include "loom/models/model.h"

namespace loom::exporters {

// "112 quantized weights (Q4_K ×98, Q6_K ×14)", or "" when the model has none.
std::string quantized_weights_summary(const models::Model& model);
// Logs that `exporter` writes them dequantized, when there are any.
void note_dequantized_weights(const models::Model& model, const std::string& exporter);

}  // namespace loom::exporters
