#include "loom/runtime/op_profile.h"

#include <gtest/gtest.h>

#include "loom/graph/builder.h"
#include "loom/runtime/executor.h"

namespace loom::runtime {
namespace {

using graph::Dim;

TEST(OpProfile, ScopesLoseLayerIndicesAndRowsFallInClasses) {
  EXPECT_EQ(OpProfile::generic_scope("model.layers.12.mlp.down_proj"), "model.layers.*.mlp.down_proj");
  EXPECT_EQ(OpProfile::generic_scope("h.3.attn.c_attn"), "h.*.attn.c_attn");
  EXPECT_EQ(OpProfile::generic_scope(""), "");
  EXPECT_EQ(OpProfile::rows_class(1), "1");
  EXPECT_EQ(OpProfile::rows_class(64), "2-64");
  EXPECT_EQ(OpProfile::rows_class(65), "65-256");
  EXPECT_EQ(OpProfile::rows_class(512), ">256");
}

// Two silu+add blocks in scopes block.0 / block.1: one entry per op across both layers.
std::shared_ptr<graph::Graph> two_layer_graph() {
  auto g = std::make_shared<graph::Graph>();
  const int t = g->add_symbol("tokens");
  graph::ValueId x = g->add_input("x", DType::kF32, {Dim::sym(t), Dim::fixed(32)});
  graph::ValueId h = x;
  for (int layer = 0; layer < 2; ++layer) {
    const std::string scope = "block." + std::to_string(layer);
    h = g->add_node("silu", {h}, {}, scope).at(0);
    h = g->add_node("add", {h, x}, {}, scope).at(0);
  }
  g->mark_output("y", h);
  return g;
}

TEST(OpProfile, ExecutorReportsEveryNodeOnlyWhileEnabled) {
  OpProfile& p = OpProfile::global();
  p.reset();
  auto ex = Executor::create(two_layer_graph(), cpu_backend()).value();
  std::vector<Tensor> out;
  const Tensor x3 = Tensor::zeros(DType::kF32, {3, 32});
  ASSERT_TRUE(ex->run({{"x", x3}}, nullptr, &out).ok());
  EXPECT_TRUE(p.entries().empty()) << "profiling is off by default";

  p.set_enabled(true);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(ex->run({{"x", x3}}, nullptr, &out).ok());
  ASSERT_TRUE(ex->run({{"x", Tensor::zeros(DType::kF32, {300, 32})}}, nullptr, &out).ok());
  p.set_enabled(false);
  ASSERT_TRUE(ex->run({{"x", x3}}, nullptr, &out).ok());

  const std::vector<OpProfile::Entry> e = p.entries();
  ASSERT_EQ(e.size(), 4u);  // {silu, add} × {2-64, >256}
  double sum = 0;
  for (const auto& entry : e) {
    EXPECT_EQ(entry.scope, "block.*");
    EXPECT_EQ(entry.calls, entry.rows == "2-64" ? 10 : 2) << entry.op << " " << entry.rows;
    EXPECT_GE(entry.seconds, 0.0);
    sum += entry.seconds;
  }
  for (size_t i = 1; i < e.size(); ++i) EXPECT_GE(e[i - 1].seconds, e[i].seconds) << "sorted by time";
  EXPECT_DOUBLE_EQ(p.total_seconds(), sum);
  const std::string table = p.table(2);
  EXPECT_NE(table.find("| silu | block.* |"), std::string::npos) << table;
  EXPECT_NE(table.find("(2 more)"), std::string::npos) << table;
  p.reset();
  EXPECT_TRUE(p.entries().empty());
}

}  // namespace
}  // namespace loom::runtime
