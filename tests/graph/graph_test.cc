#include "loom/graph/graph.h"

#include <gtest/gtest.h>

#include "loom/graph/builder.h"
#include "loom/graph/op_schema.h"

namespace loom::graph {
namespace {

Tensor weight(int64_t out, int64_t in) { return Tensor::zeros(DType::kBF16, {out, in}); }

TEST(Graph, ShapeInferenceKeepsSymbols) {
  Graph g;
  const int t = g.add_symbol("tokens");
  ValueId x = g.add_input("x", DType::kF32, {Dim::sym(t), Dim::fixed(8)});
  GraphBuilder b(&g, [](const std::string& name) { return weight(16, 8); });
  ValueId y = b.op("linear", {x, b.param("w")});
  EXPECT_EQ(g.value(y).shape.size(), 2u);
  EXPECT_EQ(g.value(y).shape[0], Dim::sym(t));
  EXPECT_EQ(g.value(y).shape[1], Dim::fixed(16));
  EXPECT_EQ(g.shape_to_string(g.value(y).shape), "[tokens, 16]");
}

TEST(Graph, BadShapesNameTheOpAndScope) {
  Graph g;
  ValueId x = g.add_input("x", DType::kF32, {Dim::fixed(4), Dim::fixed(7)});
  GraphBuilder b(&g, [](const std::string&) { return weight(16, 8); });
  GraphBuilder::Scope scope(b, "model.layers.0.mlp.up_proj");
  try {
    b.op("linear", {x, b.param("w")});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("linear"), std::string::npos) << msg;
    EXPECT_NE(msg.find("model.layers.0.mlp.up_proj"), std::string::npos) << msg;
    EXPECT_NE(msg.find("in_features"), std::string::npos) << msg;
  }
}

TEST(Graph, UnknownOpIsUnsupported) {
  Graph g;
  ValueId x = g.add_input("x", DType::kF32, {Dim::fixed(2)});
  try {
    g.add_node("frobnicate", {x}, {});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status().code(), ErrorCode::kUnsupported);
  }
}

TEST(Graph, ParametersAreSharedByName) {
  Graph g;
  int calls = 0;
  GraphBuilder b(&g, [&](const std::string&) { ++calls; return weight(4, 4); });
  EXPECT_EQ(b.param("tied"), b.param("tied"));
  EXPECT_EQ(calls, 1);
}

TEST(Graph, RemoveDeadNodesKeepsOnlyWhatOutputsNeed) {
  Graph g;
  ValueId x = g.add_input("x", DType::kF32, {Dim::fixed(2), Dim::fixed(4)});
  ValueId a = g.add_node("silu", {x}, {}).at(0);
  g.add_node("silu", {a}, {});  // dead
  ValueId c = g.add_node("add", {a, x}, {}).at(0);
  g.mark_output("out", c);
  EXPECT_EQ(g.remove_dead_nodes(), 1);
  ASSERT_EQ(g.nodes().size(), 2u);
  EXPECT_EQ(g.nodes()[1].op, "add");
  EXPECT_EQ(g.value(c).producer, 1);
}

TEST(Graph, RmsNormGroupsMustDivideRow) {
  Graph g;
  ValueId x = g.add_input("x", DType::kF32, {Dim::fixed(2), Dim::fixed(12)});
  ValueId w4 = g.add_parameter("w4", Tensor::zeros(DType::kF32, {4}));
  ValueId w5 = g.add_parameter("w5", Tensor::zeros(DType::kF32, {5}));
  EXPECT_NO_THROW(g.add_node("rms_norm", {x, w4}, {{"eps", 1e-6}}));
  EXPECT_THROW(g.add_node("rms_norm", {x, w5}, {{"eps", 1e-6}}), Error);
  EXPECT_THROW(g.add_node("rms_norm", {x, w4}, {}), Error);  // eps missing
}

}  // namespace
}  // namespace loom::graph
