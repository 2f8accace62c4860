#include "loom/weights/quantization_recipe.h"

#include <cstdlib>

namespace loom {
namespace {

// llama.cpp's use_more_bits(i_layer, n_layers).
bool use_more_bits(int64_t i, int64_t n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// "model.layers.12.mlp.down_proj.weight" → 12; -1 for names outside the layers.
int64_t layer_of(const std::string& name) {
  static const std::string prefix = "model.layers.";
  if (name.rfind(prefix, 0) != 0) return -1;
  return std::strtoll(name.c_str() + prefix.size(), nullptr, 10);
}


DType fit_block(DType want, int64_t cols) {
  if (cols % dtype_block_elements(want) == 0) return want;
  return DType::kQ8_0;
}

}  // namespace

const std::vector<std::string>& quantization_recipe_names() {
  static const std::vector<std::string> names = {"q8_0",   "q4_0", "q4_1",  "q5_0",  "q5_1",
                                                  "q4_k_m", "q5_k_m", "q6_k", "iq4_nl", "mxfp4"};
  return names;
}

Result<QuantizationRecipe> quantization_recipe(std::string_view name) {
  QuantizationRecipe r;
  r.name = std::string(name);
  if (name == "q8_0") { r.base = DType::kQ8_0; r.gguf_file_type = 7; }
  else if (name == "q4_0") { r.base = DType::kQ4_0; r.gguf_file_type = 2; }
  else if (name == "q4_1") { r.base = DType::kQ4_1; r.gguf_file_type = 3; }
  else if (name == "q5_0") { r.base = DType::kQ5_0; r.gguf_file_type = 8; }
  else if (name == "q5_1") { r.base = DType::kQ5_1; r.gguf_file_type = 9; }
  else if (name == "iq4_nl") { r.base = DType::kIQ4_NL; r.gguf_file_type = 25; }
  else if (name == "mxfp4") { r.base = DType::kMXFP4; r.gguf_file_type = 38; }
  else if (name == "q4_k_m") { r.base = DType::kQ4_K; r.more_bits_mix = true; r.gguf_file_type = 15; }
  else if (name == "q5_k_m") { r.base = DType::kQ5_K; r.more_bits_mix = true; r.gguf_file_type = 17; }
  else if (name == "q6_k") { r.base = DType::kQ6_K; r.gguf_file_type = 18; }
  else {
    std::string list;
    for (const auto& n : quantization_recipe_names()) list += (list.empty() ? "" : ", ") + n;
    return invalid_argument("quantization type '" + std::string(name) + "' is not one loom makes (" + list + ")");
  }
  return r;
}

std::optional<DType> QuantizationRecipe::type_for(const std::string& name, const Shape& shape, int64_t num_layers,
                                                  bool tied_embeddings) const {
  // Stacked MoE experts ([E, 2I, H] gate_up, [E, H, I] down) quantize as E
  // matrices of their rows, as llama.cpp's ffn_*_exps do.
  const bool experts = shape.size() == 3 && (name.ends_with(".mlp.experts.gate_up_proj") ||
                                             name.ends_with(".mlp.experts.down_proj"));
  if (shape.size() != 2 && !experts) return std::nullopt;
  // MoE routers stay as they are, as llama.cpp keeps ffn_gate_inp: a few rows that
  // pick the experts, where quantization error would change the choice.
  if (name.ends_with(".mlp.gate.weight") || name.ends_with(".mlp.shared_expert_gate.weight") ||
      name.ends_with(".mlp.router.weight"))  // gpt-oss's router
    return std::nullopt;
  // gpt-oss's stacked expert biases ([E, 2I], [E, H]) are biases, kept as they are.
  if (name.ends_with("_bias")) return std::nullopt;
  const int64_t cols = shape.back();
  if (cols % 32 != 0) return std::nullopt;
  const bool output = name == "lm_head.weight" || (tied_embeddings && name == "model.embed_tokens.weight");
  if (output) return base == DType::kQ8_0 ? DType::kQ8_0 : fit_block(DType::kQ6_K, cols);
  if (more_bits_mix && (name.ends_with("self_attn.v_proj.weight") || name.ends_with("mlp.down_proj.weight") ||
                        name.ends_with("mlp.experts.down_proj"))) {
    const int64_t layer = layer_of(name);
    if (layer >= 0 && use_more_bits(layer, num_layers)) return fit_block(DType::kQ6_K, cols);
  }
  return fit_block(base, cols);
}

}  // namespace loom
