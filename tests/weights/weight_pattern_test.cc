#include "loom/weights/weight_pattern.h"

#include <gtest/gtest.h>

namespace loom {
namespace {

TEST(WeightPattern, MatchesDotAlignedRunsAndCaptures) {
  auto p = WeightPattern::parse("layers.*.mlp.gate_proj");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->num_stars(), 1);
  auto m = p->search("model.layers.12.mlp.gate_proj.weight");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->prefix, "model");
  EXPECT_EQ(m->captures, std::vector<std::string>{"12"});
  EXPECT_EQ(m->suffix, "weight");
  EXPECT_FALSE(p->search("model.layers.12.mlp.gate_proj_x.weight"));  // whole segments only
  EXPECT_FALSE(p->search("model.layers.mlp.gate_proj.weight"));       // `*` needs a segment
  EXPECT_EQ(p->substitute({"7"}), "layers.7.mlp.gate_proj");
}

TEST(WeightPattern, StarsInsideSegmentsAndAnchors) {
  auto p = WeightPattern::parse("experts.*.w*.weight");
  ASSERT_TRUE(p.ok());
  auto m = p->search("model.layers.0.experts.11.w3.weight");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->captures, (std::vector<std::string>{"11", "3"}));
  auto anchored = WeightPattern::parse("^lm_head.weight$");
  ASSERT_TRUE(anchored.ok());
  EXPECT_TRUE(anchored->search("lm_head.weight"));
  EXPECT_FALSE(anchored->search("model.lm_head.weight"));
  EXPECT_FALSE(anchored->search("lm_head.weight.scale"));
  EXPECT_FALSE(WeightPattern::parse("a..b").ok());
  EXPECT_FALSE(WeightPattern::parse("").ok());
}

TEST(WeightPattern, NaturalOrderAndJoin) {
  EXPECT_TRUE(natural_less("e.2.w", "e.10.w"));
  EXPECT_FALSE(natural_less("e.10.w", "e.2.w"));
  EXPECT_TRUE(natural_less("a.b", "a.c"));
  EXPECT_EQ(join_key("", "x.y", "weight"), "x.y.weight");
  EXPECT_EQ(join_key("m", "x", ""), "m.x");
}

}  // namespace
}  // namespace loom
