#include "loom/models/module.h"

namespace loom::models {

void Module::collect_parameters(std::vector<ParameterSpec>* out) const {
  out->insert(out->end(), params_.begin(), params_.end());
  for (const Module* c : children_) c->collect_parameters(out);
}

void Module::collect_modules(std::vector<const Module*>* out) const {
  out->push_back(this);
  for (const Module* c : children_) c->collect_modules(out);
}

}  // namespace loom::models
