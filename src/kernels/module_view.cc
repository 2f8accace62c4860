#include "loom/kernels/module_view.h"

namespace loom::kernels {

const ParamInfo* ModuleInfo::find_parameter(const std::string& name) const {
  for (const auto& p : parameters)
    if (p.name == name) return &p;
  return nullptr;
}

const ModuleInfo* ModuleView::find(const std::string& path) const {
  for (const auto& m : modules)
    if (m.path == path) return &m;
  return nullptr;
}

std::string parent_path(const std::string& path) {
  const auto dot = path.rfind('.');
  return dot == std::string::npos ? std::string() : path.substr(0, dot);
}

bool scope_within(const std::string& scope, const std::string& path) {
  if (path.empty()) return true;
  if (scope.size() < path.size() || scope.compare(0, path.size(), path) != 0) return false;
  return scope.size() == path.size() || scope[path.size()] == '.';
}

}  // namespace loom::kernels
