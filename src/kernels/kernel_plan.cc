#include "loom/kernels/kernel_plan.h"

#include <algorithm>
#include <set>

#include "loom/core/logging.h"
#include "loom/kernels/kernel_selection.h"
#include "loom/kernels/layer_names.h"

namespace loom::kernels {

namespace {

size_t depth(const std::string& path) {
  return path.empty() ? 0 : 1 + static_cast<size_t>(std::count(path.begin(), path.end(), '.'));
}

// Selections are shared by every module using the same ref on the same device,
// so a plugin loads and a fallback warns once.
class Selector {
 public:
  Selector(KernelRegistry& reg, const CpuFeatures& cpu, bool use_fallback, std::vector<std::string>* warnings)
      : reg_(reg), cpu_(cpu), use_fallback_(use_fallback), warnings_(warnings) {}

  Result<KernelSelection> select(const KernelRef& ref, const std::string& layer_key, const std::string& device,
                                 const std::string& rule) {
    const std::string key = ref.to_string() + "|" + layer_key + "|" + device;
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    auto sel = select_kernel(reg_, ref, layer_key, device, cpu_, use_fallback_);
    if (!sel.ok()) return sel.status().with_context("kernel config " + rule);
    if (!sel->kernel) {
      const std::string w = "kernel config " + rule + ": " + sel->reason;
      warnings_->push_back(w);
      log_warn(w);
    }
    cache_.emplace(key, *sel);
    return sel;
  }

