// The ONNX backend's built-in workarounds, each at the lowest stage where it can
// be expressed:
//   node fix  "logits_for_every_position" (loom graph): drops gather_rows, so the
//             LM head runs on every row — Optimum's decoders return logits for
//             each position, and the batched graph has no packed row indices;
//   model fix "reduce_mean_axes_as_attribute" (ONNX model): the lowering writes
//             ReduceMean with its axes as an input (opset ≥ 18); opsets 13–17
//             take them as an attribute and reject the input.
#include <mutex>

#include "loom/export/registries.h"
#include "onnx_graph_builder.h"
#include "onnx_model_fixes.h"

namespace loom::exporting {
namespace {

struct ModelFix {
  std::string name;
  OnnxModelFixFn fn;
};

std::mutex& fixes_mutex() {
  static std::mutex m;
  return m;
}

std::vector<ModelFix>& model_fixes() {
  static std::vector<ModelFix> v;
  return v;
}

Result<int> reduce_mean_axes_as_attribute(onnx::ModelProto& model, int opset) {
  if (opset >= 18) return 0;
  onnx::GraphProto& g = *model.mutable_graph();
  int changed = 0;
  for (onnx::NodeProto& n : *g.mutable_node()) {
    if (n.op_type() != "ReduceMean" || n.input_size() < 2) continue;
    const onnx::TensorProto* axes = nullptr;
    for (const onnx::TensorProto& t : g.initializer())
      if (t.name() == n.input(1)) axes = &t;
    std::vector<int64_t> a;
    if (!axes || !onnx_ir::read_i64(*axes, &a))
      return unsupported("ReduceMean node '" + n.name() + "' has axes that are not a constant; opset " +
                         std::to_string(opset) + " needs them as an attribute");
    n.mutable_input()->RemoveLast();
    onnx_ir::set_attr(n, "axes", a);
    ++changed;
  }
  return changed;
}

}  // namespace

void register_onnx_model_fix(const std::string& name, OnnxModelFixFn fix) {
  std::lock_guard<std::mutex> lock(fixes_mutex());
  model_fixes().push_back({name, std::move(fix)});
}

Result<std::vector<std::pair<std::string, int>>> run_onnx_model_fixes(onnx::ModelProto& model, int opset) {
  std::vector<ModelFix> fixes;
  {
    std::lock_guard<std::mutex> lock(fixes_mutex());
    fixes = model_fixes();
  }
  std::vector<std::pair<std::string, int>> done;
  for (const ModelFix& f : fixes) {
    Result<int> r = f.fn(model, opset);
    if (!r.ok()) return Status(r.status().code(), "onnx model fix " + f.name + ": " + r.status().message());
    done.emplace_back(f.name, r.value());
  }
  return done;
}

void register_builtin_onnx_fixes() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_node_fix("onnx", "gather_rows", "logits_for_every_position", [](graph::Graph& g, graph::NodeId id) {
      const graph::Node& n = g.node(id);
      const graph::ValueId x = n.inputs.at(0), y = n.outputs.at(0);
      g.replace_uses(y, x);
      return true;
    });
    register_onnx_model_fix("reduce_mean_axes_as_attribute", reduce_mean_axes_as_attribute);
  });
}

}  // namespace loom::exporting
