#include "export/quantized_weights.h"

#include <map>

#include "loom/core/logging.h"

namespace loom::exporters {

std::string quantized_weights_summary(const models::Model& model) {
  std::map<DType, int> per_type;
  int total = 0;
  for (const auto& [name, t] : model.parameters())
    if (dtype_is_quantized(t.dtype())) {
      ++per_type[t.dtype()];
      ++total;
    }
  if (total == 0) return "";
  std::string s = std::to_string(total) + " quantized weights (";
  bool first = true;
  for (const auto& [dt, n] : per_type) {
    s += (first ? "" : ", ") + std::string(dtype_name(dt)) + " ×" + std::to_string(n);
    first = false;
  }
  return s + ")";
}

void note_dequantized_weights(const models::Model& model, const std::string& exporter) {
  const std::string s = quantized_weights_summary(model);
  if (!s.empty())
    log_warn(exporter + ": the model's " + s + " are written dequantized to f32 (the format has no GGUF block types)");
}

}  // namespace loom::exporters
