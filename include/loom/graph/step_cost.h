// What one run of a step graph costs in weight bytes and multiply-adds, so
// benchmarks can state their bounds (decode reads every weight once per token;
// prefill multiplies every prompt token by every weight matrix).
#pragma once

#include "loom/graph/graph.h"

namespace loom::graph {

struct StepCost {
  // Parameter bytes read to decode one token: whole tensors, except tables
  // read by an embedding op, which cost one row (a tied lm_head reads its
  // table whole, so it counts whole).
  double decode_weight_bytes = 0;
  // Elements of weight matrices (rank ≥ 2) every token of a sequence is
  // multiplied by, and of those used only after `gather_rows` (the lm_head on
  // the last token of each sequence), multiplied once per sequence.
  double per_token_matrix_elements = 0;
  double per_sequence_matrix_elements = 0;
};

StepCost step_cost(const Graph& g);

}  // namespace loom::graph
