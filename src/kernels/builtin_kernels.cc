// loom's own kernels. Each is what a model records instead of a module's own
// forward when KernelConfig picks it (models switch on KernelSpec::name); the
// layouts below are the parameters those recordings read.
#include <string>

#include "loom/kernels/kernel_registry.h"
#include "loom/weights/conversion_ops.h"

namespace loom::kernels {

namespace {

Result<const ParamInfo*> need_param(const ModuleInfo& m, const std::string& leaf, int rank, const std::string& kernel) {
  const std::string name = m.path + "." + leaf;
  const ParamInfo* p = m.find_parameter(name);
  if (!p) return not_found(kernel + " layout: module " + m.path + " (" + m.class_name + ") has no parameter " + name);
  if (static_cast<int>(p->shape.size()) != rank)
    return invalid_argument(kernel + " layout: " + name + " has rank " + std::to_string(p->shape.size()) + ", expected " +
                            std::to_string(rank));
  return p;
}

// Biases of `leaves` under `m`: all present (returned) or none (empty).
Result<std::vector<const ParamInfo*>> all_or_no_bias(const ModuleInfo& m, const std::vector<std::string>& leaves,
                                                     const std::string& kernel) {
  std::vector<const ParamInfo*> found;
  for (const auto& l : leaves) {
    const ParamInfo* b = m.find_parameter(m.path + "." + l + ".bias");
    if (b) found.push_back(b);
  }
  if (!found.empty() && found.size() != leaves.size())
    return unsupported(kernel + " layout: " + m.path + " has biases on some projections but not all");
  return found;
}

std::string anchored(const std::string& name) { return "^" + name + "$"; }

WeightConverter concat_rule(const std::vector<const ParamInfo*>& sources, const std::string& target, const std::string& why) {
  WeightConverter c;
  for (const ParamInfo* s : sources) c.sources.push_back(anchored(s->name));
  c.targets = {anchored(target)};
  c.operations = {Concatenate(0)};
  c.name = why;
  return c;
}

Result<LayoutInstance> fused_qkv_layout(const LayoutRequest& r) {
  const std::string kernel = "loom:FusedQKV";
  if (r.modules.size() != 1) return invalid_argument(kernel + " layout: expects one Attention module");
  const ModuleInfo& m = *r.modules[0];
  LOOM_ASSIGN_OR_RETURN(const ParamInfo* q, need_param(m, "q_proj.weight", 2, kernel));
  LOOM_ASSIGN_OR_RETURN(const ParamInfo* k, need_param(m, "k_proj.weight", 2, kernel));
  LOOM_ASSIGN_OR_RETURN(const ParamInfo* v, need_param(m, "v_proj.weight", 2, kernel));
  if (k->shape[1] != q->shape[1] || v->shape[1] != q->shape[1])
    return invalid_argument(kernel + " layout: " + m.path + ": q/k/v projections read different input sizes");
  LOOM_ASSIGN_OR_RETURN(auto biases, all_or_no_bias(m, {"q_proj", "k_proj", "v_proj"}, kernel));

  LayoutInstance li;
  li.slot = m.path;
  const int64_t rows = q->shape[0] + k->shape[0] + v->shape[0];
  const std::string w = m.path + ".qkv_proj.weight";
  li.parameters.push_back({w, {rows, q->shape[1]}, q->name});
  li.replaced = {q->name, k->name, v->name};
  li.rules.push_back(concat_rule({q, k, v}, w, kernel + " at " + m.path));
  if (!biases.empty()) {
    const std::string b = m.path + ".qkv_proj.bias";
    li.parameters.push_back({b, {rows}, biases[0]->name});
    for (const ParamInfo* p : biases) li.replaced.push_back(p->name);
    li.rules.push_back(concat_rule(biases, b, kernel + " bias at " + m.path));
  }
  return li;
}

Result<LayoutInstance> rms_norm_mlp_layout(const LayoutRequest& r) {
  const std::string kernel = "loom:RMSNormMLP";
  if (r.modules.size() != 2) return invalid_argument(kernel + " layout: expects (RMSNorm, MLP)");
  const ModuleInfo& norm = *r.modules[0];
  const ModuleInfo& mlp = *r.modules[1];
  LOOM_ASSIGN_OR_RETURN(const ParamInfo* n, need_param(norm, "weight", 1, kernel));
  LOOM_ASSIGN_OR_RETURN(const ParamInfo* g, need_param(mlp, "gate_proj.weight", 2, kernel));
  LOOM_ASSIGN_OR_RETURN(const ParamInfo* u, need_param(mlp, "up_proj.weight", 2, kernel));
  LOOM_ASSIGN_OR_RETURN(const ParamInfo* d, need_param(mlp, "down_proj.weight", 2, kernel));
  if (g->shape != u->shape || g->shape[1] != n->shape[0] || d->shape[0] != n->shape[0] || d->shape[1] != g->shape[0])
    return invalid_argument(kernel + " layout: " + norm.path + " and " + mlp.path + " do not agree on sizes");
  LOOM_ASSIGN_OR_RETURN(auto biases, all_or_no_bias(mlp, {"gate_proj", "up_proj", "down_proj"}, kernel));

  // The fused parameters sit in the first child's slot (the norm), as in
  // Transformers' fused parent; the MLP slot becomes an identity.
  LayoutInstance li;
  li.slot = norm.path;
  const std::string gu = norm.path + ".gate_up_proj.weight";
  const std::string dn = norm.path + ".down_proj.weight";
  li.parameters.push_back({n->name, n->shape, n->name});
  li.parameters.push_back({gu, {2 * g->shape[0], g->shape[1]}, g->name});
  li.parameters.push_back({dn, d->shape, d->name});
  li.replaced = {g->name, u->name, d->name};
  const std::string why = kernel + " at " + norm.path;
  li.rules.push_back(concat_rule({g, u}, gu, why));
  li.rules.push_back(WeightRenaming{anchored(d->name), dn, false, why});
  if (!biases.empty()) {
    li.parameters.push_back({norm.path + ".gate_up_proj.bias", {2 * g->shape[0]}, biases[0]->name});
    li.parameters.push_back({norm.path + ".down_proj.bias", biases[2]->shape, biases[2]->name});
    for (const ParamInfo* p : biases) li.replaced.push_back(p->name);
    li.rules.push_back(concat_rule({biases[0], biases[1]}, norm.path + ".gate_up_proj.bias", why + " (bias)"));
    li.rules.push_back(WeightRenaming{anchored(biases[2]->name), norm.path + ".down_proj.bias", false, why + " (bias)"});
  }
  return li;
}

// gate_proj and up_proj merged into one [2I, H] projection (gate rows, then up
// rows) that silu_and_mul reads as [gate | up]; down_proj stays as it is.
Result<LayoutInstance> fused_gate_up_layout(const LayoutRequest& r) {
  const std::string kernel = "loom:FusedGateUpMLP";
  if (r.modules.size() != 1) return invalid_argument(kernel + " layout: expects one MLP module");
  const ModuleInfo& mlp = *r.modules[0];
  LOOM_ASSIGN_OR_RETURN(const ParamInfo* g, need_param(mlp, "gate_proj.weight", 2, kernel));
  LOOM_ASSIGN_OR_RETURN(const ParamInfo* u, need_param(mlp, "up_proj.weight", 2, kernel));
  if (g->shape != u->shape)
    return invalid_argument(kernel + " layout: " + mlp.path + ": gate_proj and up_proj have different shapes");
  LOOM_ASSIGN_OR_RETURN(auto biases, all_or_no_bias(mlp, {"gate_proj", "up_proj"}, kernel));
  LayoutInstance li;
  li.slot = mlp.path;
  const std::string gu = mlp.path + ".gate_up_proj.weight";
  const std::string why = kernel + " at " + mlp.path;
  li.parameters.push_back({gu, {2 * g->shape[0], g->shape[1]}, g->name});
  li.replaced = {g->name, u->name};
  li.rules.push_back(concat_rule({g, u}, gu, why));
  if (!biases.empty()) {
    const std::string b = mlp.path + ".gate_up_proj.bias";
    li.parameters.push_back({b, {2 * g->shape[0]}, biases[0]->name});
    for (const ParamInfo* p : biases) li.replaced.push_back(p->name);
    li.rules.push_back(concat_rule(biases, b, why + " (bias)"));
  }
  return li;
}

KernelSpec builtin(std::string name, std::string layer, KernelLayout layout = {}) {
  KernelSpec s;
  s.repo = kBuiltinRepo;
  s.name = std::move(name);
  s.version = {1, 0, 0};
  s.devices = {"cpu"};
  s.layers = {std::move(layer)};
  s.layout = std::move(layout);
  return s;
}

// The residual add between a sublayer and the norm after it, fused into that
// norm (one add_rms_norm op): after the attention in a pre-norm decoder layer
// (Llama's post_attention_layernorm), or between Gemma-2's sandwich norms. It
// reads the norm's own weight, so it needs no layout.
KernelSpec add_rms_norm() {
  KernelSpec s = builtin("AddRMSNorm", "Attention+RMSNorm");
  s.layers.push_back("MLP+RMSNorm");
  s.layers.push_back("RMSNorm+RMSNorm");
  s.residual_tail = true;
  return s;
}

}  // namespace

std::vector<KernelSpec> builtin_kernels() {
  return {
      builtin("FusedRMSNorm", "RMSNorm"),
      builtin("SiLUAndMul", "SiLUAndMul"),
      builtin("FusedQKV", "Attention", fused_qkv_layout),
      builtin("RMSNormMLP", "RMSNorm+MLP", rms_norm_mlp_layout),
      builtin("FusedGateUpMLP", "MLP", fused_gate_up_layout),
      add_rms_norm(),
  };
}

}  // namespace loom::kernels
