#include "loom/kernels/kernel_selection.h"

#include <algorithm>

namespace loom::kernels {

Result<KernelSelection> select_kernel(KernelRegistry& registry, const KernelRef& ref, const std::string& layer_key,
                                      const std::string& device, const CpuFeatures& cpu, bool use_fallback) {
  LOOM_RETURN_IF_ERROR(ref.validate());
  LOOM_ASSIGN_OR_RETURN(auto variants, registry.find(ref));

  std::vector<std::shared_ptr<const KernelSpec>> providing;
  std::string provided;
  for (const auto& v : variants) {
    if (v->provides(layer_key)) providing.push_back(v);
    for (const auto& l : v->layers)
      if (provided.find(l) == std::string::npos) provided += (provided.empty() ? "" : ", ") + l;
  }
  if (providing.empty())
    return invalid_argument("kernel " + ref.id() + " provides [" + provided + "], not " + layer_key);

  std::vector<std::shared_ptr<const KernelSpec>> wanted;
  std::string available;
  for (const auto& v : providing) {
    available += (available.empty() ? "" : ", ") + v->version.to_string() +
                 (v->revision.empty() ? "" : " (revision " + v->revision + ")");
    const bool match = ref.revision ? v->revision == *ref.revision : v->version.major == ref.major_version();
    if (match) wanted.push_back(v);
  }
  const std::string asked =
      ref.revision ? "revision " + *ref.revision : "version " + std::to_string(ref.major_version()) + ".x";
  if (wanted.empty())
    return not_found("kernel " + ref.id() + " has no " + asked + " for " + layer_key + " (available: " + available + ")");

  std::vector<std::shared_ptr<const KernelSpec>> runnable;
  std::string passed_over;
  for (const auto& v : wanted) {
    std::string why;
    if (v->runs_on(device, cpu, &why))
      runnable.push_back(v);
    else
      passed_over += (passed_over.empty() ? "" : "; ") + why;
  }
  const std::string where = device == "cpu" ? "cpu " + std::string(cpu_level_name(cpu.level())) : device;
  if (runnable.empty()) {
    const std::string msg = "no variant of " + ref.id() + " " + asked + " runs on " + where + " (" + passed_over + ")";
    if (!use_fallback) return failed_precondition(msg + " and use_fallback is off");
    return KernelSelection{nullptr, msg + "; falling back to the module's own forward"};
  }
  std::stable_sort(runnable.begin(), runnable.end(), [](const auto& a, const auto& b) {
    if (a->version != b->version) return a->version > b->version;
    return a->min_cpu_level() > b->min_cpu_level();
  });
  KernelSelection sel;
  sel.kernel = runnable.front();
  sel.reason = sel.kernel->describe() + ": " + (ref.revision ? "the " + asked : "highest " + asked) + " that runs on " +
               where;
  if (!passed_over.empty()) sel.reason += "; passed over: " + passed_over;
  return sel;
}

}  // namespace loom::kernels
