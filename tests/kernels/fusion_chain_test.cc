#include "loom/kernels/fusion_chain.h"

#include <gtest/gtest.h>

#include "kernels/kernels_test_util.h"

namespace loom::kernels {
namespace {

using testing::Recorded;
using testing::TinyDecoder;

TEST(FusionChain, NormThenMlpIsADirectChain) {
  Recorded r;
  testing::record(TinyDecoder{}, &r);
  auto c = check_chain(r.graph, "model.layers.1",
                       {"model.layers.1.post_attention_layernorm", "model.layers.1.mlp"});
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  ASSERT_EQ(c->links.size(), 1u);
  EXPECT_FALSE(c->links[0].residual);
  // The chain's input is the residual add in the layer; its output is the MLP's down_proj.
  const auto& in_node = r.graph.node(r.graph.value(c->input).producer);
  EXPECT_EQ(in_node.op, "add");
  EXPECT_EQ(in_node.scope, "model.layers.1");
  const auto& out_node = r.graph.node(r.graph.value(c->output).producer);
  EXPECT_EQ(out_node.scope, "model.layers.1.mlp.down_proj");
  EXPECT_EQ(c->child_outputs[0], r.graph.node(r.graph.value(c->child_outputs[0]).producer).outputs[0]);
}

TEST(FusionChain, AttentionThenNormLinksThroughTheResidualAdd) {
  Recorded r;
  testing::record(TinyDecoder{}, &r);
  auto c = check_chain(r.graph, "model.layers.0", {"model.layers.0.self_attn", "model.layers.0.post_attention_layernorm"});
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  ASSERT_EQ(c->links.size(), 1u);
  EXPECT_TRUE(c->links[0].residual);
  EXPECT_EQ(r.graph.node(c->links[0].add_node).op, "add");
  // The residual is the layer's input (for layer 0, the graph input).
  EXPECT_EQ(c->links[0].residual_value, r.graph.input("hidden"));
}

TEST(FusionChain, ThreeChildren) {
  Recorded r;
  testing::record(TinyDecoder{}, &r);
  // Layer 1: its input is produced by layer 0 (layer 0 reads a graph input,
  // which is context, not data).
  auto c = check_chain(r.graph, "model.layers.1",
                       {"model.layers.1.input_layernorm", "model.layers.1.self_attn",
                        "model.layers.1.post_attention_layernorm", "model.layers.1.mlp"});
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  ASSERT_EQ(c->links.size(), 3u);
  EXPECT_FALSE(c->links[0].residual);
  EXPECT_TRUE(c->links[1].residual);
  EXPECT_FALSE(c->links[2].residual);
}

TEST(FusionChain, ReversedOrderIsRejected) {
  Recorded r;
  testing::record(TinyDecoder{}, &r);
  auto c = check_chain(r.graph, "model.layers.0", {"model.layers.0.mlp", "model.layers.0.post_attention_layernorm"});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("do not form a chain"), std::string::npos) << c.status().message();
  EXPECT_NE(c.status().message().find("model.layers.0.post_attention_layernorm"), std::string::npos);
}

TEST(FusionChain, IntermediateSeenByTheParentIsRejected) {
  TinyDecoder d;
  d.norm_output_also_in_residual = true;
  Recorded r;
  testing::record(d, &r);
  auto c = check_chain(r.graph, "model.layers.0", {"model.layers.0.post_attention_layernorm", "model.layers.0.mlp"});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("also read by add in model.layers.0"), std::string::npos) << c.status().message();
}

TEST(FusionChain, ChildReadingTwoTensorsIsRejected) {
  TinyDecoder d;
  d.mlp_reads_two_tensors = true;
  Recorded r;
  testing::record(d, &r);
  auto c = check_chain(r.graph, "model.layers.0", {"model.layers.0.post_attention_layernorm", "model.layers.0.mlp"});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("model.layers.0.mlp reads 2 tensors"), std::string::npos) << c.status().message();
}

TEST(FusionChain, NonAdjacentAndForeignChildrenAreRejected) {
  Recorded r;
  testing::record(TinyDecoder{}, &r);
  // input_layernorm feeds self_attn, not the mlp.
  auto c = check_chain(r.graph, "model.layers.0", {"model.layers.0.input_layernorm", "model.layers.0.mlp"});
  ASSERT_FALSE(c.ok());
  // A path that recorded nothing.
  c = check_chain(r.graph, "model.layers.0", {"model.layers.0.post_attention_layernorm", "model.layers.0.moe"});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("recorded no ops"), std::string::npos) << c.status().message();
  // Nested children.
  c = check_chain(r.graph, "model.layers.0", {"model.layers.0.mlp", "model.layers.0.mlp.down_proj"});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("lies inside"), std::string::npos) << c.status().message();
}

}  // namespace
}  // namespace loom::kernels
