// GGUF files as loom models: llama.cpp's metadata keys become the config.json
// Transformers would read, and its tensor names (blk.N.attn_q.weight, …) map onto
// the module tree's parameters through ordinary weight rules, so a GGUF model runs
// the same module code as the checkpoint it was converted from. The same tables,
// read backwards, write a loom model as GGUF (loom convert --to gguf).
//
// What llama.cpp's converter changed and the rules undo: q/k rows of the Llama
// family are stored in Meta's interleaved rotary order (PermuteForRope turns
// them back into Transformers' half-split order); a tied lm_head is absent
// (output.weight missing → tie_word_embeddings); Phi-3's fused qkv / gate_up stay
// fused in both formats (chunked by the Phi-3 rules).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/core/status.h"
#include "loom/io/gguf.h"
#include "loom/io/model_config.h"
#include "loom/weights/weight_rule.h"

namespace loom::models {

// GGUF architectures loom maps (general.architecture values).
const std::vector<std::string>& gguf_architectures();

// config.json as Transformers would have it, from the file's metadata and tensor
// shapes. kUnsupported naming general.architecture when loom does not map it;
// kNotFound naming the first required key that is missing.
Result<nlohmann::json> config_json_from_gguf(const io::GgufFile& file);

// GGUF tensor names → parameter names for a config made by config_json_from_gguf.
Result<WeightRules> gguf_weight_rules(const ModelConfig& config);

// The other direction, for writing: general.architecture for a config.json
// model_type, the metadata that config implies (hyperparameters; no tokenizer),
// and the GGUF name of every parameter name, with whether its rows must be put
// into interleaved rotary order (and for how many heads).
struct GgufTensorName {
  std::string gguf_name;
  int64_t rope_heads = 0;  // > 0: permute rows half-split → interleaved for this many heads
  double add = 0;          // added to every value (Gemma's norms are stored as 1 + w)
  // Part `part` of `parts` tensors concatenated along dim 0 into gguf_name
  // (Phi-3's fused attn_qkv = q ‖ k ‖ v and ffn_up = gate ‖ up).
  int part = 0, parts = 1;
  // Instead: split along dim 1 into these, equal halves (stacked experts'
  // gate_up_proj → ffn_gate_exps, ffn_up_exps).
  std::vector<std::string> split_into;
};
Result<std::string> gguf_architecture_for(const ModelConfig& config);
Result<std::vector<std::pair<std::string, io::GgufValue>>> gguf_metadata_for(const ModelConfig& config);
Result<GgufTensorName> gguf_tensor_name_for(const ModelConfig& config, const std::string& parameter_name);
// Tensors llama.cpp needs that are not parameters: rope_freqs.weight for Llama 3's
// rope scaling (the per-frequency divisors).
Result<std::vector<std::pair<std::string, Tensor>>> gguf_extra_tensors_for(const ModelConfig& config);
// GGUF tensors that are not parameters and need no "unused" warning.
bool gguf_tensor_is_not_a_parameter(const std::string& gguf_name);

}  // namespace loom::models
