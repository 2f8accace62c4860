#include "loom/models/builtin_fusions.h"

#include <map>

#include "loom/kernels/module_view.h"
#include "loom/models/decoder.h"
#include "loom/models/layers.h"

namespace loom::models {

namespace {

// "model.layers.3.mlp" → true: a module directly under a decoder layer.
bool in_decoder_layer(const std::string& path, const std::string& leaf) {
  const std::string prefix = "model.layers.";
  if (path.rfind(prefix, 0) != 0) return false;
  const size_t dot = path.find('.', prefix.size());
  if (dot == std::string::npos || dot == prefix.size()) return false;
  for (size_t i = prefix.size(); i < dot; ++i)
    if (path[i] < '0' || path[i] > '9') return false;
  return path.substr(dot + 1) == leaf;
}

kernels::KernelRef builtin_ref(const std::string& name) { return kernels::KernelRef::parse("loom:" + name).value(); }

}  // namespace

kernels::KernelConfig builtin_fusion_config(const Module& root, const BuiltinFusions& which) {
  std::vector<const Module*> all;
  root.collect_modules(&all);
  std::map<std::string, const Module*> by_path;
  for (const Module* m : all) by_path[m->path()] = m;

  bool attentions = false, qkv_fits = true, mlps = false, gate_up_fits = true;
  std::vector<std::string> layers;  // decoder layer paths
  for (const Module* m : all) {
    if (m->layer_name() == "Attention") {
      attentions = true;
      qkv_fits &= dynamic_cast<const SelfAttention*>(m) != nullptr;
    }
    if (m->layer_name() == "MLP") {
      mlps = true;
      const auto* g = dynamic_cast<const GatedMLP*>(m);
      gate_up_fits &= g && g->activation() == "silu" && in_decoder_layer(m->path(), "mlp");
    }
    if (m->layer_name() == "DecoderLayer") layers.push_back(m->path());
  }
  // Granite scales each sublayer's output before its residual add: the add then reads
  // a scale op, not the attention, so the add + norm is no chain to fuse.
  const auto* lm = dynamic_cast<const CausalLM*>(&root);
  bool add_norm_fits = !layers.empty() && !(lm && lm->settings().residual_multiplier != 1.0);
  for (const std::string& l : layers) {
    const auto attn = by_path.find(l + ".self_attn");
    const auto norm = by_path.find(l + ".post_attention_layernorm");
    add_norm_fits &= attn != by_path.end() && dynamic_cast<const SelfAttention*>(attn->second) &&
                     norm != by_path.end() && dynamic_cast<const RMSNorm*>(norm->second) &&
                     // Gemma-2's sandwich: the norm reads the attention directly, the add comes after it;
                     // Olmo2's post-norms (no input_layernorm) likewise.
                     !by_path.count(l + ".pre_feedforward_layernorm") && by_path.count(l + ".input_layernorm");
  }

  kernels::KernelConfig c;
  if (which.qkv && attentions && qkv_fits)
    (void)c.add_layer("Attention", kernels::KernelChoice::any(builtin_ref("FusedQKV")));
  if (which.gate_up && mlps && gate_up_fits)
    (void)c.add_layer("MLP", kernels::KernelChoice::any(builtin_ref("FusedGateUpMLP")));
  if (which.add_norm && add_norm_fits)
    (void)c.add_fusion({{"Attention", "model.layers.*.self_attn"}, {"RMSNorm", "model.layers.*.post_attention_layernorm"}},
                       kernels::KernelChoice::any(builtin_ref("AddRMSNorm")));
  return c;
}

}  // namespace loom::models
