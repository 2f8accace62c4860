#include "loom/models/save_gguf.h"

#include <map>

#include "loom/io/gguf_writer.h"
#include "loom/models/gguf_mapping.h"
#include "loom/weights/tensor_moves.h"

namespace loom::models {

Status save_gguf(const Model& model, const std::string& path, const GgufSaveOptions& options) {
  const ModelConfig& c = model.config();
  LOOM_ASSIGN_OR_RETURN(auto metadata, gguf_metadata_for(c));
  if (options.file_type) metadata.emplace_back("general.file_type", io::GgufValue::u32(*options.file_type));
  for (const auto& kv : options.metadata) metadata.push_back(kv);

  io::GgufTensors tensors;
  const auto& params = model.parameters();
  size_t index = 0;
  std::map<std::string, std::vector<Tensor>> fused;  // GGUF name → its parts, until all are there
  for (const auto& [name, t] : params) {
    ++index;
    // A tied lm_head is the embedding; llama.cpp reads its absence as tying.
    if (name == "lm_head.weight" && c.tie_word_embeddings) continue;
    LOOM_ASSIGN_OR_RETURN(GgufTensorName g, gguf_tensor_name_for(c, name));
    Tensor out = t;
    // Vectors, and gpt-oss's stacked expert biases ([E, 2I], [E, H]), stay f32 as llama.cpp keeps biases.
    const bool bias_like = out.rank() == 1 || (name.size() > 5 && name.compare(name.size() - 5, 5, "_bias") == 0);
    if (bias_like) {
      if (out.dtype() != DType::kF32) out = out.to(DType::kF32);
    } else if (options.tensor_type) {
      LOOM_ASSIGN_OR_RETURN(std::optional<DType> want, options.tensor_type(name, t));
      if (want && *want != out.dtype()) {
        if (dtype_is_quantized(*want) && out.dim(-1) % dtype_block_elements(*want) != 0)
          return invalid_argument(name + ": " + std::to_string(out.dim(-1)) + " columns are not a multiple of " +
                                  std::string(dtype_name(*want)) + "'s block of " +
                                  std::to_string(dtype_block_elements(*want)));
        out = out.to(*want);
      }
    }
    if (g.rope_heads > 0) out = permute_for_rope(out, g.rope_heads, c.head_dim, /*inverse=*/true);
    if (g.add != 0) {
      std::vector<float> v = out.to_f32_vector();
      for (float& x : v) x += static_cast<float>(g.add);
      out = Tensor::from_f32(v, out.shape()).to(out.dtype());
    }
    if (!g.split_into.empty()) {
      const int64_t half = out.dim(1) / 2;
      std::vector<Tensor> pieces = split(out, {half, out.dim(1) - half}, 1);
      for (size_t i = 0; i < pieces.size(); ++i) tensors.emplace_back(g.split_into[i], pieces[i].clone());
      if (options.on_tensor) options.on_tensor(g.split_into[0], index, params.size());
      continue;
    }
    if (g.parts > 1) {
      // Parameters arrive sorted by name, not in fused order, so a fused tensor
      // is assembled once all of its parts have been seen.
      auto& slots = fused[g.gguf_name];
      slots.resize(static_cast<size_t>(g.parts));
      slots[static_cast<size_t>(g.part)] = std::move(out);
      bool complete = true;
      for (const Tensor& part : slots) complete = complete && part.defined();
      if (!complete) continue;
      out = concatenate(slots, 0);
      fused.erase(g.gguf_name);
    }
    if (options.on_tensor) options.on_tensor(g.gguf_name, index, params.size());
    tensors.emplace_back(g.gguf_name, std::move(out));
  }
  if (!fused.empty()) return internal_error("save_gguf: fused tensor '" + fused.begin()->first + "' is missing parts");
  LOOM_ASSIGN_OR_RETURN(auto extra, gguf_extra_tensors_for(c));
  for (auto& kv : extra) tensors.push_back(std::move(kv));
  return io::write_gguf(path, metadata, tensors);
}

}  // namespace loom::models
