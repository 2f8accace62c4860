// The portable exporter's skip list (upstream's EXPORT_SKIPS), in one file so
// it stays visible and short; the ONNX exporter keeps its own in
// onnx_skip_lists.cc. Every entry says why and should go away with its reason.
// export_portable refuses a listed architecture with the reason, and
// tests/export/portable_exporter_test.cc exports every fixture variant not
// listed and expects the listed ones to be refused with their reason.
#include "loom/export/portable_exporter.h"

namespace loom::exporting {

const std::map<std::string, std::string>& portable_export_skips() {
  // model_type → reason.
  static const std::map<std::string, std::string> list = {
      {"mixtral", "the routed-experts op 'moe' has no loom_portable kernel yet (top-k routing over per-expert weights)"},
      {"qwen2_moe", "the routed-experts op 'moe' has no loom_portable kernel yet (top-k routing, shared expert)"},
  };
  return list;
}

std::string portable_export_skip_reason(const std::string& model_type) {
  const auto& list = portable_export_skips();
  auto it = list.find(model_type);
  return it == list.end() ? "" : it->second;
}

}  // namespace loom::exporting
