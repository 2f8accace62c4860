// RoPE cos/sin tables for the ONNX lowering, computed at export time from a
// `rope` node's attributes. The export layer may not use runtime/, so this is
// its own transcription of Transformers' rope initializers (default, linear,
// llama3, yarn; see runtime/cpu/rope_params.cc for loom's runtime one) with the
// same f32 arithmetic, and the tables hold exactly the cos/sin loom's reference
// rope computes: cos(f32(inv_freq[i] * f32(pos))) * attention_scaling.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/core/status.h"
#include "loom/graph/graph.h"

namespace loom::exporting {

struct RopeTables {
  int64_t positions = 0;  // rows
  int64_t half = 0;       // rotary_dim / 2 columns
  std::vector<float> cos, sin;
};

// `positions`: how many rows (the model's max_position_embeddings). "dynamic"
// rope depends on the sequence length at run time and has no table: the lowering
// computes it in the graph (onnx_rope_dynamic.cc).
Result<RopeTables> rope_tables(const graph::Node& rope, int64_t positions);

}  // namespace loom::exporting
