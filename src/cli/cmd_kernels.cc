// `loom kernels --model DIR --kernel-config FILE --explain`: resolve a
// KernelConfig (without one: the built-in fusions other commands load the model
// with) against one model instance and print, per module, which kernel was
// chosen and why (or why none: not asked, no variant for this CPU, fused into a
// neighbour). Without --explain: the kernels available (built-in and in
// the plugin directories).
#include <cstdio>

#include "cli/commands.h"
#include "cli/common.h"
#include "loom/kernels/kernel_plan.h"
#include "loom/models/builtin_fusions.h"
#include "loom/models/model.h"

namespace loom::cli {

namespace {

struct KernelsArgs {
  std::string model_dir, config;
  std::vector<std::string> plugin_dirs, trusted_plugin_dirs;
  bool explain = false;
};

void run_kernels(const KernelsArgs& a) {
  kernels::KernelRegistry registry;
  for (const std::string& d : a.plugin_dirs) registry.add_plugin_directory(d, /*trusted=*/false);
  for (const std::string& d : a.trusted_plugin_dirs) registry.add_plugin_directory(d, /*trusted=*/true);
  const kernels::CpuFeatures cpu = kernels::CpuFeatures::host();
  if (!a.explain) {
    std::printf("built-in kernels (repo \"loom\"):\n");
    for (const kernels::KernelSpec& k : kernels::builtin_kernels()) {
      std::string layers;
      for (const std::string& l : k.layers) layers += (layers.empty() ? "" : ", ") + l;
      std::printf("  loom:%-14s %-8s layers: %s\n", k.name.c_str(), k.version.to_string().c_str(), layers.c_str());
    }
    for (const auto& d : registry.plugin_directories())
      std::printf("plugin directory %s (%s)\n", d.path.c_str(), d.trusted ? "trusted" : "needs trust_remote_code");
    return;
  }
  ModelOptions mo;
  mo.model_dir = a.model_dir;
  auto model = models::Model::load(resolve_model_dir(mo).value()).value();
  // Without --kernel-config: what every command loads this model with by default
  // (none for quantized weights, models/model.h LoadOptions::builtin_fusions).
  bool quantized = false;
  for (const auto& [name, t] : model->parameters()) quantized |= dtype_is_quantized(t.dtype());
  const kernels::KernelConfig config = !a.config.empty() ? kernels::KernelConfig::from_file(a.config).value()
                                       : quantized       ? kernels::KernelConfig()
                                                         : models::builtin_fusion_config(model->module());
  if (a.config.empty())
    std::printf(quantized ? "no --kernel-config: quantized weights run unfused by default\n"
                          : "no --kernel-config: loom's built-in fusions for this model (--no-builtin-fusions turns "
                            "them off)\n");
  // Loaded without kernels, so its step graph is the plain graph the fusion checks read.
  const kernels::ModuleView view = models::module_view(*model);
  kernels::ResolveOptions ro;
  ro.cpu = &cpu;
  const kernels::KernelPlan plan = kernels::resolve_kernels(config, view, registry, ro).value();
  for (const std::string& w : plan.warnings()) std::fprintf(stderr, "warning: %s\n", w.c_str());
  for (const std::string& line : plan.explain()) std::printf("%s\n", line.c_str());
}

}  // namespace

void add_kernels_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("kernels", "List kernels, or explain which kernel a KernelConfig picks for each module");
  auto a = std::make_shared<KernelsArgs>();
  cmd->add_option("--model,-m", a->model_dir, "Checkpoint folder (default: the bundled model)");
  cmd->add_option("--kernel-config", a->config, "KernelConfig JSON ({\"RMSNorm\": \"loom:FusedRMSNorm\", ...})");
  cmd->add_option("--plugin-dir", a->plugin_dirs, "A directory of plugin kernels (loading them needs trust_remote_code)");
  cmd->add_option("--trusted-plugin-dir", a->trusted_plugin_dirs, "A directory of trusted plugin kernels");
  cmd->add_flag("--explain", a->explain, "Per module: the kernel chosen and why");
  cmd->callback([a] { run_kernels(*a); });
}

}  // namespace loom::cli
