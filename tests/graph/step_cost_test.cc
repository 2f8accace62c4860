// step_cost: the byte and multiply-add counts `loom bench` divides by.
#include "loom/graph/step_cost.h"

#include <gtest/gtest.h>

namespace loom::graph {
namespace {

// ids → embedding(table[V, H]) → linear(w1[F, H], bias[F]) → linear(w2[H, F])
// → gather_rows → linear(head[V, H]): head is the table itself when tied.
Graph decoder_like(bool tied) {
  constexpr int64_t V = 10, H = 4, F = 6;
  Graph g;
  const int t = g.add_symbol("tokens");
  const int s = g.add_symbol("sequences");
  ValueId ids = g.add_input("input_ids", DType::kI32, {Dim::sym(t)});
  ValueId rows = g.add_input("last_rows", DType::kI32, {Dim::sym(s)});
  ValueId table = g.add_parameter("embed", Tensor::zeros(DType::kBF16, {V, H}));
  ValueId w1 = g.add_parameter("w1", Tensor::zeros(DType::kF32, {F, H}));
  ValueId b1 = g.add_parameter("b1", Tensor::zeros(DType::kF32, {F}));
  ValueId w2 = g.add_parameter("w2", Tensor::zeros(DType::kF32, {H, F}));
  ValueId head = tied ? table : g.add_parameter("head", Tensor::zeros(DType::kF32, {V, H}));
  ValueId x = g.add_node("embedding", {table, ids}, {}).at(0);
  x = g.add_node("linear", {x, w1, b1}, {}).at(0);
  x = g.add_node("linear", {x, w2}, {}).at(0);
  x = g.add_node("gather_rows", {x, rows}, {}).at(0);
  g.mark_output("logits", g.add_node("linear", {x, head}, {}).at(0));
  return g;
}

TEST(StepCost, UntiedEmbeddingCostsOneRowAndTheHeadIsPerSequence) {
  const StepCost c = step_cost(decoder_like(false));
  // one bf16 row (4 × 2) + w1 (24 × 4) + b1 (6 × 4) + w2 (24 × 4) + head (40 × 4)
  EXPECT_DOUBLE_EQ(c.decode_weight_bytes, 8 + 96 + 24 + 96 + 160);
  EXPECT_DOUBLE_EQ(c.per_token_matrix_elements, 24 + 24);
  EXPECT_DOUBLE_EQ(c.per_sequence_matrix_elements, 40);
}

TEST(StepCost, TiedHeadReadsTheWholeTableOnce) {
  const StepCost c = step_cost(decoder_like(true));
  EXPECT_DOUBLE_EQ(c.decode_weight_bytes, 80 + 96 + 24 + 96);
  EXPECT_DOUBLE_EQ(c.per_token_matrix_elements, 24 + 24);
  EXPECT_DOUBLE_EQ(c.per_sequence_matrix_elements, 40);
}

}  // namespace
}  // namespace loom::graph
