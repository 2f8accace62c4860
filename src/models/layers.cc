#include "loom/models/layers.h"

#include <cmath>

#include "loom/core/status.h"
#include "loom/graph/external_call_abi.h"
#include "loom/graph/external_functions.h"
#include "loom/models/patch_points.h"

namespace loom::models {

namespace {

using kernels::ModuleKernel;
using kernels::ModuleKernelKind;

bool is_builtin(const ModuleKernel& k, const char* name) {
  return k.kernel && k.kernel->repo == kernels::kBuiltinRepo && k.kernel->name == name && !k.kernel->entry;
}

// A kernel the plan chose that this module has no recording for (a plugin
// without an entry point in a calling convention of graph/external_call_abi.h,
// or a built-in meant for another layer).
[[noreturn]] void cannot_record(const Module& m, const ModuleKernel& k) {
  throw Error(unsupported(m.path() + " (" + m.class_name() + "): kernel " + (k.kernel ? k.kernel->id() : "?") + " (" +
                          kernels::module_kernel_kind_name(k.kind) + ", " + k.rule +
                          ") has no graph recording in loom for this module; loom records its built-in kernels "
                          "and plugin entries whose entry_signature is a calling convention of "
                          "graph/external_call_abi.h"));
}

// Modules with no kernel of their own: identity when fused away, an error for
// anything else the plan asks of them, otherwise their own forward.
bool fused_away(const Module& m, const ModuleKernel* k) {
  if (!k) return false;
  if (k->kind == ModuleKernelKind::kFusedAway) return true;
  cannot_record(m, *k);
}

std::string need_layout_param(const Module& m, const ModuleKernel& k, const std::string& name) {
  if (k.layout)
    for (const auto& p : k.layout->parameters)
      if (p.name == name) return name;
  throw Error(internal_error(m.path() + ": kernel " + k.kernel->id() + " has no layout parameter " + name));
}

// A plugin kernel whose entry point follows one of external_call_abi.h's
// conventions: registers the function and returns its key; "" for any other
// kernel (built-ins, plugins without an entry or with another convention).
std::string plugin_callee(const ModuleKernel& k, const char* signature, ModuleKernelKind kind = ModuleKernelKind::kKernel) {
  if (k.kind != kind || !k.kernel || !k.kernel->entry || k.kernel->entry_signature != signature) return "";
  graph::ExternalFunction fn;
  fn.key = k.kernel->id() + " (" + k.kernel->source + ")";
  fn.signature = signature;
  fn.entry = k.kernel->entry;
  fn.keep_alive = k.kernel->keep_alive;
  if (Status st = graph::register_external_function(fn); !st.ok()) throw Error(st);
  return fn.key;
}

}  // namespace

Linear::Linear(const std::string& path, int64_t in_features, int64_t out_features, bool bias, std::string weight_name)
    : Module(path, "Linear", "Linear"), in_(in_features), out_(out_features), bias_(bias), weight_name_(std::move(weight_name)) {
  if (weight_name_.empty()) {
    declare_parameter("weight", {out_, in_});
    weight_name_ = param_name("weight");
  }
  if (bias_) declare_parameter("bias", {out_});
}

ValueId Linear::forward(GraphBuilder& b, ValueId x) const {
  if (fused_away(*this, b.kernel(path()))) return x;
  GraphBuilder::Scope scope(b, path());
  std::vector<ValueId> in = {x, b.param(weight_name_)};
  if (bias_) in.push_back(b.param(param_name("bias")));
  ValueId y = b.op("linear", std::move(in));
  if (parallel_ == LinearParallel::kRow) return b.op("all_reduce", {y}, {{"parts", parts_}});
  if (parallel_ == LinearParallel::kColumnGathered) return b.op("all_gather", {y}, {{"parts", parts_}});
  return y;
}

Status Linear::parallelize(LinearParallel style, const TensorParallel& tp) {
  if (!tp.active() || style == LinearParallel::kReplicated) return Status::Ok();
  if (tied()) return internal_error(path() + ": a tied linear cannot be split (its weight is " + weight_name_ + ")");
  const bool rows = style != LinearParallel::kRow && style != LinearParallel::kRowPartial;
  const int64_t features = rows ? out_ : in_;
  if (features % tp.size != 0)
    return invalid_argument("tensor parallelism: " + path() + " has " + std::to_string(features) +
                            (rows ? " output" : " input") + " features, not divisible by --tensor-parallel " +
                            std::to_string(tp.size));
  set_parameter_shard("weight", {rows ? 0 : 1, tp.rank, tp.size, false});
  // A row-parallel bias is added once, by rank 0, before the sum.
  if (bias_) set_parameter_shard("bias", rows ? ParameterShard{0, tp.rank, tp.size, false} : ParameterShard{-1, tp.rank, tp.size, true});
  parallel_ = style;
  parts_ = tp.size;
  return Status::Ok();
}

Status Linear::parallelize_tied_rows(const TensorParallel& tp) {
  if (!tp.active()) return Status::Ok();
  if (!tied()) return internal_error(path() + ": parallelize_tied_rows on a linear that is not tied");
  if (out_ % tp.size != 0)
    return invalid_argument("tensor parallelism: " + path() + " has " + std::to_string(out_) +
                            " output features, not divisible by --tensor-parallel " + std::to_string(tp.size));
  tied_rows_of_ = weight_name_;
  tied_rows_shard_ = {0, tp.rank, tp.size, false};
  weight_name_ = param_name("weight") + ".rows_of_rank_" + std::to_string(tp.rank);
  parallel_ = LinearParallel::kColumnGathered;
  parts_ = tp.size;
  return Status::Ok();
}

Embedding::Embedding(const std::string& path, int64_t num_embeddings, int64_t dim)
    : Module(path, "Embedding", "Embedding"), num_(num_embeddings), dim_(dim) {
  declare_parameter("weight", {num_, dim_});
}

ValueId Embedding::forward(GraphBuilder& b, ValueId ids) const {
  if (fused_away(*this, b.kernel(path()))) return ids;
  GraphBuilder::Scope scope(b, path());
  return b.op("embedding", {b.param(param_name("weight")), ids});
}

RMSNorm::RMSNorm(const std::string& path, std::string class_name, int64_t size, double eps, double weight_offset)
    : UnaryModule(path, std::move(class_name), "RMSNorm"), size_(size), eps_(eps), offset_(weight_offset) {
  declare_parameter("weight", {size_});
}

ValueId RMSNorm::forward(GraphBuilder& b, ValueId x) const {
  if (const ModuleKernel* k = b.kernel(path())) {
    if (k->kind == ModuleKernelKind::kFusedAway) return x;
    // A fused add + norm is recorded by the parent owning the add (residual_add_then_norm).
    if (k->kernel && k->kernel->residual_tail)
      throw Error(unsupported(path() + ": " + k->kernel->id() + " (" + k->rule +
                              ") fuses the residual add before this norm, but its parent records no such add here"));
    if (k->kind == ModuleKernelKind::kFused && is_builtin(*k, "RMSNormMLP")) return record_rms_norm_mlp(b, *k, x);
    if (const std::string callee = plugin_callee(*k, LOOM_CALL_RMS_NORM_F32_V1); !callee.empty()) {
      GraphBuilder::Scope scope(b, path());
      // A plugin may own its weight (ABI 2: renamed or converted at load).
      const std::string weight = k->layout ? k->layout->parameters.at(0).name : param_name("weight");
      return b.op("external_call", {x, b.param(weight)},
                  {{"callee", callee}, {"signature", std::string(LOOM_CALL_RMS_NORM_F32_V1)}, {"eps", eps_},
                   {"weight_offset", offset_}});
    }
    // loom's rms_norm op already is one fused pass (sum of squares, scale, weight).
    if (!(k->kind == ModuleKernelKind::kKernel && is_builtin(*k, "FusedRMSNorm"))) cannot_record(*this, *k);
  }
  GraphBuilder::Scope scope(b, path());
  return b.op("rms_norm", {x, b.param(param_name("weight"))}, {{"eps", eps_}, {"weight_offset", offset_}});
}

std::pair<ValueId, ValueId> RMSNorm::forward_after_residual_add(GraphBuilder& b, const ModuleKernel& k, ValueId residual,
                                                                ValueId h) const {
  if (k.kind != ModuleKernelKind::kFused || !k.kernel || !k.kernel->residual_tail) cannot_record(*this, k);
  GraphBuilder::Scope scope(b, path());
  std::vector<ValueId> parts;
  if (k.kernel->entry) {
    const std::string callee = plugin_callee(k, LOOM_CALL_ADD_RMS_NORM_F32_V1, ModuleKernelKind::kFused);
    if (callee.empty()) cannot_record(*this, k);
    // A plugin may own its weight (ABI 2: renamed or converted at load).
    const std::string weight = k.layout ? k.layout->parameters.at(0).name : param_name("weight");
    parts = b.op_multi("external_call", {residual, h, b.param(weight)},
                       {{"callee", callee}, {"signature", std::string(LOOM_CALL_ADD_RMS_NORM_F32_V1)}, {"eps", eps_},
                        {"weight_offset", offset_}});
  } else {
    if (!is_builtin(k, "AddRMSNorm")) cannot_record(*this, k);
    parts = b.op_multi("add_rms_norm", {residual, h, b.param(param_name("weight"))},
                       {{"eps", eps_}, {"weight_offset", offset_}});
  }
  return {parts.at(0), parts.at(1)};
}

std::pair<ValueId, ValueId> residual_add_then_norm(GraphBuilder& b, const std::string& parent, const UnaryModule& norm,
                                                   ValueId residual, ValueId h) {
  if (const ModuleKernel* k = b.kernel(norm.path()); k && k->kernel && k->kernel->residual_tail) {
    const auto* rms = dynamic_cast<const RMSNorm*>(&norm);
    if (!rms) cannot_record(norm, *k);
    return rms->forward_after_residual_add(b, *k, residual, h);
  }
  ValueId sum;
  {
    GraphBuilder::Scope scope(b, parent);
    sum = b.op("add", {residual, h});
  }
  return {sum, call_forward(norm, b, sum)};
}

LayerNorm::LayerNorm(const std::string& path, int64_t size, double eps)
    : UnaryModule(path, "LayerNorm", "LayerNorm"), size_(size), eps_(eps) {
  declare_parameter("weight", {size_});
  declare_parameter("bias", {size_});
}

ValueId RMSNorm::record_rms_norm_mlp(GraphBuilder& b, const ModuleKernel& k, ValueId x) const {
  if (k.fused_modules.size() != 2 || !k.chain) cannot_record(*this, k);
  for (const auto& link : k.chain->links)
    if (link.residual)
      throw Error(unsupported(path() + ": loom:RMSNormMLP fuses a norm feeding its MLP directly; " + k.rule +
                              " joins them through a residual add"));
  const auto* mlp = dynamic_cast<const GatedMLP*>(b.module(k.fused_modules[1]));
  if (!mlp) cannot_record(*this, k);
  if (mlp->activation() != "silu")
    throw Error(unsupported(path() + ": loom:RMSNormMLP computes SiLU-gated MLPs; " + mlp->path() + " uses " +
                            mlp->activation()));
  const std::string gu_w = need_layout_param(*this, k, param_name("gate_up_proj.weight"));
  const std::string dn_w = need_layout_param(*this, k, param_name("down_proj.weight"));
  GraphBuilder::Scope scope(b, path());
  ValueId h = b.op("rms_norm", {x, b.param(need_layout_param(*this, k, param_name("weight")))},
                   {{"eps", eps_}, {"weight_offset", offset_}});
  std::vector<ValueId> gu_in = {h, b.param(gu_w)};
  if (mlp->has_bias()) gu_in.push_back(b.param(need_layout_param(*this, k, param_name("gate_up_proj.bias"))));
  // One linear over [gate; up] rows: per output column the same dot product as
  // the two separate projections (loom's matmul is row-wise batch invariant).
  ValueId gu = b.op("linear", std::move(gu_in));
  ValueId act = b.op("silu_and_mul", {gu});
  std::vector<ValueId> dn_in = {act, b.param(dn_w)};
  if (mlp->has_bias()) dn_in.push_back(b.param(need_layout_param(*this, k, param_name("down_proj.bias"))));
  return b.op("linear", std::move(dn_in));
}

ValueId LayerNorm::forward(GraphBuilder& b, ValueId x) const {
  if (fused_away(*this, b.kernel(path()))) return x;
  GraphBuilder::Scope scope(b, path());
  return b.op("layer_norm", {x, b.param(param_name("weight")), b.param(param_name("bias"))}, {{"eps", eps_}});
}

ValueId record_activation(GraphBuilder& b, const std::string& activation, ValueId x) {
  if (activation == "silu") return b.op("silu", {x});
  if (activation == "gelu_pytorch_tanh" || activation == "gelu_new")
    return b.op("gelu", {x}, {{"approximate", std::string("tanh")}});
  return b.op("gelu", {x}, {{"approximate", std::string("none")}});
}

// Kernel layer "UngatedMLP", not "MLP": kernels written for the gated
// gate/up/down MLP must not be offered this module (upstream's GPT2MLP has no
// kernel layer either).
MLP::MLP(const std::string& path, std::string class_name, int64_t hidden, int64_t intermediate, bool bias,
         std::string activation)
    : UnaryModule(path, std::move(class_name), "UngatedMLP"), activation_(std::move(activation)) {
  up_ = add_child<Linear>(join_path(path, "up_proj"), hidden, intermediate, bias);
  down_ = add_child<Linear>(join_path(path, "down_proj"), intermediate, hidden, bias);
}

Status MLP::apply_tensor_parallel(const TensorParallel& tp) {
  LOOM_RETURN_IF_ERROR(up_->parallelize(LinearParallel::kColumn, tp));
  return down_->parallelize(LinearParallel::kRow, tp);
}

ValueId MLP::forward(GraphBuilder& b, ValueId x) const {
  if (fused_away(*this, b.kernel(path()))) return x;
  ValueId up = up_->forward(b, x);
  ValueId act;
  {
    GraphBuilder::Scope scope(b, path());
    act = record_activation(b, activation_, up);
  }
  return down_->forward(b, act);
}

GatedActivation::GatedActivation(const std::string& path, std::string activation)
    : Module(path, activation == "silu" ? "SiLUAndMul" : "GeluAndMul", activation == "silu" ? "SiLUAndMul" : "GeluAndMul"),
      activation_(std::move(activation)) {}

ValueId GatedActivation::forward(GraphBuilder& b, ValueId gate, ValueId up) const {
  const ModuleKernel* k = b.kernel(path());
  if (k && activation_ == "silu") {
    if (const std::string callee = plugin_callee(*k, LOOM_CALL_SILU_AND_MUL_F32_V1); !callee.empty()) {
      GraphBuilder::Scope scope(b, path());
      return b.op("external_call", {gate, up},
                  {{"callee", callee}, {"signature", std::string(LOOM_CALL_SILU_AND_MUL_F32_V1)}});
    }
  }
  if (k && !(k->kind == ModuleKernelKind::kKernel && is_builtin(*k, "SiLUAndMul") && activation_ == "silu"))
    cannot_record(*this, *k);
  GraphBuilder::Scope scope(b, path());
  if (k) return b.op("silu_and_mul", {gate, up});
  ValueId act = record_activation(b, activation_, gate);
  return b.op("mul", {act, up});
}

GatedMLP::GatedMLP(const std::string& path, std::string class_name, int64_t hidden, int64_t intermediate, bool bias,
                   std::string activation)
    : UnaryModule(path, std::move(class_name), "MLP"), activation_(std::move(activation)), bias_(bias) {
  gate_ = add_child<Linear>(join_path(path, "gate_proj"), hidden, intermediate, bias);
  up_ = add_child<Linear>(join_path(path, "up_proj"), hidden, intermediate, bias);
  down_ = add_child<Linear>(join_path(path, "down_proj"), intermediate, hidden, bias);
  act_ = add_child<GatedActivation>(join_path(path, "act_fn"), activation_);
}

Status GatedMLP::apply_tensor_parallel(const TensorParallel& tp) {
  LOOM_RETURN_IF_ERROR(gate_->parallelize(LinearParallel::kColumn, tp));
  LOOM_RETURN_IF_ERROR(up_->parallelize(LinearParallel::kColumn, tp));
  return down_->parallelize(LinearParallel::kRow, tp);
}

Status GatedMLP::apply_tensor_parallel_partial(const TensorParallel& tp) {
  LOOM_RETURN_IF_ERROR(gate_->parallelize(LinearParallel::kColumn, tp));
  LOOM_RETURN_IF_ERROR(up_->parallelize(LinearParallel::kColumn, tp));
  return down_->parallelize(LinearParallel::kRowPartial, tp);
}

ValueId GatedMLP::forward(GraphBuilder& b, ValueId x) const {
  if (const ModuleKernel* k = b.kernel(path()); k && k->kind == ModuleKernelKind::kKernel && is_builtin(*k, "FusedGateUpMLP")) {
    if (activation_ != "silu")
      throw Error(unsupported(path() + ": loom:FusedGateUpMLP computes SiLU-gated MLPs; this one uses " + activation_));
    // One linear over [gate; up] rows (per output column the same dot product as the
    // two projections) and one silu_and_mul reading its halves; down_proj as it is.
    ValueId act;
    {
      GraphBuilder::Scope scope(b, path());
      std::vector<ValueId> in = {x, b.param(need_layout_param(*this, *k, param_name("gate_up_proj.weight")))};
      if (bias_) in.push_back(b.param(need_layout_param(*this, *k, param_name("gate_up_proj.bias"))));
      act = b.op("silu_and_mul", {b.op("linear", std::move(in))});
    }
    return down_->forward(b, act);
  }
  if (fused_away(*this, b.kernel(path()))) return x;
  ValueId gate = gate_->forward(b, x);
  ValueId up = up_->forward(b, x);
  ValueId h = act_->forward(b, gate, up);
  return down_->forward(b, h);
}

SelfAttention::SelfAttention(const std::string& path, std::string class_name, const AttentionSettings& s)
    : Module(path, std::move(class_name), "Attention"), s_(s) {
  q_ = add_child<Linear>(join_path(path, "q_proj"), s.hidden, s.num_heads * s.head_dim, s.qkv_bias);
  k_ = add_child<Linear>(join_path(path, "k_proj"), s.hidden, s.num_kv_heads * s.head_dim, s.qkv_bias);
  v_ = add_child<Linear>(join_path(path, "v_proj"), s.hidden, s.num_kv_heads * s.head_dim, s.qkv_bias);
  o_ = add_child<Linear>(join_path(path, "o_proj"), s.num_heads * s.head_dim, s.hidden, s.o_bias);
  if (s.sinks) declare_parameter("sinks", {s.num_heads});
  if (s.qk_norm) {
    const std::string norm_class = class_name_prefix() + "RMSNorm";
    const int64_t q_size = s.qk_norm_whole ? s.num_heads * s.head_dim : s.head_dim;
    const int64_t k_size = s.qk_norm_whole ? s.num_kv_heads * s.head_dim : s.head_dim;
    q_norm_ = add_child<RMSNorm>(join_path(path, "q_norm"), norm_class, q_size, s.norm_eps, s.qk_norm_weight_offset);
    k_norm_ = add_child<RMSNorm>(join_path(path, "k_norm"), norm_class, k_size, s.norm_eps, s.qk_norm_weight_offset);
  }
}

std::string SelfAttention::class_name_prefix() const {
  const std::string& c = class_name();
  const auto pos = c.find("Attention");
  return pos == std::string::npos ? c : c.substr(0, pos);
}

Status SelfAttention::apply_tensor_parallel(const TensorParallel& tp) {
  if (!tp.active()) return Status::Ok();
  if (s_.qk_norm && s_.qk_norm_whole)
    return unsupported("tensor parallelism: " + path() +
                       " normalizes q and k over all heads at once (Olmo2), which a split over ranks cannot compute");
  if (s_.num_heads % tp.size != 0)
    return invalid_argument("tensor parallelism: " + path() + " has num_attention_heads = " +
                            std::to_string(s_.num_heads) + ", not divisible by --tensor-parallel " +
                            std::to_string(tp.size));
  // More ranks than KV heads (a multiple of them): each KV head is replicated on
  // N / num_kv ranks, as vLLM does, and a rank's query heads all read that one head.
  const bool replicate_kv = s_.num_kv_heads % tp.size != 0 && tp.size % s_.num_kv_heads == 0;
  if (s_.num_kv_heads % tp.size != 0 && !replicate_kv)
    return invalid_argument("tensor parallelism: " + path() + " has num_key_value_heads = " +
                            std::to_string(s_.num_kv_heads) + ", which --tensor-parallel " + std::to_string(tp.size) +
                            " neither divides nor is a multiple of (each rank holds whole KV-head groups)");
  LOOM_RETURN_IF_ERROR(q_->parallelize(LinearParallel::kColumn, tp));
  const TensorParallel kv_tp = replicate_kv ? TensorParallel{static_cast<int>(tp.rank * s_.num_kv_heads / tp.size),
                                                             static_cast<int>(s_.num_kv_heads)}
                                            : tp;
  for (Linear* l : {k_, v_}) LOOM_RETURN_IF_ERROR(l->parallelize(LinearParallel::kColumn, kv_tp));
  LOOM_RETURN_IF_ERROR(o_->parallelize(LinearParallel::kRow, tp));
  if (s_.sinks) set_parameter_shard("sinks", {0, tp.rank, tp.size, false});  // this rank's query heads
  s_.num_heads /= tp.size;
  s_.num_kv_heads = replicate_kv ? 1 : s_.num_kv_heads / tp.size;
  return Status::Ok();
}

namespace {
graph::AttrValue opt(const std::optional<double>& v) { return v ? *v : -1.0; }
}  // namespace

ValueId SelfAttention::forward(GraphBuilder& b, ValueId x, ValueId positions) const {
  ValueId q, k, v;
  if (const ModuleKernel* kern = b.kernel(path())) {
    if (kern->kind == ModuleKernelKind::kFusedAway) return x;
    GraphBuilder::Scope scope(b, path());
    ValueId qkv;
    if (const std::string callee = plugin_callee(*kern, LOOM_CALL_LINEAR_T_F32_V1); !callee.empty()) {
      // A plugin owning the merged q/k/v weight in its own [in, q + k + v] layout (ABI 2).
      if (s_.qkv_bias || !kern->layout || kern->layout->parameters.size() != 1) cannot_record(*this, *kern);
      qkv = b.op("external_call", {x, b.param(kern->layout->parameters[0].name)},
                 {{"callee", callee}, {"signature", std::string(LOOM_CALL_LINEAR_T_F32_V1)}});
    } else {
      if (!(kern->kind == ModuleKernelKind::kKernel && is_builtin(*kern, "FusedQKV"))) cannot_record(*this, *kern);
      // loom:FusedQKV: one projection over the concatenated [q; k; v] rows, split
      // back into q, k and v; the rest of attention is this module's own.
      std::vector<ValueId> in = {x, b.param(need_layout_param(*this, *kern, param_name("qkv_proj.weight")))};
      if (s_.qkv_bias) in.push_back(b.param(need_layout_param(*this, *kern, param_name("qkv_proj.bias"))));
      qkv = b.op("linear", std::move(in));
    }
    const std::vector<int64_t> sizes = {s_.num_heads * s_.head_dim, s_.num_kv_heads * s_.head_dim,
                                        s_.num_kv_heads * s_.head_dim};
    const std::vector<ValueId> parts = b.op_multi("split_columns", {qkv}, {{"sizes", sizes}});
    q = parts[0];
    k = parts[1];
    v = parts[2];
  } else {
    q = q_->forward(b, x);
    k = k_->forward(b, x);
    v = v_->forward(b, x);
  }
  if (q_norm_) {
    q = call_forward(*q_norm_, b, q);
    k = call_forward(*k_norm_, b, k);
  }
  ValueId attn;
  {
    GraphBuilder::Scope scope(b, path());
    const RopeSettings& r = s_.rope;
    auto rope_attrs = [&](int64_t heads) {
      return std::map<std::string, graph::AttrValue>{
          {"num_heads", heads},
          {"head_dim", s_.head_dim},
          {"rotary_dim", r.rotary_dim > 0 ? r.rotary_dim : s_.head_dim},
          {"rope_type", r.type},
          {"theta", r.theta},
          {"factor", r.factor},
          {"low_freq_factor", r.low_freq_factor},
          {"high_freq_factor", r.high_freq_factor},
          {"original_max_position_embeddings", r.original_max_position_embeddings},
          {"max_position_embeddings", r.max_position_embeddings},
          {"beta_fast", r.beta_fast},
          {"beta_slow", r.beta_slow},
          {"mscale", opt(r.mscale)},
          {"mscale_all_dim", opt(r.mscale_all_dim)},
          {"attention_factor", opt(r.attention_factor)},
          {"truncate", static_cast<int64_t>(r.truncate)},
          {"long_factor", r.long_factor},
          {"short_factor", r.short_factor},
      };
    };
    if (s_.use_rope) {
      q = b.op("rope", {q, positions}, rope_attrs(s_.num_heads));
      k = b.op("rope", {k, positions}, rope_attrs(s_.num_kv_heads));
    }
    const double scale = s_.scale > 0 ? s_.scale : 1.0 / std::sqrt(static_cast<double>(s_.head_dim));
    std::vector<ValueId> attn_in = {q, k, v};
    if (s_.sinks) attn_in.push_back(b.param(param_name("sinks")));
    attn = b.op("attention", std::move(attn_in),
                {{"layer", static_cast<int64_t>(s_.layer)},
                 {"num_q_heads", s_.num_heads},
                 {"num_kv_heads", s_.num_kv_heads},
                 {"head_dim", s_.head_dim},
                 {"scale", scale},
                 {"sliding_window", s_.sliding_window},
                 {"softcap", s_.softcap}});
  }
  return o_->forward(b, attn);
}

}  // namespace loom::models
