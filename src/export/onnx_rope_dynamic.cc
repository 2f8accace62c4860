// NTK-dynamic rope ("dynamic", Transformers' _compute_dynamic_ntk_parameters)
// for the ONNX lowering. Its frequencies depend on the sequence length at run
// time, so no table can be precomputed: the graph computes, per batch row b,
//   len_b   = max(max_s position_ids[b, s] + 1, max_position_embeddings)
//   base_b  = theta · (factor · len_b / max_position_embeddings − (factor − 1)) ^ (dim / (dim − 2))
//   inv_b,i = 1 / base_b ^ (2i / dim)
//   cos/sin(position_ids[b, s] · inv_b,i)
// That is loom's own semantics (runtime/op_kernels.cc: each sequence of a step
// takes the max position of its chunk; Transformers takes the max over the whole
// batch): a row at or below max_position_embeddings gets exactly the default
// frequencies. The scalar part runs in double and the rest in float, as
// runtime/cpu/rope_params.cc does (Python scalars are doubles, tensors f32).
#include <cmath>

#include "onnx_lowering.h"

namespace loom::exporting {

using onnx_ir::set_attr;

Result<std::pair<std::string, std::string>> onnx_dynamic_rope_cos_sin(OnnxLowering& L, const graph::Node& n) {
  const std::string where = "onnx export: rope 'dynamic' (" + n.scope + "): ";
  const int64_t dim = n.attr_int("rotary_dim");
  const double theta = n.attr_float("theta"), factor = n.attr_float("factor", 0.0);
  int64_t max_pos = n.attr_int("max_position_embeddings", 0);
  if (max_pos < 1) max_pos = L.rope_positions;
  if (dim < 4 || dim % 2) return invalid_argument(where + "rotary_dim " + std::to_string(dim) + " must be even and ≥ 4");
  if (!(theta > 0) || !std::isfinite(theta)) return invalid_argument(where + "theta must be positive");
  if (!(factor > 0) || !std::isfinite(factor)) return invalid_argument(where + "rope_scaling.factor is missing or not positive");
  if (max_pos < 1) return invalid_argument(where + "max_position_embeddings is missing");

  onnx_ir::GraphBuilder& b = L.b;
  const std::string h = "rope.dynamic." + std::to_string(L.rope_cos_sin.size());
  auto cast = [&](const std::string& x, int to) {
    onnx::NodeProto& c = b.node("Cast", {x}, 1, h);
    set_attr(c, "to", static_cast<int64_t>(to));
    return c.output(0);
  };
  auto f64 = [&](double v) {  // a double scalar initializer
    onnx::TensorProto* t = b.graph().add_initializer();
    const std::string name = b.fresh(h + "/const_f64");
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::DOUBLE);
    t->add_double_data(v);
    return name;
  };

  // len_b [B, 1] (double)
  onnx::NodeProto* mx;
  if (L.opset >= 18) {
    mx = &b.node("ReduceMax", {L.position_ids, b.i64({1})}, 1, h);
  } else {
    mx = &b.node("ReduceMax", {L.position_ids}, 1, h);
    set_attr(*mx, "axes", std::vector<int64_t>{1});
  }
  set_attr(*mx, "keepdims", int64_t{1});
  const std::string seq_len = cast(b.op("Add", {mx->output(0), b.i64_scalar(1)}, h), onnx::TensorProto::DOUBLE);
  const std::string len = b.op("Max", {seq_len, f64(static_cast<double>(max_pos))}, h);
  // base_b = theta · ((factor · len / max_pos) − (factor − 1)) ^ (dim / (dim − 2)), in double, then f32
  std::string ratio = b.op("Div", {b.op("Mul", {len, f64(factor)}, h), f64(static_cast<double>(max_pos))}, h);
  ratio = b.op("Sub", {ratio, f64(factor - 1)}, h);
  const std::string base = b.op(
      "Mul", {f64(theta), b.op("Pow", {ratio, f64(static_cast<double>(dim) / static_cast<double>(dim - 2))}, h)}, h);
  const std::string base_f = cast(base, onnx::TensorProto::FLOAT);  // [B, 1]
  // inv_b,i = 1 / base_b ^ (f32(2i) / f32(dim))   [B, half]
  std::vector<float> exponents(static_cast<size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i)
    exponents[static_cast<size_t>(i)] = static_cast<float>(2 * i) / static_cast<float>(dim);
  const std::string exps = b.f32_tensor(b.fresh(h + "/exponents"), {dim / 2}, exponents);
  const std::string inv = b.op("Reciprocal", {b.op("Pow", {base_f, exps}, h)}, h);
  // angle [B, S, half] = f32(position) · inv
  const std::string pos = b.op("Unsqueeze", {cast(L.position_ids, onnx::TensorProto::FLOAT), b.i64({2})}, h);
  const std::string angle = b.op("Mul", {b.op("Unsqueeze", {inv, b.i64({1})}, h), pos}, h);
  auto widen = [&](const std::string& op) {  // [B, S, half] → [B, S, 1, rotary_dim]
    const std::string t = b.op(op, {angle}, h);
    onnx::NodeProto& c = b.node("Concat", {t, t}, 1, h);
    set_attr(c, "axis", int64_t{-1});
    return b.op("Unsqueeze", {c.output(0), b.i64({2})}, h);
  };
  return std::make_pair(widen("Cos"), widen("Sin"));
}

}  // namespace loom::exporting