 private:
  KernelRegistry& reg_;
  const CpuFeatures& cpu_;
  bool use_fallback_;
  std::vector<std::string>* warnings_;
  std::map<std::string, KernelSelection> cache_;
};

Result<std::optional<LayoutInstance>> make_layout(const KernelSpec& spec, const std::vector<const ModuleInfo*>& modules,
                                                  const std::string& rule) {
  if (!spec.layout) return std::optional<LayoutInstance>();
  const size_t slot = spec.residual_tail ? modules.size() - 1 : 0;
  auto li = spec.layout(LayoutRequest{modules, slot});
  if (!li.ok()) return li.status().with_context("kernel config " + rule);
  if (li->slot != modules[slot]->path)
    return internal_error("kernel config " + rule + ": layout of " + spec.id() + " put its parameters at '" + li->slot +
                          "', not at " + modules[slot]->path);
  return std::optional<LayoutInstance>(std::move(li).value());
}

}  // namespace

const char* module_kernel_kind_name(ModuleKernelKind kind) {
  switch (kind) {
    case ModuleKernelKind::kOwnForward: return "own forward";
    case ModuleKernelKind::kKernel: return "kernel";
    case ModuleKernelKind::kFallback: return "fallback";
    case ModuleKernelKind::kFused: return "fused";
    case ModuleKernelKind::kFusedAway: return "identity";
    case ModuleKernelKind::kInsideReplaced: return "replaced";
  }
  return "?";
}

const ModuleKernel* KernelPlan::find(const std::string& path) const {
  auto it = by_path_.find(path);
  return it == by_path_.end() ? nullptr : &modules_[it->second];
}

bool KernelPlan::uses_kernels() const {
  return std::any_of(modules_.begin(), modules_.end(), [](const ModuleKernel& m) {
    return m.kind == ModuleKernelKind::kKernel || m.kind == ModuleKernelKind::kFused;
  });
}

WeightRules KernelPlan::weight_rules() const {
  WeightRules rules;
  for (const auto& m : modules_)
    if (m.layout) rules.insert(rules.end(), m.layout->rules.begin(), m.layout->rules.end());
  return rules;
}

Result<ExpectedParams> KernelPlan::apply_layouts(const ExpectedParams& model_expected) const {
  ExpectedParams out = model_expected;
  for (const auto& m : modules_) {
    if (!m.layout) continue;
    for (const auto& r : m.layout->replaced) {
      if (!model_expected.count(r))
        return not_found("kernel layout at " + m.path + " replaces parameter " + r + ", which the model does not expect");
      out.erase(r);
    }
    for (const auto& p : m.layout->parameters) {
      ExpectedParam e;
      e.shape = p.shape;
      if (!p.dtype_from.empty()) {
        auto it = model_expected.find(p.dtype_from);
        if (it != model_expected.end()) e.dtype = it->second.dtype;
      }
      out[p.name] = e;
    }
  }
  return out;
}

std::vector<std::string> KernelPlan::explain() const {
  std::map<ModuleKernelKind, int> counts;
  for (const auto& m : modules_) ++counts[m.kind];
  std::vector<std::string> lines;
  lines.push_back("kernels: " + std::to_string(modules_.size()) + " modules; " +
                  std::to_string(counts[ModuleKernelKind::kKernel]) + " kernel, " +
                  std::to_string(counts[ModuleKernelKind::kFused]) + " fused, " +
                  std::to_string(counts[ModuleKernelKind::kFallback]) + " fallback; cpu " + cpu_ +
                  "; use_fallback " + (use_fallback_ ? "on" : "off"));
  for (const auto& m : modules_) {
    std::string what;
    switch (m.kind) {
      case ModuleKernelKind::kKernel: what = m.kernel->id(); break;
      case ModuleKernelKind::kFused: {
        if (m.kernel->residual_tail) {
          what = "fused " + m.kernel->id() + " with the residual add of " + m.fused_modules[0];
          break;
        }
        what = "fused " + m.kernel->id() + " with";
        for (size_t i = 1; i < m.fused_modules.size(); ++i) what += " " + m.fused_modules[i];
        break;
      }
      case ModuleKernelKind::kFusedAway: what = "identity (fused into " + m.fused_modules[0] + ")"; break;
      case ModuleKernelKind::kInsideReplaced: what = "replaced (inside " + m.fused_modules[0] + ")"; break;
      default: what = module_kernel_kind_name(m.kind);
    }
    lines.push_back(m.path + " [" + m.class_name + ", " + m.layer_name + "] -> " + what +
                    (m.rule.empty() ? "" : " by " + m.rule) + ": " + m.reason);
    if (m.chain) {
      std::string c = "    chain:";
      for (const auto& l : m.chain->links) c += l.residual ? " residual-add" : " direct";
      lines.push_back(c);
    }
    if (m.layout) lines.push_back("    " + m.layout->describe());
  }
  return lines;
}

Result<KernelPlan> resolve_kernels(const KernelConfig& config, const ModuleView& view, KernelRegistry& registry,
                                   const ResolveOptions& options) {
  const CpuFeatures& cpu = options.cpu ? *options.cpu : CpuFeatures::host();
  KernelPlan plan;
  plan.cpu_ = cpu_level_name(cpu.level());
  plan.use_fallback_ = config.use_fallback();
  Selector selector(registry, cpu, config.use_fallback(), &plan.warnings_);

  std::map<std::string, ModuleKernel> decided;
  std::map<std::string, std::string> claimed_by;     // module → fusion that matched it
  std::map<std::string, std::string> fusion_notes;   // module → why a matching fusion did not apply

  for (const FusionEntry& f : config.fusions()) {
    const std::string rule = "fusion " + f.describe();
    const size_t n = f.children.size();
    std::vector<std::string> parents;  // in view order
    std::map<std::string, std::vector<const ModuleInfo*>> groups;
    for (size_t c = 0; c < n; ++c) {
      bool any = false;
      for (const ModuleInfo& m : view.modules) {
        if (!module_pattern_matches(f.children[c].pattern, m.path)) continue;
        if (m.layer_name != f.children[c].layer)
          return invalid_argument("kernel config " + rule + ": " + m.path + " matches '" + f.children[c].pattern +
                                  "' but is a " + m.layer_name + " (" + m.class_name + "), not a " + f.children[c].layer);
        any = true;
        const std::string parent = parent_path(m.path);
        auto [it, inserted] = groups.emplace(parent, std::vector<const ModuleInfo*>(n, nullptr));
        if (inserted) parents.push_back(parent);
        if (it->second[c])
          return invalid_argument("kernel config " + rule + ": pattern '" + f.children[c].pattern +
                                  "' matches both " + it->second[c]->path + " and " + m.path + " under " + parent);
        it->second[c] = &m;
      }
      if (!any)
        return invalid_argument("kernel config " + rule + ": pattern '" + f.children[c].pattern + "' (" +
                                f.children[c].layer + ") matches no module");
    }
    for (const std::string& parent : parents) {
      const auto& kids = groups[parent];
      std::vector<std::string> paths;
      for (size_t c = 0; c < n; ++c) {
        if (!kids[c])
          return invalid_argument("kernel config " + rule + ": under " + parent + " there is no module matching (" +
                                  f.children[c].layer + ", " + f.children[c].pattern + ")");
        paths.push_back(kids[c]->path);
      }
      for (const auto& p : paths) {
        auto [it, inserted] = claimed_by.emplace(p, rule);
        if (!inserted)
          return invalid_argument("conflicting rules: " + p + " is claimed by kernel config " + it->second + " and " + rule);
      }
      const std::string& device = kids[0]->device;
      for (const ModuleInfo* k : kids)
        if (k->device != device)
          return invalid_argument("kernel config " + rule + ": " + k->path + " is on " + k->device + " but " +
                                  kids[0]->path + " is on " + device);
      if (!view.graph)
        return failed_precondition("kernel config " + rule +
                                   ": checking the fused chain needs the model's recorded graph (ModuleView::graph)");
      auto chain = check_chain(*view.graph, parent, paths);
      if (!chain.ok()) return chain.status().with_context("kernel config " + rule);

      const KernelRef* ref = f.choice.for_device(device);
      if (!ref) {
        for (const auto& p : paths) fusion_notes[p] = rule + " names no kernel for " + device + "; ";
        continue;
      }
      LOOM_ASSIGN_OR_RETURN(KernelSelection sel, selector.select(*ref, f.layer_key(), device, rule));
      if (!sel.kernel) {
        for (const auto& p : paths) fusion_notes[p] = rule + ": " + sel.reason + "; ";
        continue;
      }
      // A residual-tail kernel (fused add + norm) runs at the last child and
      // leaves the first to its own forward or layer entry.
      const bool tail = sel.kernel->residual_tail;
      if (tail) {
        if (n != 2)
          return invalid_argument("kernel config " + rule + ": " + sel.kernel->id() +
                                  " fuses the residual add between two modules, the config names " + std::to_string(n));
        if (!chain->links[0].residual)
          return invalid_argument("kernel config " + rule + ": " + sel.kernel->id() + " fuses a residual add, but " +
                                  paths[1] + " reads " + paths[0] + "'s output directly");
      }
      LOOM_ASSIGN_OR_RETURN(auto layout, make_layout(*sel.kernel, kids, rule));
      for (size_t c = tail ? 1 : 0; c < n; ++c) {
        ModuleKernel mk;
        mk.path = kids[c]->path;
        mk.class_name = kids[c]->class_name;
        mk.layer_name = kids[c]->layer_name;
        mk.kernel = sel.kernel;
        mk.rule = rule;
        if (c == (tail ? n - 1 : 0)) {
          mk.kind = ModuleKernelKind::kFused;
          mk.fused_modules = paths;
          mk.chain = *chain;
          mk.layout = layout;
          mk.reason = sel.reason;
        } else {
          mk.kind = ModuleKernelKind::kFusedAway;
          mk.fused_modules = {paths[0]};
          mk.reason = "its work is done by " + sel.kernel->id() + " at " + paths[0];
        }
        decided.emplace(mk.path, std::move(mk));
      }
    }
  }

  // Layer entries, outermost modules first so a replaced module's insides are known.
  std::vector<const ModuleInfo*> order;
  for (const ModuleInfo& m : view.modules) order.push_back(&m);
  std::stable_sort(order.begin(), order.end(),
                   [](const ModuleInfo* a, const ModuleInfo* b) { return depth(a->path) < depth(b->path); });
  std::vector<std::string> replaced_roots;  // modules whose subtree a kernel replaces
  for (const auto& [p, mk] : decided) replaced_roots.push_back(p);
  for (const ModuleInfo* m : order) {
    std::string owner;
    for (const auto& r : replaced_roots)
      if (r != m->path && scope_within(m->path, r) && (owner.empty() || r.size() > owner.size())) owner = r;
    auto it = decided.find(m->path);
    if (it != decided.end()) {
      if (!owner.empty())
        return invalid_argument("conflicting rules: " + m->path + " is claimed by kernel config " + it->second.rule +
                                " but lies inside " + owner + ", which " + decided[owner].rule + " replaces");
      continue;
    }
    if (!is_kernel_layer_name(m->layer_name)) continue;
    ModuleKernel mk;
    mk.path = m->path;
    mk.class_name = m->class_name;
    mk.layer_name = m->layer_name;
    const std::string note = fusion_notes.count(m->path) ? fusion_notes[m->path] : "";
    if (!owner.empty()) {
      mk.kind = ModuleKernelKind::kInsideReplaced;
      mk.fused_modules = {owner};
      mk.reason = "its forward is not called: " + owner + " is replaced";
      decided.emplace(m->path, std::move(mk));
      continue;
    }
    auto entry = config.layers().find(m->layer_name);
    if (entry == config.layers().end()) {
      mk.reason = note + "no kernel config entry for " + m->layer_name;
      decided.emplace(m->path, std::move(mk));
      continue;
    }
    mk.rule = "\"" + m->layer_name + "\"";
    const KernelRef* ref = entry->second.for_device(m->device);
    if (!ref) {
      mk.reason = note + "entry names no kernel for " + m->device;
      decided.emplace(m->path, std::move(mk));
      continue;
    }
    LOOM_ASSIGN_OR_RETURN(KernelSelection sel, selector.select(*ref, m->layer_name, m->device, mk.rule));
    mk.reason = note + sel.reason;
    if (!sel.kernel) {
      mk.kind = ModuleKernelKind::kFallback;
    } else {
      mk.kind = ModuleKernelKind::kKernel;
      mk.kernel = sel.kernel;
      LOOM_ASSIGN_OR_RETURN(mk.layout, make_layout(*sel.kernel, {m}, mk.rule));
      replaced_roots.push_back(m->path);
    }
    decided.emplace(m->path, std::move(mk));
  }

  for (const ModuleInfo& m : view.modules) {
    auto it = decided.find(m.path);
    if (it == decided.end()) continue;
    plan.by_path_[m.path] = plan.modules_.size();
    plan.modules_.push_back(std::move(it->second));
    decided.erase(it);
  }
  return plan;
}

}  // namespace loom::kernels
