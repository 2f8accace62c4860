#include "loom/weights/weight_rule.h"

namespace loom {
namespace {

std::string list(const std::vector<std::string>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
  return s + "]";
}

}  // namespace

std::string WeightRenaming::describe() const {
  std::string s = "WeightRenaming";
  if (!name.empty()) s += " '" + name + "'";
  return s + " " + source + " → " + target;
}

std::string WeightConverter::describe() const {
  std::string s = "WeightConverter";
  if (!name.empty()) s += " '" + name + "'";
  return s + " " + list(sources) + " → " + list(targets) + " via " + describe_chain(operations);
}

std::string describe(const WeightRule& rule) {
  return std::visit([](const auto& r) { return r.describe(); }, rule);
}

}  // namespace loom
