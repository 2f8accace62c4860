#include "loom/models/model.h"

#include <filesystem>
#include <set>

#include "loom/core/logging.h"
#include "loom/models/architecture.h"

namespace loom::models {

Result<std::shared_ptr<Model>> Model::load(const std::string& dir) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir)) return not_found("model directory '" + dir + "' does not exist");
  const std::string config_path = (fs::path(dir) / "config.json").string();
  if (!fs::exists(config_path)) return not_found("'" + dir + "' has no config.json (is it a Hugging Face checkpoint folder?)");

  std::shared_ptr<Model> m(new Model());
  m->dir_ = dir;
  LOOM_ASSIGN_OR_RETURN(m->config_, ModelConfig::from_file(config_path));
  LOOM_ASSIGN_OR_RETURN(const Architecture* arch, find_architecture(m->config_));
  LOOM_ASSIGN_OR_RETURN(m->module_, arch->build(m->config_));
  LOOM_ASSIGN_OR_RETURN(Checkpoint ckpt_opened, Checkpoint::open(dir));
  m->checkpoint_ = std::make_unique<Checkpoint>(std::move(ckpt_opened));

  std::vector<ParameterSpec> specs;
  m->module_->collect_parameters(&specs);
  std::vector<std::string> names;
  std::set<std::string> used;
  for (const auto& p : specs) {
    names.push_back(p.name);
    used.insert(p.name);
  }
  LOOM_RETURN_IF_ERROR(m->checkpoint_->require(names, arch->class_name));
  for (const auto& p : specs) {
    const TensorInfo* info = m->checkpoint_->find(p.name);
    if (info->shape != p.shape)
      return invalid_argument(m->checkpoint_->source() + ": tensor '" + p.name + "' has shape " +
                              shape_to_string(info->shape) + " but " + arch->class_name + " with this config.json expects " +
                              shape_to_string(p.shape));
    if (!dtype_is_float(info->dtype))
      return unsupported(m->checkpoint_->source() + ": tensor '" + p.name + "' has dtype " +
                         std::string(dtype_name(info->dtype)) + "; loom loads F32, BF16 and F16 weights");
  }
  // A tied checkpoint may still carry lm_head.weight; it is unused, not an error.
  if (m->config_.tie_word_embeddings) used.insert("lm_head.weight");
  m->checkpoint_->warn_unexpected(used, arch->class_name);

  const Checkpoint& ckpt = *m->checkpoint_;
  auto graph = std::make_shared<graph::Graph>(
      m->module_->build_graph([&ckpt](const std::string& name) { return ckpt.get(name).value(); }));
  m->graph_ = std::move(graph);
  return m;
}

}  // namespace loom::models
