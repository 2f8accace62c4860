// --onnx-ops ort: lowerings to ONNX Runtime contrib ops (docs/ContribOperators.md
// of ONNX Runtime; behaviour checked against onnxruntime 1.30), consulted before
// the plain table. Each writes the contrib op where it expresses the node exactly
// and otherwise writes the plain lowering, noting why in L.fallbacks:
//   rope      → com.microsoft RotaryEmbedding(x [B,S,H·D], position_ids, cos_cache, sin_cache),
//               non-interleaved (rotate-half), rotary_embedding_dim for partial rotary;
//               the caches are the plain lowering's tables (yarn's attention scaling
//               included). NTK-dynamic rope: plain ops (one cache serves the whole
//               batch, dynamic frequencies differ per sequence).
//   attention → com.microsoft GroupQueryAttention(q, k, v, past_key, past_value,
//               seqlens_k, total_sequence_length, -, -, -, attention_bias) → output,
//               present_key, present_value. seqlens_k = T − 1 for every row and
//               total_sequence_length = T (T = attention_mask's length), so the
//               op's causal rule is the plain lowering's (by index in the KV
//               sequence); padding comes in attention_bias (the plain lowering's
//               causal + padding mask [B,1,S,T]); local_window_size = the sliding
//               window (ORT 1.30 keeps keys j with q − j < window, as loom does);
//               softcap and scale as attributes. ORT needs head_size % 8 == 0,
//               else plain ops. ORT refuses a batch > 1 continuing a prompt of
//               S > 1 tokens after a past (decode steps and first prompts run):
//               a static file of that shape gets plain ops; a dynamic file fails
//               at run time on such a step.
//   rms_norm  → com.microsoft SkipSimplifiedLayerNormalization(a, b, γ) when its
//               input is an add of two activations (the residual: its 4th output,
//               a + b, replaces the add's value), else SimplifiedLayerNormalization
//               (ONNX Runtime registers it in the default domain; per head for q/k norms).
//   add_rms_norm → SkipSimplifiedLayerNormalization(a, b, γ): the norm and the sum (a + b).
#include "onnx_lowering.h"

