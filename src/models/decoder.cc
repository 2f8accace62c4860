#include "loom/models/decoder.h"

#include "loom/models/patch_points.h"

namespace loom::models {

UnaryModule* DecoderPart::make_norm(const std::string& path, const DecoderSettings& s) {
  if (s.layer_norm) return add_child<LayerNorm>(path, s.hidden_size, s.norm_eps);
  return add_child<RMSNorm>(path, s.class_prefix + "RMSNorm", s.hidden_size, s.norm_eps, s.norm_weight_offset);
}

DecoderLayer::DecoderLayer(const std::string& path, const DecoderSettings& s, const AttentionSettings& attn)
    : DecoderPart(path, s.class_prefix + "DecoderLayer", "DecoderLayer") {
  input_layernorm_ = s.post_norms_only ? nullptr : make_norm(join_path(path, "input_layernorm"), s);
  self_attn_ = add_child<SelfAttention>(join_path(path, "self_attn"), s.class_prefix + "Attention", attn);
  post_attention_layernorm_ = make_norm(join_path(path, "post_attention_layernorm"), s);
  if (s.sandwich_norms) pre_feedforward_layernorm_ = make_norm(join_path(path, "pre_feedforward_layernorm"), s);
  if (s.sandwich_norms || s.post_norms_only)
    post_feedforward_layernorm_ = make_norm(join_path(path, "post_feedforward_layernorm"), s);
  residual_multiplier_ = s.residual_multiplier;
  const auto li = static_cast<size_t>(attn.layer);
  if (li < s.moe_layers.size() && s.moe_layers[li].num_experts > 0)
    mlp_ = add_child<SparseMoeBlock>(join_path(path, "mlp"), s.moe_layers[li], s.hidden_size, s.hidden_act);
  else if (s.gated_mlp)
    mlp_ = add_child<GatedMLP>(join_path(path, "mlp"), s.class_prefix + "MLP", s.hidden_size, s.intermediate_size,
                               s.mlp_bias, s.hidden_act);
  else
    mlp_ = add_child<MLP>(join_path(path, "mlp"), s.class_prefix + "MLP", s.hidden_size, s.intermediate_size, s.mlp_bias,
                          s.hidden_act);
  for (const UnaryModule* m : {input_layernorm_, post_attention_layernorm_, mlp_, pre_feedforward_layernorm_,
                               post_feedforward_layernorm_})
    if (m) declare_patch_point(*m);
  declare_patch_point(*self_attn_);
}

ValueId DecoderLayer::scaled(GraphBuilder& b, ValueId h) const {
  if (residual_multiplier_ == 1.0) return h;
  GraphBuilder::Scope scope(b, path());
  return b.op("scale", {h}, {{"factor", residual_multiplier_}});
}

ValueId DecoderLayer::forward(GraphBuilder& b, ValueId x, ValueId positions) const {
  if (!input_layernorm_) {  // post_norms_only (Olmo2)
    ValueId h = call_forward(*post_attention_layernorm_, b, call_forward(*self_attn_, b, x, positions));
    ValueId mid;
    {
      GraphBuilder::Scope scope(b, path());
      mid = b.op("add", {x, h});
    }
    ValueId m = call_forward(*post_feedforward_layernorm_, b, call_forward(*mlp_, b, mid));
    GraphBuilder::Scope scope(b, path());
    return b.op("add", {mid, m});
  }
  ValueId h = call_forward(*self_attn_, b, call_forward(*input_layernorm_, b, x), positions);
  if (pre_feedforward_layernorm_) {
    h = call_forward(*post_attention_layernorm_, b, h);
    const auto [residual, normed] = residual_add_then_norm(b, path(), *pre_feedforward_layernorm_, x, h);
    ValueId m = call_forward(*mlp_, b, normed);
    m = call_forward(*post_feedforward_layernorm_, b, m);
    GraphBuilder::Scope scope(b, path());
    return b.op("add", {residual, m});
  }
  const auto [residual, normed] = residual_add_then_norm(b, path(), *post_attention_layernorm_, x, scaled(b, h));
  ValueId m = scaled(b, call_forward(*mlp_, b, normed));
  GraphBuilder::Scope scope(b, path());
  return b.op("add", {residual, m});
}

DecoderModel::DecoderModel(const std::string& path, const DecoderSettings& s)
    : DecoderPart(path, s.class_prefix + "Model", "Model") {
  embed_tokens_ = add_child<Embedding>(join_path(path, "embed_tokens"), s.vocab_size, s.hidden_size);
  if (s.learned_positions > 0)
    embed_positions_ = add_child<Embedding>(join_path(path, "embed_positions"), s.learned_positions, s.hidden_size);
  for (size_t i = 0; i < s.layers.size(); ++i)
    layers_.push_back(add_child<DecoderLayer>(join_path(path, "layers." + std::to_string(i)), s, s.layers[i]));
  norm_ = make_norm(join_path(path, "norm"), s);
  embedding_scale_ = s.embedding_scale;
  for (const DecoderLayer* layer : layers_) declare_patch_point(*layer);
  declare_patch_point(*norm_);
}

ValueId DecoderModel::forward(GraphBuilder& b, ValueId ids, ValueId positions) const {
  ValueId x = embed_tokens_->forward(b, ids);
  if (embedding_scale_ > 0) {
    GraphBuilder::Scope scope(b, path());
    x = b.op("scale", {x}, {{"factor", embedding_scale_}});
  }
  if (embed_positions_) {
    ValueId pos = embed_positions_->forward(b, positions);
    GraphBuilder::Scope scope(b, path());
    x = b.op("add", {x, pos});
  }
  for (const DecoderLayer* layer : layers_) x = call_forward(*layer, b, x, positions);
  return call_forward(*norm_, b, x);
}

CausalLM::CausalLM(const DecoderSettings& s)
    : Module("", s.class_name.empty() ? s.class_prefix + "ForCausalLM" : s.class_name, "CausalLM"), s_(s) {
  model_ = add_child<DecoderModel>("model", s);
  lm_head_ = add_child<Linear>("lm_head", s.hidden_size, s.vocab_size, false,
                               s.tie_word_embeddings ? "model.embed_tokens.weight" : "");
}

Status CausalLM::apply_tensor_parallel(const TensorParallel& tp) {
  LOOM_RETURN_IF_ERROR(model_->apply_tensor_parallel(tp));
  if (!tp.active() || s_.vocab_size % tp.size != 0) return Status::Ok();
  // A tied head reads its vocabulary rows of the embedding table (a view, no
  // copy): each rank then reads 1/N of the head per token, not all of it.
  if (lm_head_->tied()) return lm_head_->parallelize_tied_rows(tp);
  return lm_head_->parallelize(LinearParallel::kColumnGathered, tp);
}

graph::Graph CausalLM::build_graph(const graph::GraphBuilder::ParameterSource& params,
                                   const kernels::KernelPlan* plan) const {
  graph::Graph g;
  const int tokens = g.add_symbol(step_io::kTokens);
  const int sequences = g.add_symbol(step_io::kSequences);
  ValueId ids = g.add_input(step_io::kInputIds, DType::kI32, {graph::Dim::sym(tokens)});
  ValueId positions = g.add_input(step_io::kPositions, DType::kI32, {graph::Dim::sym(tokens)});
  ValueId rows = g.add_input(step_io::kLogitsIndices, DType::kI32, {graph::Dim::sym(sequences)});
  GraphBuilder b(&g, params, plan, plan ? this : nullptr);
  ValueId hidden = model_->forward(b, ids, positions);
  ValueId last;
  {
    GraphBuilder::Scope scope(b, "");
    // Only the rows whose next token is wanted go through the LM head.
    last = b.op("gather_rows", {hidden, rows});
  }
  ValueId logits = lm_head_->forward(b, last);
  if (s_.final_logit_softcap > 0) {
    GraphBuilder::Scope scope(b, "");
    logits = b.op("softcap", {logits}, {{"cap", s_.final_logit_softcap}});
  }
  if (s_.logits_scaling != 1.0) {  // Granite: logits / logits_scaling
    GraphBuilder::Scope scope(b, "");
    logits = b.op("scale", {logits}, {{"factor", 1.0 / s_.logits_scaling}});
  }
  g.mark_output(step_io::kLogits, logits);
  return g;
}

}  // namespace loom::models
