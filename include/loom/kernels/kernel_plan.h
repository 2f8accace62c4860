// Resolving a KernelConfig against one model instance: per module, which kernel
// replaces its forward (or none, and why), the fused instances with their
// chain, and the layouts' parameters and weight rules. The plan is a value the
// model keeps; nothing global changes.
//
// How a model uses it (models/ calls kernels/, never the reverse):
//   1. Build the module tree; record the graph with every module's own forward
//      (the "plain" graph; placeholder parameters are enough, only scopes and
//      data flow are read). Fill a ModuleView (module_view.h) and point
//      view.graph at the plain graph.
//   2. KernelRegistry reg; (add plugin directories from flags / env)
//      LOOM_ASSIGN_OR_RETURN(KernelPlan plan, resolve_kernels(config, view, reg));
//   3. Expected parameters: plan.apply_layouts(model_expected); weight rules:
//      model_rules + plan.weight_rules() (appended, after the architecture's
//      renamings), compiled into the ConversionPlan of this load only.
//   4. Recording: each module asks plan.find(path()):
//        kOwnForward / kFallback → its own forward;
//        kKernel  → record the kernel's ops (switch on kernel->repo/name; a
//                   plugin's entry/entry_signature) reading layout parameters;
//        kFused   → record the fused kernel on chain.input, producing what the
//                   last child produced (and, for residual links, taking the
//                   residual and returning the add's result);
//        kFusedAway, kInsideReplaced → record nothing (identity).
//   5. `loom kernels --explain` prints plan.explain().
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loom/core/status.h"
#include "loom/kernels/cpu_capability.h"
#include "loom/kernels/fusion_chain.h"
#include "loom/kernels/kernel_config.h"
#include "loom/kernels/kernel_layout.h"
#include "loom/kernels/kernel_registry.h"
#include "loom/kernels/module_view.h"
#include "loom/weights/conversion_plan.h"

namespace loom::kernels {

enum class ModuleKernelKind {
  kOwnForward,       // nothing asked for this module (on its device)
  kKernel,           // a kernel replaces its forward
  kFallback,         // a kernel was asked for but none runs here; own forward, with a warning
  kFused,            // head of a fused instance: the fused kernel runs here
  kFusedAway,        // another child of a fused instance: identity
  kInsideReplaced,   // inside a module a kernel (or fusion) replaces
};
const char* module_kernel_kind_name(ModuleKernelKind kind);

struct ModuleKernel {
  std::string path;
  std::string class_name;
  std::string layer_name;
  ModuleKernelKind kind = ModuleKernelKind::kOwnForward;
  std::shared_ptr<const KernelSpec> kernel;  // kKernel, kFused (and kFusedAway: the head's)
  std::string rule;                          // the config entry responsible ("\"RMSNorm\"", "fusion ((…))")
  std::string reason;
  std::vector<std::string> fused_modules;    // kFused: children in chain order; kFusedAway/kInsideReplaced: [owner]
  std::optional<ChainInfo> chain;            // kFused
  std::optional<LayoutInstance> layout;      // kKernel / kFused with a Layout
};

struct ResolveOptions {
  const CpuFeatures* cpu = nullptr;  // nullptr: CpuFeatures::host()
};

class KernelPlan {
 public:
  // Every module whose layer is a kernel layer name, in ModuleView order.
  const std::vector<ModuleKernel>& modules() const { return modules_; }
  const ModuleKernel* find(const std::string& path) const;
  bool uses_kernels() const;

  // The layouts' rules, in module order: append to the model's own rules.
  WeightRules weight_rules() const;
  // The model's expected parameters with each layout's `replaced` removed and
  // its `parameters` added (dtype from dtype_from). kNotFound naming a
  // replaced parameter the model does not expect.
  Result<ExpectedParams> apply_layouts(const ExpectedParams& model_expected) const;

  const std::vector<std::string>& warnings() const { return warnings_; }
  // Printable lines: a summary, then one line per module (plus layout/chain).
  std::vector<std::string> explain() const;

 private:
  friend Result<KernelPlan> resolve_kernels(const KernelConfig&, const ModuleView&, KernelRegistry&,
                                            const ResolveOptions&);
  std::vector<ModuleKernel> modules_;
  std::map<std::string, size_t> by_path_;
  std::vector<std::string> warnings_;
  std::string cpu_;
  bool use_fallback_ = true;
};

// Errors name the config entry: pattern matching nothing, missing children,
// children not forming a chain (fusion_chain.h), two fusions claiming one
// module or a fusion inside a module a layer kernel replaces (conflicting
// rules), missing graph for a fusion, kernel lookup/selection errors
// (kernel_selection.h), layout errors. Fallbacks are logged with log_warn once
// per entry and device.
Result<KernelPlan> resolve_kernels(const KernelConfig& config, const ModuleView& view, KernelRegistry& registry,
                                   const ResolveOptions& options = {});

}  // namespace loom::kernels