namespace loom::exporting {
namespace {

using onnx_ir::set_attr;

constexpr const char* kMs = "com.microsoft";

Status plain(OnnxLowering& L, const graph::Node& n, const std::string& why) {
  L.fallbacks.push_back(n.op + " (" + n.scope + "): plain ops, " + why);
  return onnx_lowering_table().at(n.op)(L, n);
}

onnx::NodeProto& contrib(OnnxLowering& L, const std::string& op, const std::vector<std::string>& inputs, int n_out,
                         const std::string& hint) {
  onnx::NodeProto& n = L.b.node(op, inputs, n_out, hint);
  n.set_domain(kMs);
  return n;
}

Status lower_rope_ort(OnnxLowering& L, const graph::Node& n) {
  if (n.attr_str("rope_type") == "dynamic")
    return plain(L, n, "NTK-dynamic frequencies differ per sequence and RotaryEmbedding takes one cos/sin cache");
  if (n.inputs.at(1) != L.g.input("positions"))
    return unsupported("onnx export: rope (" + n.scope + ") must take the graph's positions input");
  LOOM_ASSIGN_OR_RETURN(std::string x, L.in(n.inputs.at(0)));
  LOOM_ASSIGN_OR_RETURN(auto tables, onnx_rope_table_initializers(L, n));
  onnx::NodeProto& r = contrib(L, "RotaryEmbedding", {x, L.position_ids, tables.first, tables.second}, 1, L.hint(n));
  set_attr(r, "interleaved", int64_t{0});
  set_attr(r, "num_heads", n.attr_int("num_heads"));
  set_attr(r, "rotary_embedding_dim", n.attr_int("rotary_dim"));
  L.names[n.outputs.at(0)] = r.output(0);
  return Status::Ok();
}

// seqlens_k [B] = T − 1 and total_sequence_length = T, int32, from attention_mask [B, T].
// A static file gets them as constants, which also lets ONNX Runtime's shape
// inference of present_* (max(past, total_sequence_length)) agree with the declared dims.
void gqa_lengths(OnnxLowering& L) {
  if (!L.gqa_seqlens_k.empty()) return;
  const std::string h = "group_query_attention.lengths";
  if (L.static_batch > 0) {
    const auto t = static_cast<int32_t>(L.static_past + L.static_sequence);
    auto i32 = [&](const std::string& name, const std::vector<int64_t>& dims, int64_t n, int32_t v) {
      onnx::TensorProto* c = L.b.graph().add_initializer();
      const std::string id = L.b.fresh(h + "/" + name);
      c->set_name(id);
      c->set_data_type(onnx::TensorProto::INT32);
      for (int64_t d : dims) c->add_dims(d);
      for (int64_t i = 0; i < n; ++i) c->add_int32_data(v);
      return id;
    };
    L.gqa_total_length = i32("total_sequence_length", {}, 1, t);
    L.gqa_seqlens_k = i32("seqlens_k", {L.static_batch}, L.static_batch, t - 1);
    return;
  }
  auto cast32 = [&](const std::string& x) {
    onnx::NodeProto& c = L.b.node("Cast", {x}, 1, h);
    set_attr(c, "to", static_cast<int64_t>(onnx::TensorProto::INT32));
    return c.output(0);
  };
  const std::string t = L.b.op("Gather", {L.b.op("Shape", {L.attention_mask}, h), L.b.i64_scalar(1)}, h);
  const std::string batch = L.b.op("Slice", {L.b.op("Shape", {L.input_ids}, h), L.b.i64({0}), L.b.i64({1})}, h);
  L.gqa_total_length = cast32(t);
  L.gqa_seqlens_k = cast32(L.b.op("Expand", {L.b.op("Sub", {t, L.b.i64_scalar(1)}, h), batch}, h));
}

Status lower_attention_ort(OnnxLowering& L, const graph::Node& n) {
  if (n.inputs.size() > 3 && n.inputs[3] != graph::kNoValue)
    return unsupported("onnx export: attention with sinks (" + n.scope + ")");
  const int64_t layer = n.attr_int("layer"), hq = n.attr_int("num_q_heads"), hkv = n.attr_int("num_kv_heads"),
                d = n.attr_int("head_dim");
  if (d % 8 != 0) return plain(L, n, "GroupQueryAttention needs head_size % 8 == 0, got " + std::to_string(d));
  if (hkv < 1 || hq % hkv != 0) return plain(L, n, "num_q_heads is not a multiple of num_kv_heads");
  if (L.static_batch > 1 && L.static_sequence > 1 && L.static_past > 0)
    return plain(L, n, "GroupQueryAttention refuses a batch > 1 continuing a prompt (sequence > 1) after a past");
  if (!L.past_key.count(layer))
    return internal_error("onnx export: attention (" + n.scope + ") of layer " + std::to_string(layer) +
                          " has no past_key_values input");
  std::vector<std::string> qkv;
  for (size_t i = 0; i < 3; ++i) {
    LOOM_ASSIGN_OR_RETURN(std::string x, L.in(n.inputs.at(i)));
    qkv.push_back(x);
  }
  gqa_lengths(L);
  const std::string bias = onnx_attention_mask(L, 0);  // causal (redundant) + padding; the window is an attribute
  onnx::NodeProto& a = contrib(L, "GroupQueryAttention",
                               {qkv[0], qkv[1], qkv[2], L.past_key.at(layer), L.past_value.at(layer), L.gqa_seqlens_k,
                                L.gqa_total_length, "", "", "", bias},
                               3, L.hint(n));
  a.set_output(1, L.present_key.at(layer));
  a.set_output(2, L.present_value.at(layer));
  set_attr(a, "num_heads", hq);
  set_attr(a, "kv_num_heads", hkv);
  set_attr(a, "scale", static_cast<float>(n.attr_float("scale")));
  if (const double cap = n.attr_float("softcap", 0.0); cap > 0) set_attr(a, "softcap", static_cast<float>(cap));
  if (const int64_t w = n.attr_int("sliding_window", 0); w > 0) set_attr(a, "local_window_size", w);
  L.names[n.outputs.at(0)] = a.output(0);
  return Status::Ok();
}

// An add of two activations of the norm's row size (the residual stream), or null.
const graph::Node* residual_add(const OnnxLowering& L, graph::ValueId x, int64_t features) {
  const graph::Value& v = L.g.value(x);
  if (v.kind != graph::ValueKind::kNode || v.producer < 0) return nullptr;
  const graph::Node& add = L.g.node(v.producer);
  if (add.op != "add" || add.inputs.size() != 2) return nullptr;
  for (graph::ValueId i : add.inputs) {
    const graph::Value& iv = L.g.value(i);
    if (iv.kind != graph::ValueKind::kNode || iv.shape.size() != 2 || !iv.shape[1].is_static() ||
        iv.shape[1].value != features)
      return nullptr;
  }
  return &add;
}

Status lower_rms_norm_ort(OnnxLowering& L, const graph::Node& n) {
  LOOM_ASSIGN_OR_RETURN(std::string x, L.in(n.inputs.at(0)));
  LOOM_ASSIGN_OR_RETURN(std::string w, L.in(n.inputs.at(1)));
  const std::string h = L.hint(n);
  const graph::Value& xv = L.g.value(n.inputs[0]);
  const int64_t f = xv.shape.size() == 2 && xv.shape[1].is_static() ? xv.shape[1].value : -1;
  const int64_t gsz = L.g.value(n.inputs[1]).shape.at(0).value;
  if (f <= 0 || gsz <= 0 || f % gsz) return invalid_argument("onnx export: rms_norm (" + n.scope + ") has bad sizes");
  const float eps = static_cast<float>(n.attr_float("eps"));
  // (w + offset) is folded into one initializer by the optimizer.
  if (const double offset = n.attr_float("weight_offset", 0.0); offset != 0.0)
    w = L.b.op("Add", {w, L.b.f32_scalar(static_cast<float>(offset))}, h);
  if (gsz == f) {
    if (const graph::Node* add = residual_add(L, n.inputs[0], f)) {
      LOOM_ASSIGN_OR_RETURN(std::string a, L.in(add->inputs[0]));
      LOOM_ASSIGN_OR_RETURN(std::string b, L.in(add->inputs[1]));
      onnx::NodeProto& s = contrib(L, "SkipSimplifiedLayerNormalization", {a, b, w}, 4, h);
      s.set_output(1, "");
      s.set_output(2, "");
      set_attr(s, "epsilon", eps);
      // Later users of the sum read the fused op's; the plain Add goes dead unless already used.
      L.names[n.inputs[0]] = s.output(3);
      L.names[n.outputs.at(0)] = s.output(0);
      return Status::Ok();
    }
  }
  std::string v = x;
  if (gsz != f) v = L.b.op("Reshape", {x, L.b.i64({0, 0, f / gsz, gsz})}, h);  // per-head norm (q/k norm)
  onnx::NodeProto& s = L.b.node("SimplifiedLayerNormalization", {v, w}, 1, h);  // default domain in ORT
  set_attr(s, "axis", int64_t{-1});
  set_attr(s, "epsilon", eps);
  set_attr(s, "stash_type", int64_t{1});
  std::string y = s.output(0);
  if (gsz != f) y = L.b.op("Reshape", {y, L.b.i64({0, 0, f})}, h);
  L.names[n.outputs.at(0)] = y;
  return Status::Ok();
}

// add_rms_norm is SkipSimplifiedLayerNormalization's own shape: output 0 the norm,
// output 3 the sum (input + skip).
Status lower_add_rms_norm_ort(OnnxLowering& L, const graph::Node& n) {
  LOOM_ASSIGN_OR_RETURN(std::string a, L.in(n.inputs.at(0)));
  LOOM_ASSIGN_OR_RETURN(std::string b, L.in(n.inputs.at(1)));
  LOOM_ASSIGN_OR_RETURN(std::string w, L.in(n.inputs.at(2)));
  const std::string h = L.hint(n);
  if (const double offset = n.attr_float("weight_offset", 0.0); offset != 0.0)
    w = L.b.op("Add", {w, L.b.f32_scalar(static_cast<float>(offset))}, h);
  onnx::NodeProto& s = contrib(L, "SkipSimplifiedLayerNormalization", {a, b, w}, 4, h);
  s.set_output(1, "");
  s.set_output(2, "");
  set_attr(s, "epsilon", static_cast<float>(n.attr_float("eps")));
  L.names[n.outputs.at(0)] = s.output(3);
  L.names[n.outputs.at(1)] = s.output(0);
  return Status::Ok();
}

}  // namespace

const std::map<std::string, OnnxLowerFn>& onnx_ort_lowering_table() {
  static const std::map<std::string, OnnxLowerFn> table = {
      {"rope", lower_rope_ort},
      {"attention", lower_attention_ort},
      {"rms_norm", lower_rms_norm_ort},
      {"add_rms_norm", lower_add_rms_norm_ort},
  };
  return table;
}

}  // namespace loom::exporting
