#include "onnx_lowering.h"

#include <cmath>
#include <limits>

#include "onnx_lowering_moe.h"
#include "onnx_rope_tables.h"

namespace loom::exporting {
namespace {

using onnx_ir::set_attr;

Result<std::string> in(OnnxLowering& L, const graph::Node& n, size_t i) {
  if (i >= n.inputs.size() || n.inputs[i] == graph::kNoValue)
    return invalid_argument("onnx export: " + n.op + " (" + n.scope + ") has no input " + std::to_string(i));
  return L.in(n.inputs[i]);
}

void out(OnnxLowering& L, const graph::Node& n, const std::string& name) { L.names[n.outputs.at(0)] = name; }

int64_t features(const OnnxLowering& L, graph::ValueId v) {
  const graph::Value& x = L.g.value(v);
  return x.shape.size() == 2 && x.shape[1].is_static() ? x.shape[1].value : -1;
}

// ReduceMean over the last axis, keepdims. Written with axes as an input (opset
// 18); the model fix "reduce_mean_axes_as_attribute" rewrites it for older opsets.
std::string mean_last(OnnxLowering& L, const std::string& x, const std::string& h) {
  onnx::NodeProto& r = L.b.node("ReduceMean", {x, L.b.i64({-1})}, 1, h);
  set_attr(r, "keepdims", int64_t{1});
  return r.output(0);
}

Status lower_embedding(OnnxLowering& L, const graph::Node& n) {
  LOOM_ASSIGN_OR_RETURN(std::string table, in(L, n, 0));
  LOOM_ASSIGN_OR_RETURN(std::string ids, in(L, n, 1));
  out(L, n, L.b.op("Gather", {table, ids}, L.hint(n)));
  return Status::Ok();
}

Status lower_linear(OnnxLowering& L, const graph::Node& n) {
  LOOM_ASSIGN_OR_RETURN(std::string x, in(L, n, 0));
  LOOM_ASSIGN_OR_RETURN(std::string w, in(L, n, 1));
  // W is [out, in] as in nn.Linear; the optimizer folds this Transpose into the initializer.
  onnx::NodeProto& t = L.b.node("Transpose", {w}, 1, L.hint(n));
  set_attr(t, "perm", std::vector<int64_t>{1, 0});
  std::string y = L.b.op("MatMul", {x, t.output(0)}, L.hint(n));
  if (n.inputs.size() > 2 && n.inputs[2] != graph::kNoValue) {
    LOOM_ASSIGN_OR_RETURN(std::string bias, in(L, n, 2));
    y = L.b.op("Add", {y, bias}, L.hint(n));
  }
  out(L, n, y);
  return Status::Ok();
}

// x * rsqrt(mean(x²) + eps) * (w + weight_offset) over groups of w's size, for
// rms_norm (weight input 1) and add_rms_norm's sum (weight input 2).
Result<std::string> rms_norm_of(OnnxLowering& L, const graph::Node& n, const std::string& x, int64_t f, size_t weight_input) {
  LOOM_ASSIGN_OR_RETURN(std::string w, in(L, n, weight_input));
  const std::string h = L.hint(n);
  const int64_t gsz = L.g.value(n.inputs[weight_input]).shape.at(0).value;
  if (f <= 0 || gsz <= 0 || f % gsz) return invalid_argument("onnx export: " + n.op + " (" + n.scope + ") has bad sizes");
  std::string v = x;
  if (gsz != f) v = L.b.op("Reshape", {x, L.b.i64({0, 0, f / gsz, gsz})}, h);  // per-head norm (q/k norm)
  const std::string ms = mean_last(L, L.b.op("Mul", {v, v}, h), h);
  const std::string denom =
      L.b.op("Sqrt", {L.b.op("Add", {ms, L.b.f32_scalar(static_cast<float>(n.attr_float("eps")))}, h)}, h);
  std::string y = L.b.op("Div", {v, denom}, h);
  const double offset = n.attr_float("weight_offset", 0.0);
  // (w + offset) is folded into one initializer by the optimizer.
  const std::string weight = offset != 0.0 ? L.b.op("Add", {w, L.b.f32_scalar(static_cast<float>(offset))}, h) : w;
  y = L.b.op("Mul", {y, weight}, h);
  if (gsz != f) y = L.b.op("Reshape", {y, L.b.i64({0, 0, f})}, h);
  return y;
}

Status lower_rms_norm(OnnxLowering& L, const graph::Node& n) {
  LOOM_ASSIGN_OR_RETURN(std::string x, in(L, n, 0));
  LOOM_ASSIGN_OR_RETURN(std::string y, rms_norm_of(L, n, x, features(L, n.inputs[0]), 1));
  out(L, n, y);
  return Status::Ok();
}

// loom:AddRMSNorm's fused op: outputs (a + b, its RMSNorm).
Status lower_add_rms_norm(OnnxLowering& L, const graph::Node& n) {
  LOOM_ASSIGN_OR_RETURN(std::string a, in(L, n, 0));
  LOOM_ASSIGN_OR_RETURN(std::string b, in(L, n, 1));
  const std::string sum = L.b.op("Add", {a, b}, L.hint(n));
  LOOM_ASSIGN_OR_RETURN(std::string y, rms_norm_of(L, n, sum, features(L, n.inputs[0]), 2));
  L.names[n.outputs.at(0)] = sum;
  L.names[n.outputs.at(1)] = y;
  return Status::Ok();
}

Status lower_layer_norm(OnnxLowering& L, const graph::Node& n) {
  LOOM_ASSIGN_OR_RETURN(std::string x, in(L, n, 0));
  LOOM_ASSIGN_OR_RETURN(std::string w, in(L, n, 1));
  std::string bias;
  if (n.inputs.size() > 2 && n.inputs[2] != graph::kNoValue) {
    LOOM_ASSIGN_OR_RETURN(bias, in(L, n, 2));
  }
  const std::string h = L.hint(n);
  const float eps = static_cast<float>(n.attr_float("eps"));
  if (L.opset >= 17) {
    std::vector<std::string> ins{x, w};
    if (!bias.empty()) ins.push_back(bias);
    onnx::NodeProto& ln = L.b.node("LayerNormalization", ins, 1, h);
    set_attr(ln, "axis", int64_t{-1});
    set_attr(ln, "epsilon", eps);
    out(L, n, ln.output(0));
    return Status::Ok();
  }
  const std::string c = L.b.op("Sub", {x, mean_last(L, x, h)}, h);
  const std::string var = mean_last(L, L.b.op("Mul", {c, c}, h), h);
  std::string y = L.b.op("Div", {c, L.b.op("Sqrt", {L.b.op("Add", {var, L.b.f32_scalar(eps)}, h)}, h)}, h);
  y = L.b.op("Mul", {y, w}, h);
  if (!bias.empty()) y = L.b.op("Add", {y, bias}, h);
  out(L, n, y);
  return Status::Ok();
}

OnnxLowerFn binary(const char* op) {
  return [op](OnnxLowering& L, const graph::Node& n) -> Status {
    LOOM_ASSIGN_OR_RETURN(std::string a, in(L, n, 0));
    LOOM_ASSIGN_OR_RETURN(std::string b, in(L, n, 1));
    out(L, n, L.b.op(op, {a, b}, L.hint(n)));
    return Status::Ok();
  };
}

Status lower_silu(OnnxLowering& L, const graph::Node& n) {
  LOOM_ASSIGN_OR_RETURN(std::string x, in(L, n, 0));
  out(L, n, L.b.op("Mul", {x, L.b.op("Sigmoid", {x}, L.hint(n))}, L.hint(n)));
  return Status::Ok();
}

std::string silu_of(OnnxLowering& L, const std::string& x, const std::string& h) {
  return L.b.op("Mul", {x, L.b.op("Sigmoid", {x}, h)}, h);
}

// silu(gate) · up, from two inputs or one [.., 2I] row laid out gate then up.
Status lower_silu_and_mul(OnnxLowering& L, const graph::Node& n) {
  const std::string h = L.hint(n);
  LOOM_ASSIGN_OR_RETURN(std::string gate, in(L, n, 0));
  std::string up;
  if (n.inputs.size() > 1 && n.inputs[1] != graph::kNoValue) {
    LOOM_ASSIGN_OR_RETURN(up, in(L, n, 1));
  } else {
    const int64_t f = features(L, n.inputs[0]);
    if (f <= 0 || f % 2 != 0) return invalid_argument("onnx export: silu_and_mul (" + n.scope + ") needs an even, fixed row size");
    onnx::NodeProto& sp = L.b.node("Split", {gate, L.b.i64({f / 2, f / 2})}, 2, h);
    set_attr(sp, "axis", int64_t{-1});
    gate = sp.output(0);
    up = sp.output(1);
  }
  out(L, n, L.b.op("Mul", {silu_of(L, gate, h), up}, h));
  return Status::Ok();
}

// One fused projection's columns split into its parts (q, k, v).
Status lower_split_columns(OnnxLowering& L, const graph::Node& n) {
  LOOM_ASSIGN_OR_RETURN(std::string x, in(L, n, 0));
  const std::vector<int64_t>& sizes = n.attr_ints("sizes");
  onnx::NodeProto& sp = L.b.node("Split", {x, L.b.i64(sizes)}, static_cast<int>(sizes.size()), L.hint(n));
  set_attr(sp, "axis", int64_t{-1});
  for (size_t i = 0; i < n.outputs.size(); ++i) L.names[n.outputs[i]] = sp.output(static_cast<int>(i));
  return Status::Ok();
}

Status lower_gelu(OnnxLowering& L, const graph::Node& n) {
  LOOM_ASSIGN_OR_RETURN(std::string x, in(L, n, 0));
  const std::string h = L.hint(n);
  const std::string approx = n.attr_str("approximate", "none");
  std::string inner;
  if (approx == "tanh") {  // 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
    const std::string x3 = L.b.op("Mul", {L.b.op("Mul", {x, x}, h), x}, h);
    const std::string s = L.b.op("Add", {x, L.b.op("Mul", {x3, L.b.f32_scalar(0.044715f)}, h)}, h);
    inner = L.b.op("Tanh", {L.b.op("Mul", {s, L.b.f32_scalar(static_cast<float>(std::sqrt(2.0 / M_PI)))}, h)}, h);
  } else if (approx == "none") {  // 0.5·x·(1 + erf(x / √2))
    inner = L.b.op("Erf", {L.b.op("Mul", {x, L.b.f32_scalar(static_cast<float>(M_SQRT1_2))}, h)}, h);
  } else {
    return unsupported("onnx export: gelu approximate='" + approx + "' (" + n.scope + ")");
  }
  const std::string half_x = L.b.op("Mul", {x, L.b.f32_scalar(0.5f)}, h);
  out(L, n, L.b.op("Mul", {half_x, L.b.op("Add", {inner, L.b.f32_scalar(1.0f)}, h)}, h));
  return Status::Ok();
}

Status lower_scale(OnnxLowering& L, const graph::Node& n) {
  LOOM_ASSIGN_OR_RETURN(std::string x, in(L, n, 0));
  out(L, n, L.b.op("Mul", {x, L.b.f32_scalar(static_cast<float>(n.attr_float("factor")))}, L.hint(n)));
  return Status::Ok();
}

std::string softcap(OnnxLowering& L, const std::string& x, double cap, const std::string& h) {
  const std::string c = L.b.f32_scalar(static_cast<float>(cap));
  return L.b.op("Mul", {L.b.op("Tanh", {L.b.op("Div", {x, c}, h)}, h), c}, h);
}

Status lower_softcap(OnnxLowering& L, const graph::Node& n) {
  LOOM_ASSIGN_OR_RETURN(std::string x, in(L, n, 0));
  out(L, n, softcap(L, x, n.attr_float("cap"), L.hint(n)));
  return Status::Ok();
}

std::string slice_last(OnnxLowering& L, const std::string& x, int64_t begin, int64_t end, const std::string& h) {
  return L.b.op("Slice", {x, L.b.i64({begin}), L.b.i64({end}), L.b.i64({-1})}, h);
}

std::string unsqueeze(OnnxLowering& L, const std::string& x, const std::vector<int64_t>& axes, const std::string& h) {
  return L.b.op("Unsqueeze", {x, L.b.i64(axes)}, h);
}

// cos and sin [B, S, 1, rotary_dim] for this rope node's parameters, built once per
// distinct parameter set: gathered by position_ids from tables computed at export
// time, or (NTK-dynamic rope) computed in the graph.
Result<std::pair<std::string, std::string>> rope_cos_sin(OnnxLowering& L, const graph::Node& n) {
  const std::string key = onnx_rope_key(n);
  if (auto it = L.rope_cos_sin.find(key); it != L.rope_cos_sin.end()) return it->second;
  if (n.attr_str("rope_type") == "dynamic") {
    LOOM_ASSIGN_OR_RETURN(auto cs, onnx_dynamic_rope_cos_sin(L, n));
    return L.rope_cos_sin[key] = cs;
  }
  LOOM_ASSIGN_OR_RETURN(auto tables, onnx_rope_table_initializers(L, n));
  const std::string h = "rope." + std::to_string(L.rope_cos_sin.size());
  auto expand = [&](const std::string& table) {
    const std::string g = L.b.op("Gather", {table, L.position_ids}, h);  // [B, S, half]
    onnx::NodeProto& c = L.b.node("Concat", {g, g}, 1, h);             // [B, S, rotary_dim]
    set_attr(c, "axis", int64_t{-1});
    return unsqueeze(L, c.output(0), {2}, h);                           // [B, S, 1, rotary_dim]
  };
  auto cs = std::make_pair(expand(tables.first), expand(tables.second));
  L.rope_cos_sin[key] = cs;
  return cs;
}

Status lower_rope(OnnxLowering& L, const graph::Node& n) {
  LOOM_ASSIGN_OR_RETURN(std::string x, in(L, n, 0));
  if (n.inputs.at(1) != L.g.input("positions"))
    return unsupported("onnx export: rope (" + n.scope + ") must take the graph's positions input");
  const int64_t heads = n.attr_int("num_heads"), d = n.attr_int("head_dim"), r = n.attr_int("rotary_dim");
  LOOM_ASSIGN_OR_RETURN(auto cs, rope_cos_sin(L, n));
  const std::string h = L.hint(n);
  const std::string x4 = L.b.op("Reshape", {x, L.b.i64({0, 0, heads, d})}, h);
  const std::string xr = r < d ? slice_last(L, x4, 0, r, h) : x4;
  const std::string x1 = slice_last(L, xr, 0, r / 2, h), x2 = slice_last(L, xr, r / 2, r, h);
  onnx::NodeProto& rot = L.b.node("Concat", {L.b.op("Neg", {x2}, h), x1}, 1, h);  // rotate_half
  set_attr(rot, "axis", int64_t{-1});
  std::string y = L.b.op("Add", {L.b.op("Mul", {xr, cs.first}, h), L.b.op("Mul", {rot.output(0), cs.second}, h)}, h);
  if (r < d) {
    onnx::NodeProto& c = L.b.node("Concat", {y, slice_last(L, x4, r, d, h)}, 1, h);
    set_attr(c, "axis", int64_t{-1});
    y = c.output(0);
  }
  out(L, n, L.b.op("Reshape", {y, L.b.i64({0, 0, heads * d})}, h));
  return Status::Ok();
}

// The additive mask [B, 1, S, T] (T = past + S): key j is visible to query i when
// j ≤ past + i (causal, by index in the KV sequence), attention_mask[b, j] is 1,
// and, with a window, (past + i) − j < window. Masked entries get the lowest
// float rather than −inf, so a query row with no visible key (left padding)
// gives a uniform softmax instead of NaN.
}  // namespace

std::string onnx_attention_mask(OnnxLowering& L, int64_t window) {
  if (auto it = L.masks.find(window); it != L.masks.end()) return it->second;
  const std::string h = window > 0 ? "attention_mask.window_" + std::to_string(window) : "attention_mask.causal";
  const std::string s = L.b.op("Gather", {L.b.op("Shape", {L.input_ids}, h), L.b.i64_scalar(1)}, h);
  const std::string t = L.b.op("Gather", {L.b.op("Shape", {L.attention_mask}, h), L.b.i64_scalar(1)}, h);
  const std::string past = L.b.op("Sub", {t, s}, h);
  const std::string one = L.b.i64_scalar(1);
  const std::string kcol = unsqueeze(L, L.b.op("Range", {L.b.i64_scalar(0), t, one}, h), {0}, h);  // [1, T]
  const std::string qrow = unsqueeze(L, L.b.op("Range", {past, t, one}, h), {1}, h);                // [S, 1]
  std::string allowed = L.b.op("LessOrEqual", {kcol, qrow}, h);                                     // [S, T]
  if (window > 0)
    allowed = L.b.op("And", {allowed, L.b.op("Less", {L.b.op("Sub", {qrow, kcol}, h), L.b.i64_scalar(window)}, h)}, h);
  onnx::NodeProto& cast = L.b.node("Cast", {L.attention_mask}, 1, h);
  set_attr(cast, "to", static_cast<int64_t>(onnx::TensorProto::BOOL));
  const std::string pad = unsqueeze(L, cast.output(0), {1, 2}, h);                    // [B, 1, 1, T]
  allowed = L.b.op("And", {unsqueeze(L, allowed, {0, 1}, h), pad}, h);                // [B, 1, S, T]
  const std::string mask = L.b.op(
      "Where", {allowed, L.b.f32_scalar(0.0f), L.b.f32_scalar(std::numeric_limits<float>::lowest())}, h);
  return L.masks[window] = mask;
}

std::string onnx_rope_key(const graph::Node& n) {
  std::string key;
  for (const auto& [k, v] : n.attrs)
    if (k != "num_heads") key += k + "=" + std::visit([](const auto& x) {
                                   if constexpr (std::is_arithmetic_v<std::decay_t<decltype(x)>>) return std::to_string(x);
                                   else if constexpr (std::is_same_v<std::decay_t<decltype(x)>, std::string>) return x;
                                   else return std::string("[…]");
                                 }, v) + ";";
  return key;
}

Result<std::pair<std::string, std::string>> onnx_rope_table_initializers(OnnxLowering& L, const graph::Node& n) {
  const std::string key = onnx_rope_key(n);
  if (auto it = L.rope_tables.find(key); it != L.rope_tables.end()) return it->second;
  LOOM_ASSIGN_OR_RETURN(RopeTables t, rope_tables(n, L.rope_positions));
  const std::string id = std::to_string(L.rope_tables.size());
  return L.rope_tables[key] = {L.b.f32_tensor("rope.cos_table." + id, {t.positions, t.half}, t.cos),
                               L.b.f32_tensor("rope.sin_table." + id, {t.positions, t.half}, t.sin)};
}

namespace {

Status lower_attention(OnnxLowering& L, const graph::Node& n) {
  if (n.inputs.size() > 3 && n.inputs[3] != graph::kNoValue)
    return unsupported("onnx export: attention with sinks (" + n.scope + ")");
  LOOM_ASSIGN_OR_RETURN(std::string q, in(L, n, 0));
  LOOM_ASSIGN_OR_RETURN(std::string k, in(L, n, 1));
  LOOM_ASSIGN_OR_RETURN(std::string v, in(L, n, 2));
  const int64_t layer = n.attr_int("layer"), hq = n.attr_int("num_q_heads"), hkv = n.attr_int("num_kv_heads"),
                d = n.attr_int("head_dim");
  if (!L.past_key.count(layer))
    return internal_error("onnx export: attention (" + n.scope + ") of layer " + std::to_string(layer) +
                          " has no past_key_values input");
  const std::string h = L.hint(n);
  auto heads_first = [&](const std::string& x, int64_t heads) {  // [B, S, H·D] → [B, H, S, D]
    onnx::NodeProto& t = L.b.node("Transpose", {L.b.op("Reshape", {x, L.b.i64({0, 0, heads, d})}, h)}, 1, h);
    set_attr(t, "perm", std::vector<int64_t>{0, 2, 1, 3});
    return t.output(0);
  };
  auto present = [&](const std::string& past, const std::string& x, const std::string& name) {
    onnx::NodeProto& c = L.b.node("Concat", {past, heads_first(x, hkv)}, 1, h);
    set_attr(c, "axis", int64_t{2});
    c.set_output(0, name);
    return name;
  };
  std::string kk = present(L.past_key.at(layer), k, L.present_key.at(layer));
  std::string vv = present(L.past_value.at(layer), v, L.present_value.at(layer));
  if (hq != hkv) {  // GQA: repeat each KV head hq / hkv times ([B, Hkv, T, D] → [B, Hq, T, D])
    auto repeat = [&](const std::string& x) {
      const std::string e = L.b.op("Expand", {unsqueeze(L, x, {2}, h), L.b.i64({1, 1, hq / hkv, 1, 1})}, h);
      return L.b.op("Reshape", {e, L.b.i64({0, hq, -1, d})}, h);
    };
    kk = repeat(kk);
    vv = repeat(vv);
  }
  onnx::NodeProto& kt = L.b.node("Transpose", {kk}, 1, h);
  set_attr(kt, "perm", std::vector<int64_t>{0, 1, 3, 2});
  std::string scores = L.b.op("MatMul", {heads_first(q, hq), kt.output(0)}, h);  // [B, Hq, S, T]
  scores = L.b.op("Mul", {scores, L.b.f32_scalar(static_cast<float>(n.attr_float("scale")))}, h);
  if (const double cap = n.attr_float("softcap", 0.0); cap > 0) scores = softcap(L, scores, cap, h);
  scores = L.b.op("Add", {scores, onnx_attention_mask(L, n.attr_int("sliding_window", 0))}, h);
  onnx::NodeProto& sm = L.b.node("Softmax", {scores}, 1, h);
  set_attr(sm, "axis", int64_t{-1});
  onnx::NodeProto& o = L.b.node("Transpose", {L.b.op("MatMul", {sm.output(0), vv}, h)}, 1, h);
  set_attr(o, "perm", std::vector<int64_t>{0, 2, 1, 3});
  out(L, n, L.b.op("Reshape", {o.output(0), L.b.i64({0, 0, hq * d})}, h));
  return Status::Ok();
}

}  // namespace

Result<std::string> OnnxLowering::in(graph::ValueId v) {
  if (auto it = names.find(v); it != names.end()) return it->second;
  const graph::Value& x = g.value(v);
  if (x.kind == graph::ValueKind::kParameter || x.kind == graph::ValueKind::kConstant) {
    // Quantized weights are dequantized (exporters/quantized_weights.h says so once).
    if (!dtype_is_float(x.tensor.dtype()) && !dtype_is_quantized(x.tensor.dtype()))
      return unsupported("onnx export: parameter '" + x.name + "' has dtype " + std::string(dtype_name(x.tensor.dtype())));
    std::vector<int64_t> dims(x.tensor.shape().begin(), x.tensor.shape().end());
    return names[v] = b.f32_tensor(x.name, dims, x.tensor.to_f32_vector());
  }
  return internal_error("onnx export: value '" + x.name + "' is used before it is lowered");
}

const std::map<std::string, OnnxLowerFn>& onnx_lowering_table() {
  static const std::map<std::string, OnnxLowerFn> table = {
      {"embedding", lower_embedding}, {"linear", lower_linear},   {"rms_norm", lower_rms_norm},
      {"add_rms_norm", lower_add_rms_norm},
      {"layer_norm", lower_layer_norm}, {"add", binary("Add")},   {"mul", binary("Mul")},
      {"silu", lower_silu},           {"gelu", lower_gelu},       {"scale", lower_scale},
      {"softcap", lower_softcap},     {"rope", lower_rope},       {"attention", lower_attention},
      {"silu_and_mul", lower_silu_and_mul}, {"split_columns", lower_split_columns},
      {"moe", onnx_lower_moe},  // onnx_lowering_moe.cc: dense (every expert, weighted by the routing)
  };
  return table;
}

}  // namespace loom::exporting
