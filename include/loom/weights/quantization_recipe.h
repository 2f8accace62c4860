// Which dtype each weight gets when a model is quantized (at load with
// --quantize, or when writing a GGUF): llama.cpp's recipes for the types loom
// runs. A plain type (q8_0, q4_0, q4_1, q5_0, q5_1, q6_k, iq4_nl, mxfp4) quantizes every
// matrix to it, except the
// output projection (lm_head, or the embedding when tied), which gets Q6_K as in
// llama.cpp (Q8_0 stays Q8_0). The _m mixes (q4_k_m, q5_k_m) also give Q6_K to
// attn_v and ffn_down in the layers llama.cpp's use_more_bits picks (the first
// and last eighth, and every third layer between; stacked experts' down_proj
// counts as ffn_down). Stacked MoE experts ([E, rows, cols]) quantize like the
// matrices they stack. Norms, biases and other 1-D
// tensors stay as they are, and so do MoE routers (mlp.gate, shared_expert_gate:
// llama.cpp never quantizes ffn_gate_inp). A matrix whose rows are not a multiple of the chosen
// type's block falls back to Q8_0 (llama.cpp uses Q5_0/Q5_1 for the K types),
// and to its own dtype when not even 32 divides them.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "loom/core/dtype.h"
#include "loom/core/status.h"
#include "loom/core/tensor.h"

namespace loom {

struct QuantizationRecipe {
  std::string name;         // "q4_k_m"
  DType base = DType::kQ8_0;
  bool more_bits_mix = false;  // the _m rules for attn_v / ffn_down
  uint32_t gguf_file_type = 0;  // llama.cpp's LLAMA_FTYPE_MOSTLY_*

  // The dtype for a parameter (by its loom name, e.g. model.layers.3.mlp.down_proj.weight);
  // nullopt: keep it. `num_layers` is the model's, for the layer-position rules;
  // `tied_embeddings`: the embedding is also the output projection.
  std::optional<DType> type_for(const std::string& name, const Shape& shape, int64_t num_layers,
                                bool tied_embeddings) const;
};

// quantization_recipe_names(); kInvalidArgument listing them otherwise.
Result<QuantizationRecipe> quantization_recipe(std::string_view name);
const std::vector<std::string>& quantization_recipe_names();

}  // namespace loom
