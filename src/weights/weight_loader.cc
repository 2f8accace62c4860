#include "loom/weights/weight_loader.h"

namespace loom {

Result<LoadedWeights> load_weights(const std::string& path, const WeightRules& rules, const ExpectedParams& expected,
                                   const std::string& what, const CompileOptions& options) {
  LOOM_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::open(path));
  auto plan = ConversionPlan::compile(rules, SourceIndex::from_checkpoint(ckpt), expected, options);
  if (!plan.ok()) return plan.status().with_context(what + " from " + path);
  plan->warn_unused(what);
  std::map<std::string, Tensor> params;
  auto stats = plan->load(ckpt, [&](const std::string& name, Tensor t) {
    params[name] = std::move(t);
    return Status::Ok();
  });
  if (!stats.ok()) return stats.status().with_context(what + " from " + path);
  return LoadedWeights{std::move(ckpt), std::move(plan).value(), std::move(params), stats.value()};
}

}  // namespace loom
