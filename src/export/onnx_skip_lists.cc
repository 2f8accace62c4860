// The ONNX exporter's skip and disable lists (upstream's EXPORT_SKIPS and
// ONNX_DISABLE_OPTIMIZE), kept in this one file so they stay visible and short.
// Every entry says why; an entry should go away when its reason does. The
// exporter consults both (export_onnx refuses a skipped architecture with the
// reason, the optimizer stage is skipped for a disabled one) and so do the tests
// (tests/export/onnx_exporter_test.cc exports every fixture not skipped and
// expects the skipped ones to be refused with their reason).
#include "loom/export/onnx_exporter.h"

namespace loom::exporting {

const std::map<std::string, std::string>& onnx_export_skips() {
  // "<model_type>" or "<model_type>:ort" → reason. Empty: every architecture loom
  // runs exports with both op sets. (Patterns an op set cannot take are handled
  // per node instead — e.g. --onnx-ops ort writes plain ops for NTK-dynamic rope,
  // see OnnxExportReport::contrib_fallbacks — so they need no entry here.)
  static const std::map<std::string, std::string> list = {
      {"gpt_oss", "gpt-oss: no lowering of attention sinks or of the moe op's biases, routing and clamped SwiGLU"},
  };
  return list;
}

std::string onnx_export_skip_reason(const std::string& model_type, const std::string& ops) {
  const auto& list = onnx_export_skips();
  if (auto it = list.find(model_type); it != list.end()) return it->second;
  if (auto it = list.find(model_type + ":" + ops); it != list.end()) return it->second;
  return "";
}

const std::map<std::string, std::string>& onnx_disable_optimize() {
  // model_type → reason. Empty: every architecture loom exports is optimized.
  static const std::map<std::string, std::string> list = {};
  return list;
}

}  // namespace loom::exporting
