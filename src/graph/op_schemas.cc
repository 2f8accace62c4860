// The built-in ops. Activations are F32 rows: [tokens, features]; heads are laid
// out inside the feature dimension ([tokens, heads * head_dim]) so no op needs a
// reshape; exporters expand to explicit reshapes where a runtime wants them.
#include <cmath>
#include <map>
#include <mutex>

#include "loom/graph/op_schema.h"

#include "loom/graph/external_call_abi.h"
#include "loom/graph/external_functions.h"

namespace loom::graph {
namespace {

Status expect_rank(const Value* v, size_t rank, const char* what) {
  if (!v) return invalid_argument(std::string(what) + " is missing");
  if (v->shape.size() != rank)
    return invalid_argument(std::string(what) + " must have rank " + std::to_string(rank) + ", has " +
                            std::to_string(v->shape.size()));
  return Status::Ok();
}

// Activations are F32 on every backend (kernels read them as float rows), so an op
// refuses any other dtype there instead of reading its bytes as floats.
Status expect_f32(const Value* v, const char* what) {
  if (!v) return invalid_argument(std::string(what) + " is missing");
  if (v->dtype != DType::kF32)
    return invalid_argument(std::string(what) + " must be F32, is " + std::string(dtype_name(v->dtype)));
  return Status::Ok();
}

// Weights arrive as F32, BF16 or F16 (or, where `quantized`, a GGUF block type); the
// kernels widen them, and an integer tensor there is a mistake to name, not to convert.
Status expect_weight(const Value* v, const char* what, bool quantized = false) {
  if (!v) return invalid_argument(std::string(what) + " is missing");
  if (!dtype_is_float(v->dtype) && !(quantized && dtype_is_quantized(v->dtype)))
    return invalid_argument(std::string(what) + " must be F32, BF16 or F16" + (quantized ? " or quantized" : "") + ", is " +
                            std::string(dtype_name(v->dtype)));
  return Status::Ok();
}

bool dims_match(const Dim& a, const Dim& b) { return a == b; }

std::string dim_str(const Dim& d) { return d.is_static() ? std::to_string(d.value) : "sym#" + std::to_string(d.symbol); }

void add(std::map<std::string, OpSchema>& m, OpSchema s) { m.emplace(s.name, std::move(s)); }

// Unary float op with output = input shape.
OpSchema elementwise_unary(const std::string& name, const std::string& summary) {
  OpSchema s;
  s.name = name;
  s.min_inputs = s.max_inputs = 1;
  s.summary = summary;
  s.infer = [](const std::vector<const Value*>& in, const Node&, std::vector<TypedShape>* out) {
    LOOM_RETURN_IF_ERROR(expect_f32(in[0], "input"));
    out->push_back({DType::kF32, in[0]->shape});
    return Status::Ok();
  };
  return s;
}

OpSchema elementwise_binary(const std::string& name, const std::string& summary) {
  OpSchema s;
  s.name = name;
  s.min_inputs = s.max_inputs = 2;
  s.summary = summary;
  s.infer = [](const std::vector<const Value*>& in, const Node&, std::vector<TypedShape>* out) {
    if (!in[0] || !in[1]) return invalid_argument("both inputs are required");
    LOOM_RETURN_IF_ERROR(expect_f32(in[0], "a"));
    LOOM_RETURN_IF_ERROR(expect_f32(in[1], "b"));
    if (in[0]->shape != in[1]->shape) return invalid_argument("inputs must have the same shape");
    out->push_back({DType::kF32, in[0]->shape});
    return Status::Ok();
  };
  return s;
}

std::map<std::string, OpSchema> build_schemas() {
  std::map<std::string, OpSchema> m;

  {
    OpSchema s;
    s.name = "embedding";
    s.summary = "out[t] = table[ids[t]] (rows converted to F32); ids outside [0, V) are an error";
    s.min_inputs = s.max_inputs = 2;
    s.infer = [](const std::vector<const Value*>& in, const Node&, std::vector<TypedShape>* out) {
      LOOM_RETURN_IF_ERROR(expect_rank(in[0], 2, "table"));
      LOOM_RETURN_IF_ERROR(expect_weight(in[0], "table", /*quantized=*/true));
      LOOM_RETURN_IF_ERROR(expect_rank(in[1], 1, "ids"));
      if (in[1]->dtype != DType::kI32) return invalid_argument("ids must be I32");
      out->push_back({DType::kF32, {in[1]->shape[0], in[0]->shape[1]}});
      return Status::Ok();
    };
    add(m, s);
  }
  {
    OpSchema s;
    s.name = "linear";
    s.summary = "y = x · Wᵀ + b, W stored [out_features, in_features] as in nn.Linear";
    s.min_inputs = 2;
    s.max_inputs = 3;
    s.infer = [](const std::vector<const Value*>& in, const Node&, std::vector<TypedShape>* out) {
      LOOM_RETURN_IF_ERROR(expect_rank(in[0], 2, "x"));
      LOOM_RETURN_IF_ERROR(expect_f32(in[0], "x"));
      LOOM_RETURN_IF_ERROR(expect_rank(in[1], 2, "weight"));
      if (!dims_match(in[0]->shape[1], in[1]->shape[1]))
        return invalid_argument("x features " + dim_str(in[0]->shape[1]) + " != weight in_features " +
                                dim_str(in[1]->shape[1]));
      if (in.size() > 2 && in[2]) {
        LOOM_RETURN_IF_ERROR(expect_rank(in[2], 1, "bias"));
        LOOM_RETURN_IF_ERROR(expect_weight(in[2], "bias"));
        if (!dims_match(in[2]->shape[0], in[1]->shape[0])) return invalid_argument("bias size != out_features");
      }
      out->push_back({DType::kF32, {in[0]->shape[0], in[1]->shape[0]}});
      return Status::Ok();
    };
    add(m, s);
  }
  {
    OpSchema s;
    s.name = "rms_norm";
    s.summary = "each group of w.size elements of a row: x * rsqrt(mean(x²) + eps) * (w + weight_offset)";
    s.min_inputs = s.max_inputs = 2;
    s.required_attrs = {"eps"};
    s.infer = [](const std::vector<const Value*>& in, const Node&, std::vector<TypedShape>* out) {
      LOOM_RETURN_IF_ERROR(expect_rank(in[0], 2, "x"));
      LOOM_RETURN_IF_ERROR(expect_f32(in[0], "x"));
      LOOM_RETURN_IF_ERROR(expect_rank(in[1], 1, "weight"));
      LOOM_RETURN_IF_ERROR(expect_weight(in[1], "weight"));
      const Dim& f = in[0]->shape[1];
      const Dim& g = in[1]->shape[0];
      if (!f.is_static() || !g.is_static() || g.value <= 0 || f.value % g.value != 0)
        return invalid_argument("row size " + dim_str(f) + " is not a multiple of weight size " + dim_str(g));
      out->push_back({DType::kF32, in[0]->shape});
      return Status::Ok();
    };
    add(m, s);
  }
  {
    // The residual add of a pre-norm block and the norm after it in one pass
    // (loom:AddRMSNorm): outputs the sum (the new residual stream) and its norm.
    OpSchema s;
    s.name = "add_rms_norm";
    s.summary = "sum = a + b; y = sum * rsqrt(mean(sum²) + eps) * (w + weight_offset); outputs (sum, y)";
    s.min_inputs = s.max_inputs = 3;
    s.num_outputs = 2;
    s.required_attrs = {"eps"};
    s.infer = [](const std::vector<const Value*>& in, const Node&, std::vector<TypedShape>* out) {
      LOOM_RETURN_IF_ERROR(expect_rank(in[0], 2, "a"));
      LOOM_RETURN_IF_ERROR(expect_f32(in[0], "a"));
      LOOM_RETURN_IF_ERROR(expect_f32(in[1], "b"));
      if (in[1]->shape != in[0]->shape) return invalid_argument("a and b must have the same shape");
      LOOM_RETURN_IF_ERROR(expect_rank(in[2], 1, "weight"));
      LOOM_RETURN_IF_ERROR(expect_weight(in[2], "weight"));
      if (!dims_match(in[2]->shape[0], in[0]->shape[1])) return invalid_argument("weight size != row size");
      out->push_back({DType::kF32, in[0]->shape});
      out->push_back({DType::kF32, in[0]->shape});
      return Status::Ok();
    };
    add(m, s);
  }
  {
    OpSchema s;
    s.name = "layer_norm";
    s.summary = "(x - mean) * rsqrt(var + eps) * w + b over each row";
    s.min_inputs = 2;
    s.max_inputs = 3;
    s.required_attrs = {"eps"};
    s.infer = [](const std::vector<const Value*>& in, const Node&, std::vector<TypedShape>* out) {
      LOOM_RETURN_IF_ERROR(expect_rank(in[0], 2, "x"));
      LOOM_RETURN_IF_ERROR(expect_f32(in[0], "x"));
      LOOM_RETURN_IF_ERROR(expect_rank(in[1], 1, "weight"));
      LOOM_RETURN_IF_ERROR(expect_weight(in[1], "weight"));
      if (!dims_match(in[0]->shape[1], in[1]->shape[0])) return invalid_argument("weight size != row size");
      if (in.size() > 2 && in[2]) {
        LOOM_RETURN_IF_ERROR(expect_rank(in[2], 1, "bias"));
        LOOM_RETURN_IF_ERROR(expect_weight(in[2], "bias"));
        if (!dims_match(in[2]->shape[0], in[1]->shape[0])) return invalid_argument("bias size != weight size");
      }
      out->push_back({DType::kF32, in[0]->shape});
      return Status::Ok();
    };
    add(m, s);
  }
  add(m, elementwise_binary("add", "a + b"));
  add(m, elementwise_binary("mul", "a * b"));
  add(m, elementwise_unary("silu", "x * sigmoid(x)"));
  add(m, elementwise_unary("gelu", "GELU; attr approximate = \"none\" (erf) or \"tanh\""));
  {
    // The gated MLP activation as one pass: either two inputs (gate, up) of the
    // same shape, or one [n, 2I] input holding gate then up (a fused gate_up
    // projection, as loom:RMSNormMLP's layout concatenates gate_proj then up_proj).
    OpSchema s;
    s.name = "silu_and_mul";
    s.summary = "silu(gate) * up; inputs (gate, up) or one [n, 2I] tensor = [gate | up]";
    s.min_inputs = 1;
    s.max_inputs = 2;
    s.infer = [](const std::vector<const Value*>& in, const Node&, std::vector<TypedShape>* out) {
      LOOM_RETURN_IF_ERROR(expect_rank(in[0], 2, "gate"));
      LOOM_RETURN_IF_ERROR(expect_f32(in[0], "gate"));
      if (in.size() > 1 && in[1]) {
        LOOM_RETURN_IF_ERROR(expect_rank(in[1], 2, "up"));
        LOOM_RETURN_IF_ERROR(expect_f32(in[1], "up"));
        if (in[0]->shape != in[1]->shape) return invalid_argument("gate and up must have the same shape");
        out->push_back({DType::kF32, in[0]->shape});
        return Status::Ok();
      }
      const Dim& f = in[0]->shape[1];
      if (!f.is_static() || f.value % 2 != 0)
        return invalid_argument("a single gate_up input needs an even static row size, has " + dim_str(f));
      out->push_back({DType::kF32, {in[0]->shape[0], Dim::fixed(f.value / 2)}});
      return Status::Ok();
    };
    add(m, s);
  }
  {
    // One fused projection back into its parts (loom:FusedQKV: q, k, v).
    OpSchema s;
    s.name = "split_columns";
    s.summary = "x [n, sum(sizes)] → outputs [n, sizes[i]], consecutive column ranges; attr sizes (exactly 3)";
    s.min_inputs = s.max_inputs = 1;
    s.num_outputs = 3;
    s.required_attrs = {"sizes"};
    s.infer = [](const std::vector<const Value*>& in, const Node& n, std::vector<TypedShape>* out) {
      LOOM_RETURN_IF_ERROR(expect_rank(in[0], 2, "x"));
      LOOM_RETURN_IF_ERROR(expect_f32(in[0], "x"));
      const std::vector<int64_t>& sizes = n.attr_ints("sizes");
      if (sizes.size() != 3) return invalid_argument("sizes must have 3 entries, has " + std::to_string(sizes.size()));
      int64_t total = 0;
      for (int64_t v : sizes) {
        if (v <= 0) return invalid_argument("sizes must be positive");
        total += v;
      }
      const Dim& f = in[0]->shape[1];
      if (!f.is_static() || f.value != total)
        return invalid_argument("row size " + dim_str(f) + " != sum of sizes " + std::to_string(total));
      for (int64_t v : sizes) out->push_back({DType::kF32, {in[0]->shape[0], Dim::fixed(v)}});
      return Status::Ok();
    };
    add(m, s);
  }
  {
    // A sparse MoE block in one op (runtime/cpu/moe.h): its optimized kernel
    // groups tokens by expert, which no sequence of per-token ops can express.
    OpSchema s;
    s.name = "moe";
    s.summary =
        "x [T, H], router [E, H], gate_up [E, 2I, H], down [E, H, I] (+ shared [T, H], shared_gate [1, H]) "
        "(+ router_bias [E], gate_up_bias [E, 2I], down_bias [E, H]): "
        "softmax(x · routerᵀ) in f32, top_k experts per token (renormalised if norm_topk_prob; routing "
        "'topk_softmax': a softmax over the top_k logits instead), "
        "Σ w · down_e(act(gate_e x) * up_e x) (+ sigmoid(x · shared_gate) * shared); attrs top_k, "
        "norm_topk_prob, activation, routing, swiglu_limit > 0 (gpt-oss's clamped SwiGLU), swiglu_alpha";
    s.min_inputs = 4;
    s.max_inputs = 9;
    s.required_attrs = {"top_k", "norm_topk_prob"};
    s.infer = [](const std::vector<const Value*>& in, const Node& n, std::vector<TypedShape>* out) {
      LOOM_RETURN_IF_ERROR(expect_rank(in[0], 2, "x"));
      LOOM_RETURN_IF_ERROR(expect_f32(in[0], "x"));
      LOOM_RETURN_IF_ERROR(expect_rank(in[1], 2, "router"));
      LOOM_RETURN_IF_ERROR(expect_weight(in[1], "router"));
      LOOM_RETURN_IF_ERROR(expect_rank(in[2], 3, "gate_up"));
      LOOM_RETURN_IF_ERROR(expect_weight(in[2], "gate_up", true));
      LOOM_RETURN_IF_ERROR(expect_rank(in[3], 3, "down"));
      LOOM_RETURN_IF_ERROR(expect_weight(in[3], "down", true));
      const Dim& h = in[0]->shape[1];
      const Dim& e = in[1]->shape[0];
      if (!h.is_static() || !e.is_static() || in[1]->shape[1] != h)
        return invalid_argument("router must be [E, " + dim_str(h) + "] with static sizes");
      const SymShape& gu = in[2]->shape;
      const SymShape& dn = in[3]->shape;
      if (gu[0] != e || gu[2] != h || !gu[1].is_static() || gu[1].value % 2 != 0)
        return invalid_argument("gate_up must be [E, 2I, H] matching the router");
      const Dim i = Dim::fixed(gu[1].value / 2);
      if (dn[0] != e || dn[1] != h || dn[2] != i) return invalid_argument("down must be [E, H, I] matching gate_up");
      const int64_t k = n.attr_int("top_k");
      if (k < 1 || k > e.value)
        return invalid_argument("top_k " + std::to_string(k) + " outside [1, " + std::to_string(e.value) + "]");
      const bool has_shared = in.size() > 4 && in[4];
      const bool has_gate = in.size() > 5 && in[5];
      if (has_shared != has_gate) return invalid_argument("shared and shared_gate come together");
      if (has_shared) {
        LOOM_RETURN_IF_ERROR(expect_rank(in[4], 2, "shared"));
        LOOM_RETURN_IF_ERROR(expect_f32(in[4], "shared"));
        LOOM_RETURN_IF_ERROR(expect_rank(in[5], 2, "shared_gate"));
        LOOM_RETURN_IF_ERROR(expect_weight(in[5], "shared_gate"));
        if (in[4]->shape != in[0]->shape) return invalid_argument("shared must have x's shape");
        if (in[5]->shape[0] != Dim::fixed(1) || in[5]->shape[1] != h) return invalid_argument("shared_gate must be [1, H]");
      }
      const SymShape bias_shapes[] = {{e}, {e, gu[1]}, {e, h}};
      const char* bias_names[] = {"router_bias", "gate_up_bias", "down_bias"};
      for (size_t b = 0; b < 3; ++b) {
        if (in.size() <= 6 + b || !in[6 + b]) continue;
        LOOM_RETURN_IF_ERROR(expect_weight(in[6 + b], bias_names[b]));
        if (in[6 + b]->shape != bias_shapes[b]) return invalid_argument(std::string(bias_names[b]) + " does not fit the experts");
      }
      const std::string routing = n.attr_str("routing", "softmax_topk");
      if (routing != "softmax_topk" && routing != "topk_softmax")
        return invalid_argument("routing '" + routing + "' (softmax_topk, topk_softmax)");
      const double limit = n.attr_float("swiglu_limit", 0.0);
      if (!(limit >= 0) || !std::isfinite(limit)) return invalid_argument("swiglu_limit must be finite and >= 0");
      out->push_back({DType::kF32, in[0]->shape});
      return Status::Ok();
    };
    add(m, s);
  }
  {
    OpSchema s = elementwise_unary("scale", "x * factor");
    s.required_attrs = {"factor"};
    add(m, s);
  }
  {
    OpSchema s = elementwise_unary("softcap", "cap * tanh(x / cap), cap > 0");
    s.required_attrs = {"cap"};
    s.infer = [unary = s.infer](const std::vector<const Value*>& in, const Node& n, std::vector<TypedShape>* out) {
      const double cap = n.attr_float("cap");
      if (!(cap > 0) || !std::isfinite(cap)) return invalid_argument("cap must be positive and finite, is " + std::to_string(cap));
      return unary(in, n, out);
    };
    add(m, s);
  }
  {
    OpSchema s;
    s.name = "rope";
    s.summary = "rotary embedding (rotate_half convention) of each head of x at the token positions";
    s.min_inputs = s.max_inputs = 2;
    s.required_attrs = {"num_heads", "head_dim", "rotary_dim", "rope_type", "theta"};
    s.infer = [](const std::vector<const Value*>& in, const Node& n, std::vector<TypedShape>* out) {
      LOOM_RETURN_IF_ERROR(expect_rank(in[0], 2, "x"));
      LOOM_RETURN_IF_ERROR(expect_f32(in[0], "x"));
      LOOM_RETURN_IF_ERROR(expect_rank(in[1], 1, "positions"));
      if (in[1]->dtype != DType::kI32) return invalid_argument("positions must be I32");
      const Dim& f = in[0]->shape[1];
      if (!f.is_static() || f.value != n.attr_int("num_heads") * n.attr_int("head_dim"))
        return invalid_argument("row size " + dim_str(f) + " != num_heads * head_dim");
      if (n.attr_int("rotary_dim") > n.attr_int("head_dim") || n.attr_int("rotary_dim") % 2)
        return invalid_argument("rotary_dim must be even and ≤ head_dim");
      out->push_back({DType::kF32, in[0]->shape});
      return Status::Ok();
    };
    add(m, s);
  }
  {
    OpSchema s;
    s.name = "attention";
    s.summary =
        "causal attention of this step's tokens over the KV cache of layer `layer`: writes k/v at the tokens' "
        "positions, then attends (GQA, optional sliding window and softcap; optional sinks [num_q_heads]: "
        "gpt-oss's per-head logit in each softmax's denominator)";
    s.min_inputs = 3;
    s.max_inputs = 4;
    s.required_attrs = {"layer", "num_q_heads", "num_kv_heads", "head_dim", "scale"};
    s.infer = [](const std::vector<const Value*>& in, const Node& n, std::vector<TypedShape>* out) {
      for (int i = 0; i < 3; ++i) {
        const char* what = i == 0 ? "q" : i == 1 ? "k" : "v";
        LOOM_RETURN_IF_ERROR(expect_rank(in[static_cast<size_t>(i)], 2, what));
        LOOM_RETURN_IF_ERROR(expect_f32(in[static_cast<size_t>(i)], what));
      }
      const int64_t hq = n.attr_int("num_q_heads"), hkv = n.attr_int("num_kv_heads"), d = n.attr_int("head_dim");
      if (hkv <= 0 || hq % hkv != 0) return invalid_argument("num_q_heads must be a multiple of num_kv_heads");
      if (!in[0]->shape[1].is_static() || in[0]->shape[1].value != hq * d) return invalid_argument("q row size != num_q_heads * head_dim");
      if (!in[1]->shape[1].is_static() || in[1]->shape[1].value != hkv * d) return invalid_argument("k row size != num_kv_heads * head_dim");
      if (!in[2]->shape[1].is_static() || in[2]->shape[1].value != hkv * d) return invalid_argument("v row size != num_kv_heads * head_dim");
      if (in.size() > 3 && in[3]) {
        LOOM_RETURN_IF_ERROR(expect_weight(in[3], "sinks"));
        if (in[3]->shape != SymShape{Dim::fixed(hq)}) return invalid_argument("sinks must be [num_q_heads]");
      }
      out->push_back({DType::kF32, {in[0]->shape[0], Dim::fixed(hq * d)}});
      return Status::Ok();
    };
    add(m, s);
  }
  {
    // A function loom did not compile (a plugin kernel), by key in
    // external_functions.h; "signature" says how it is called and what the
    // inputs are (external_call_abi.h). Output: f32, the shape of input 0
    // ([rows, out] for a projection).
    OpSchema s;
    s.name = "external_call";
    s.summary = "calls a registered plugin function (attrs: callee, signature)";
    s.min_inputs = 2;
    s.max_inputs = 3;
    s.required_attrs = {"callee", "signature"};
    s.infer = [](const std::vector<const Value*>& in, const Node& n, std::vector<TypedShape>* out) {
      const std::string sig = n.attr_str("signature");
      if (!is_known_external_signature(sig)) return unsupported("unknown calling convention '" + sig + "'");
      const size_t want_inputs = sig == LOOM_CALL_ADD_RMS_NORM_F32_V1 ? 3 : 2;
      if (in.size() != want_inputs || !in.back())
        return invalid_argument(sig + " takes " + std::to_string(want_inputs) + " inputs, got " + std::to_string(in.size()));
      LOOM_RETURN_IF_ERROR(expect_rank(in[0], 2, "x"));
      LOOM_RETURN_IF_ERROR(expect_f32(in[0], "x"));
      if (sig == LOOM_CALL_ADD_RMS_NORM_F32_V1) {
        // (residual, x, weight) → (sum, y)
        LOOM_RETURN_IF_ERROR(expect_f32(in[1], "x"));
        if (in[1]->shape != in[0]->shape) return invalid_argument("residual and x must have the same shape");
        LOOM_RETURN_IF_ERROR(expect_rank(in[2], 1, "weight"));
        LOOM_RETURN_IF_ERROR(expect_weight(in[2], "weight"));
        if (!dims_match(in[2]->shape[0], in[0]->shape[1])) return invalid_argument("weight size != x features");
        out->push_back({DType::kF32, in[0]->shape});
        out->push_back({DType::kF32, in[0]->shape});
        return Status::Ok();
      }
      if (sig == LOOM_CALL_RMS_NORM_F32_V1) {
        LOOM_RETURN_IF_ERROR(expect_rank(in[1], 1, "weight"));
        LOOM_RETURN_IF_ERROR(expect_weight(in[1], "weight"));
        if (!dims_match(in[1]->shape[0], in[0]->shape[1])) return invalid_argument("weight size != x features");
      } else if (sig == LOOM_CALL_LINEAR_T_F32_V1) {
        LOOM_RETURN_IF_ERROR(expect_rank(in[1], 2, "w_t"));
        if (!dims_match(in[1]->shape[0], in[0]->shape[1])) return invalid_argument("w_t rows != x features");
        out->push_back({DType::kF32, {in[0]->shape[0], in[1]->shape[1]}});
        return Status::Ok();
      } else if (!in[1] || in[1]->shape != in[0]->shape) {
        return invalid_argument("gate and up must have the same shape");
      } else {
        LOOM_RETURN_IF_ERROR(expect_f32(in[1], "up"));
      }
      out->push_back({DType::kF32, in[0]->shape});
      return Status::Ok();
    };
    add(m, s);
  }
  {
    OpSchema s;
    s.name = "gather_rows";
    s.summary = "out[i] = x[indices[i]] (e.g. the last token of each sequence before the LM head)";
    s.min_inputs = s.max_inputs = 2;
    s.infer = [](const std::vector<const Value*>& in, const Node&, std::vector<TypedShape>* out) {
      LOOM_RETURN_IF_ERROR(expect_rank(in[0], 2, "x"));
      LOOM_RETURN_IF_ERROR(expect_f32(in[0], "x"));
      LOOM_RETURN_IF_ERROR(expect_rank(in[1], 1, "indices"));
      if (in[1]->dtype != DType::kI32) return invalid_argument("indices must be I32");
      out->push_back({DType::kF32, {in[1]->shape[0], in[0]->shape[1]}});
      return Status::Ok();
    };
    add(m, s);
  }
  // Tensor parallelism's collectives over the ranks of the process group
  // (runtime/collectives.h); `parts` is the group size the graph was sharded for.
  {
    OpSchema s;
    s.name = "all_reduce";
    s.summary = "sum of x over the `parts` ranks of the tensor-parallel group (after a row-parallel linear)";
    s.min_inputs = s.max_inputs = 1;
    s.required_attrs = {"parts"};
    s.infer = [](const std::vector<const Value*>& in, const Node& n, std::vector<TypedShape>* out) {
      LOOM_RETURN_IF_ERROR(expect_rank(in[0], 2, "x"));
      if (in[0]->dtype != DType::kF32) return invalid_argument("x must be F32");
      if (n.attr_int("parts") < 1) return invalid_argument("parts must be >= 1");
      out->push_back({DType::kF32, in[0]->shape});
      return Status::Ok();
    };
    add(m, s);
  }
  {
    OpSchema s;
    s.name = "all_gather";
    s.summary = "columns of x from the `parts` ranks side by side, rank 0 first (a vocab-parallel LM head's logits)";
    s.min_inputs = s.max_inputs = 1;
    s.required_attrs = {"parts"};
    s.infer = [](const std::vector<const Value*>& in, const Node& n, std::vector<TypedShape>* out) {
      LOOM_RETURN_IF_ERROR(expect_rank(in[0], 2, "x"));
      if (in[0]->dtype != DType::kF32) return invalid_argument("x must be F32");
      const int64_t parts = n.attr_int("parts");
      if (parts < 1) return invalid_argument("parts must be >= 1");
      if (!in[0]->shape[1].is_static()) return invalid_argument("all_gather needs a static column count");
      out->push_back({DType::kF32, {in[0]->shape[0], Dim::fixed(in[0]->shape[1].value * parts)}});
      return Status::Ok();
    };
    add(m, s);
  }
  return m;
}

const std::map<std::string, OpSchema>& schemas() {
  static const std::map<std::string, OpSchema> table = build_schemas();
  return table;
}

}  // namespace

const OpSchema* find_op_schema(const std::string& name) {
  const auto& t = schemas();
  auto it = t.find(name);
  return it == t.end() ? nullptr : &it->second;
}

std::vector<std::string> op_names() {
  std::vector<std::string> out;
  for (const auto& [k, v] : schemas()) out.push_back(k);
  return out;
}

}  // namespace loom::graph
