// Fixes on the final ONNX model (stage "model fixes" of onnx_exporter.cc):
// rewrites of the lowered onnx::ModelProto that dodge what a runtime or an
// older opset cannot take, registered by name like the registries.h fixes and
// run in registration order. Each returns how many places it changed.
#pragma once

#include <onnx/onnx_pb.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "loom/core/status.h"

namespace loom::exporting {

using OnnxModelFixFn = std::function<Result<int>(onnx::ModelProto& model, int opset)>;

void register_onnx_model_fix(const std::string& name, OnnxModelFixFn fix);

// Runs every registered fix; (name, changes) of each, or the first error named after its fix.
Result<std::vector<std::pair<std::string, int>>> run_onnx_model_fixes(onnx::ModelProto& model, int opset);

// The exporter's own fixes and node fixes (idempotent; called by export_onnx).
void register_builtin_onnx_fixes();

}  // namespace loom::exporting
