#include "onnx_lowering_moe.h"

namespace loom::exporting {

using onnx_ir::set_attr;

Status onnx_lower_moe(OnnxLowering& L, const graph::Node& n) {
  const std::string h = L.hint(n);
  auto input = [&](size_t i) -> Result<std::string> {
    if (i >= n.inputs.size() || n.inputs[i] == graph::kNoValue)
      return invalid_argument("onnx export: moe (" + n.scope + ") has no input " + std::to_string(i));
    return L.in(n.inputs[i]);
  };
  if (L.opset < 13) return unsupported("onnx export: moe (" + n.scope + ") needs opset 13 or newer");
  if (n.attr_str("routing", "softmax_topk") != "softmax_topk" || n.attr_float("swiglu_limit", 0.0) > 0 ||
      n.inputs.size() > 6)
    return unsupported("onnx export: moe (" + n.scope + ") with gpt-oss's routing, clamped SwiGLU or biases");
  if (n.attr_str("activation", "silu") != "silu")
    return unsupported("onnx export: moe (" + n.scope + ") with activation " + n.attr_str("activation", "silu"));
  const graph::SymShape& gu_shape = L.g.value(n.inputs.at(2)).shape;
  const int64_t E = gu_shape.at(0).value, I = gu_shape.at(1).value / 2, H = gu_shape.at(2).value;
  const int64_t k = n.attr_int("top_k");
  LOOM_ASSIGN_OR_RETURN(std::string x, input(0));
  LOOM_ASSIGN_OR_RETURN(std::string router, input(1));
  LOOM_ASSIGN_OR_RETURN(std::string gate_up, input(2));
  LOOM_ASSIGN_OR_RETURN(std::string down, input(3));
  auto transpose = [&](const std::string& t, std::vector<int64_t> perm) {
    onnx::NodeProto& tr = L.b.node("Transpose", {t}, 1, h);
    set_attr(tr, "perm", perm);
    return tr.output(0);
  };
  auto reduce_sum = [&](const std::string& t, int64_t axis, int64_t keepdims) {
    onnx::NodeProto& r = L.b.node("ReduceSum", {t, L.b.i64({axis})}, 1, h);
    set_attr(r, "keepdims", keepdims);
    return r.output(0);
  };

  // Routing: softmax over all experts, top-k (ONNX TopK keeps the lower index
  // first among equal values, as loom does), optional renormalisation, the
  // weights scattered back to a dense [B, S, E].
  const std::string logits = L.b.op("MatMul", {x, transpose(router, {1, 0})}, h);
  onnx::NodeProto& sm = L.b.node("Softmax", {logits}, 1, h);
  set_attr(sm, "axis", int64_t{-1});
  onnx::NodeProto& top = L.b.node("TopK", {sm.output(0), L.b.i64({k})}, 2, h);
  set_attr(top, "axis", int64_t{-1});
  set_attr(top, "largest", int64_t{1});
  set_attr(top, "sorted", int64_t{1});
  std::string wk = top.output(0);
  if (n.attr_int("norm_topk_prob") != 0) wk = L.b.op("Div", {wk, reduce_sum(wk, -1, 1)}, h);
  const std::string zeros = L.b.op("Mul", {sm.output(0), L.b.f32_scalar(0.0f)}, h);
  onnx::NodeProto& sc = L.b.node("ScatterElements", {zeros, top.output(1), wk}, 1, h);
  set_attr(sc, "axis", int64_t{-1});

  // Every expert on every token: x [B, S, 1, 1, H] · gate_upᵀ [E, H, 2I] → [B, S, E, 1, 2I].
  const std::string x5 = L.b.op("Reshape", {x, L.b.i64({0, 0, 1, 1, H})}, h);
  const std::string gu =
      L.b.op("Reshape", {L.b.op("MatMul", {x5, transpose(gate_up, {0, 2, 1})}, h), L.b.i64({0, 0, E, 2 * I})}, h);
  onnx::NodeProto& sp = L.b.node("Split", {gu, L.b.i64({I, I})}, 2, h);
  set_attr(sp, "axis", int64_t{-1});
  const std::string act = L.b.op(
      "Mul", {L.b.op("Mul", {sp.output(0), L.b.op("Sigmoid", {sp.output(0)}, h)}, h), sp.output(1)}, h);
  const std::string act5 = L.b.op("Reshape", {act, L.b.i64({0, 0, E, 1, I})}, h);
  const std::string y =
      L.b.op("Reshape", {L.b.op("MatMul", {act5, transpose(down, {0, 2, 1})}, h), L.b.i64({0, 0, E, H})}, h);
  const std::string w4 = L.b.op("Reshape", {sc.output(0), L.b.i64({0, 0, E, 1})}, h);
  std::string out = reduce_sum(L.b.op("Mul", {y, w4}, h), 2, 0);

  if (n.inputs.size() > 5 && n.inputs[4] != graph::kNoValue) {
    LOOM_ASSIGN_OR_RETURN(std::string shared, input(4));
    LOOM_ASSIGN_OR_RETURN(std::string shared_gate, input(5));
    const std::string g = L.b.op("Sigmoid", {L.b.op("MatMul", {x, transpose(shared_gate, {1, 0})}, h)}, h);
    out = L.b.op("Add", {out, L.b.op("Mul", {g, shared}, h)}, h);
  }
  L.names[n.outputs.at(0)] = out;
  return Status::Ok();
}

}  // namespace loom::exporting
