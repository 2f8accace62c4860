#include "loom/kernels/layer_names.h"

#include <algorithm>

namespace loom::kernels {

const std::vector<std::string>& kernel_layer_names() {
  static const std::vector<std::string> names = {"RMSNorm",   "LayerNorm", "MLP",    "SiLUAndMul", "GeluAndMul",
                                                 "rotary_pos_emb", "Attention", "Linear", "Embedding",  "MoE"};
  return names;
}

bool is_kernel_layer_name(std::string_view name) {
  const auto& n = kernel_layer_names();
  return std::find(n.begin(), n.end(), name) != n.end();
}

std::string kernel_layer_names_list() {
  std::string s;
  for (const auto& n : kernel_layer_names()) s += (s.empty() ? "" : ", ") + n;
  return s;
}

std::string fused_layer_key(const std::vector<std::string>& layers) {
  std::string s;
  for (const auto& l : layers) s += (s.empty() ? "" : "+") + l;
  return s;
}

}  // namespace loom::kernels
