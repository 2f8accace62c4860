// ConversionPlan: validation before any byte is read, streaming load, and the
// reverse (save) reproducing the original checkpoint byte for byte.
#include "loom/weights/conversion_plan.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "io/io_test_util.h"
#include "loom/io/safetensors_writer.h"
#include "weights/plan_file_fixture.h"
#include "weights/weights_test_util.h"

namespace loom {
namespace {

using testing::at;
using testing::iota;
using testing::read_file;
using testing::same_bytes;
using testing::TempDir;

// ---------------------------------------------------------------- validation

std::string compile_error(const WeightRules& rules, const SourceIndex& src, const ExpectedParams& expected) {
  auto plan = ConversionPlan::compile(rules, src, expected);
  EXPECT_FALSE(plan.ok()) << "compiled but should not have";
  return plan.ok() ? "" : plan.status().message();
}

#define EXPECT_MENTIONS(msg, text) EXPECT_NE((msg).find(text), std::string::npos) << (msg)

const WeightConverter kQkvSplit{{"self_attn.qkv_proj.weight"},
                                {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"},
                                {Chunk(0)},
                                false,
                                "qkv split"};

TEST(PlanValidation, TargetWrittenTwice) {
  SourceIndex src;
  src.add("l.0.self_attn.qkv_proj.weight", DType::kF32, {8, 4});
  src.add("l.0.self_attn.q_proj.weight", DType::kF32, {4, 4});  // also present on its own
  ExpectedParams exp{{"l.0.self_attn.q_proj.weight", {{4, 4}}},
                     {"l.0.self_attn.k_proj.weight", {{2, 4}}},
                     {"l.0.self_attn.v_proj.weight", {{2, 4}}}};
  const std::string msg = compile_error({kQkvSplit}, src, exp);
  EXPECT_MENTIONS(msg, "'l.0.self_attn.q_proj.weight' written twice");
  EXPECT_MENTIONS(msg, "'qkv split'");
  EXPECT_MENTIONS(msg, "pass-through");
}

TEST(PlanValidation, MissingSource) {
  SourceIndex src;
  src.add("layers.0.q_proj.weight", DType::kF32, {4, 4});
  src.add("layers.0.k_proj.weight", DType::kF32, {2, 4});
  WeightConverter fuse{{"q_proj.weight", "k_proj.weight", "v_proj.weight"}, {"qkv_proj.weight"}, {Concatenate(0)}};
  const std::string msg = compile_error({fuse}, src, {{"layers.0.qkv_proj.weight", {{8, 4}}}});
  EXPECT_MENTIONS(msg, "missing source 'layers.0.v_proj.weight'");
  EXPECT_MENTIONS(msg, "rule #0 WeightConverter");
}

TEST(PlanValidation, SourceConsumedTwiceWithinOneRule) {
  SourceIndex src;
  src.add("mlp.gate_proj.weight", DType::kF32, {4, 4});
  WeightConverter both{{"mlp.gate_proj.weight", "gate_proj.weight"}, {"gate_up.weight"}, {Concatenate(0)}, false, "dup"};
  const std::string msg = compile_error({both}, src, {{"gate_up.weight", {{8, 4}}}});
  EXPECT_MENTIONS(msg, "'mlp.gate_proj.weight' consumed twice");
  EXPECT_MENTIONS(msg, "'dup'");
}

TEST(PlanValidation, ConflictingRules) {
  SourceIndex src;
  src.add("l.0.self_attn.qkv_proj.weight", DType::kF32, {8, 4});
  WeightConverter other{{"qkv_proj.weight"}, {"fused.weight"}, {Transpose(0, 1)}, false, "other"};
  const std::string msg = compile_error({kQkvSplit, other}, src, {});
  EXPECT_MENTIONS(msg, "conflicting rules for checkpoint tensor 'l.0.self_attn.qkv_proj.weight'");
  EXPECT_MENTIONS(msg, "rule #0 WeightConverter 'qkv split'");
  EXPECT_MENTIONS(msg, "rule #1 WeightConverter 'other'");
}

TEST(PlanValidation, ShapeMismatch) {
  SourceIndex src;
  src.add("a.weight", DType::kF32, {3, 5});
  src.add("b.weight", DType::kF32, {2, 2});
  WeightConverter tr{{"a.weight"}, {"a_t.weight"}, {Transpose(0, 1)}, false, "transpose a"};
  std::string msg = compile_error({tr}, src, {{"a_t.weight", {{3, 5}}}, {"b.weight", {{2, 2}}}});
  EXPECT_MENTIONS(msg, "shape mismatch for 'a_t.weight'");
  EXPECT_MENTIONS(msg, "[5, 3]");
  EXPECT_MENTIONS(msg, "'transpose a'");
  // And for a tensor passing through unchanged.
  msg = compile_error({tr}, src, {{"a_t.weight", {{5, 3}}}, {"b.weight", {{2, 3}}}});
  EXPECT_MENTIONS(msg, "shape mismatch for 'b.weight'");
}

TEST(PlanValidation, ChunkSizesThatDoNotAddUp) {
  SourceIndex src;
  src.add("l.0.self_attn.qkv_proj.weight", DType::kF32, {8, 4});
  ExpectedParams exp{{"l.0.self_attn.q_proj.weight", {{4, 4}}},
                     {"l.0.self_attn.k_proj.weight", {{4, 4}}},
                     {"l.0.self_attn.v_proj.weight", {{4, 4}}}};
  const std::string msg = compile_error({kQkvSplit}, src, exp);
  EXPECT_MENTIONS(msg, "'qkv split'");
  EXPECT_MENTIONS(msg, "sum to 12");
  EXPECT_MENTIONS(msg, "l.0.self_attn.qkv_proj.weight");
}

TEST(PlanValidation, PatternMatchingNothing) {
  SourceIndex src;
  src.add("x.weight", DType::kF32, {2});
  WeightRenaming legacy{"LayerNorm.gamma", "LayerNorm.weight"};
  std::string msg = compile_error({legacy}, src, {{"x.weight", {{2}}}});
  EXPECT_MENTIONS(msg, "rule #0 WeightRenaming LayerNorm.gamma → LayerNorm.weight");
  EXPECT_MENTIONS(msg, "matches no checkpoint tensor");
  msg = compile_error({kQkvSplit}, src, {{"x.weight", {{2}}}});
  EXPECT_MENTIONS(msg, "'qkv split'");
  // An optional rule may match nothing.
  legacy.optional = true;
  EXPECT_TRUE(ConversionPlan::compile({legacy}, src, {{"x.weight", {{2}}}}).ok());
}

TEST(PlanValidation, RenamingOntoAnExistingName) {
  SourceIndex src;
  src.add("a.gamma", DType::kF32, {2});
  src.add("a.weight", DType::kF32, {2});
  const std::string msg = compile_error({WeightRenaming{"gamma", "weight"}}, src, {{"a.weight", {{2}}}});
  EXPECT_MENTIONS(msg, "'a.gamma' and 'a.weight' both become 'a.weight'");
  EXPECT_MENTIONS(msg, "rule #0 WeightRenaming");
}

TEST(PlanValidation, MissingParamsAndUnusedSources) {
  SourceIndex src;
  src.add("a.weight", DType::kF32, {2});
  src.add("extra.weight", DType::kF32, {2});
  ExpectedParams exp{{"a.weight", {{2}}}, {"lm_head.weight", {{2}}}};
  const std::string msg = compile_error({}, src, exp);
  EXPECT_MENTIONS(msg, "'lm_head.weight'");
  auto plan = ConversionPlan::compile({}, src, exp, {.allow_missing_params = true});
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EXPECT_EQ(plan->missing_params(), std::vector<std::string>{"lm_head.weight"});
  EXPECT_EQ(plan->unused_sources(), std::vector<std::string>{"extra.weight"});
}

// ---------------------------------------------------------------- load / save

class PlanRoundTrip : public testing::PlanFileFixture {
 protected:
  // Returns the loaded parameters; the plan and checkpoint stay in members.
  std::map<std::string, Tensor> load(const NamedTensors& tensors, const WeightRules& rules,
                                     const ExpectedParams& expected) {
    const SourceIndex src = write_checkpoint(tensors, SafetensorsOrder::kLikePython);
    return load_with(ConversionPlan::compile(rules, src, expected));
  }
};

TEST_F(PlanRoundTrip, Phi3FusedQkvAndGateUpSplitUnevenly) {
  // 4 query heads, 2 kv heads, head_dim 2, hidden 8, intermediate 6, 2 layers, bf16.
  const int64_t H = 8, hd = 2, nq = 4, nkv = 2, I = 6, L = 2, V = 10;
  NamedTensors ckpt{{"model.embed_tokens.weight", iota(DType::kBF16, {V, H}, 7)},
                    {"model.norm.weight", iota(DType::kBF16, {H}, 3)}};
  ExpectedParams exp{{"model.embed_tokens.weight", {{V, H}}}, {"model.norm.weight", {{H}}}};
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    ckpt.emplace_back(p + "self_attn.qkv_proj.weight", iota(DType::kBF16, {(nq + 2 * nkv) * hd, H}, 1000 * l));
    ckpt.emplace_back(p + "mlp.gate_up_proj.weight", iota(DType::kBF16, {2 * I, H}, 1000 * l + 500));
    exp[p + "self_attn.q_proj.weight"] = {{nq * hd, H}};
    exp[p + "self_attn.k_proj.weight"] = {{nkv * hd, H}};
    exp[p + "self_attn.v_proj.weight"] = {{nkv * hd, H}};
    exp[p + "mlp.gate_proj.weight"] = {{I, H}};
    exp[p + "mlp.up_proj.weight"] = {{I, H}};
  }
  WeightRules rules{kQkvSplit, WeightConverter{{"mlp.gate_up_proj.weight"},
                                               {"mlp.gate_proj.weight", "mlp.up_proj.weight"},
                                               {Chunk(0)}}};
  auto params = load(ckpt, rules, exp);
  ASSERT_EQ(params.size(), exp.size());
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const Tensor& q = params.at(p + "self_attn.q_proj.weight");
    const Tensor& k = params.at(p + "self_attn.k_proj.weight");
    const Tensor& v = params.at(p + "self_attn.v_proj.weight");
    ASSERT_EQ(q.shape(), (Shape{8, H}));
    ASSERT_EQ(k.shape(), (Shape{4, H}));
    ASSERT_EQ(v.dtype(), DType::kBF16);
    for (int64_t i = 0; i < q.numel(); ++i) ASSERT_EQ(at(q, i), 1000 * l + i);
    for (int64_t i = 0; i < k.numel(); ++i) ASSERT_EQ(at(k, i), 1000 * l + 8 * H + i);
    for (int64_t i = 0; i < v.numel(); ++i) ASSERT_EQ(at(v, i), 1000 * l + 12 * H + i);
    const Tensor& up = params.at(p + "mlp.up_proj.weight");
    for (int64_t i = 0; i < up.numel(); ++i) ASSERT_EQ(at(up, i), 1000 * l + 500 + I * H + i);
  }
  // Row splits are views into the mapping: nothing materialized.
  EXPECT_EQ(stats_.materialized_bytes, 0u);
  EXPECT_EQ(stats_.zero_copy_params, exp.size());
  expect_round_trip(params);
}

TEST_F(PlanRoundTrip, MixtralExpertListsMergeIntoStackedTensors) {
  // 12 experts so that numeric order (2 < 10) differs from string order.
  const int64_t E = 12, H = 4, I = 3, L = 2;
  NamedTensors ckpt;
  ExpectedParams exp;
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (int64_t e = 0; e < E; ++e) {
      const std::string ep = p + "block_sparse_moe.experts." + std::to_string(e) + ".";
      const int64_t base = 100000 * l + 1000 * e;
      ckpt.emplace_back(ep + "w1.weight", iota(DType::kF32, {I, H}, base));
      ckpt.emplace_back(ep + "w3.weight", iota(DType::kF32, {I, H}, base + 100));
      ckpt.emplace_back(ep + "w2.weight", iota(DType::kF32, {H, I}, base + 200));
    }
    ckpt.emplace_back(p + "block_sparse_moe.gate.weight", iota(DType::kF32, {E, H}, 900000 + l));
    exp[p + "mlp.experts.gate_up_proj"] = {{E, 2 * I, H}};
    exp[p + "mlp.experts.down_proj"] = {{E, H, I}};
    exp[p + "mlp.router.weight"] = {{E, H}};
  }
  WeightRules rules{
      WeightRenaming{"block_sparse_moe.gate", "mlp.router"},
      WeightConverter{{"block_sparse_moe.experts.*.w1.weight", "block_sparse_moe.experts.*.w3.weight"},
                      {"mlp.experts.gate_up_proj"},
                      {MergeModulelist(0), Concatenate(1)}},
      WeightConverter{{"block_sparse_moe.experts.*.w2.weight"}, {"mlp.experts.down_proj"}, {MergeModulelist(0)}},
  };
  auto params = load(ckpt, rules, exp);
  ASSERT_EQ(params.size(), exp.size());
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const Tensor& gu = params.at(p + "mlp.experts.gate_up_proj");
    const Tensor& down = params.at(p + "mlp.experts.down_proj");
    for (int64_t e = 0; e < E; ++e) {
      const int64_t base = 100000 * l + 1000 * e;
      for (int64_t r = 0; r < 2 * I; ++r)
        for (int64_t c = 0; c < H; ++c)
          ASSERT_EQ(at(gu, (e * 2 * I + r) * H + c), r < I ? base + r * H + c : base + 100 + (r - I) * H + c)
              << "layer " << l << " expert " << e;
      for (int64_t i = 0; i < H * I; ++i) ASSERT_EQ(at(down, e * H * I + i), base + 200 + i);
    }
    EXPECT_EQ(at(params.at(p + "mlp.router.weight"), 0), 900000 + l);
  }
  // Memory bound: the largest group (gate_up) allocates its two stacks and the
  // concatenation; nothing else is held at once.
  const uint64_t f = sizeof(float);
  const uint64_t gate_up_group = (2 * E * I * H + 2 * E * I * H) * f, down_group = E * H * I * f;
  EXPECT_EQ(stats_.peak_group_bytes, gate_up_group);
  EXPECT_EQ(stats_.materialized_bytes, L * (gate_up_group + down_group));
  EXPECT_NE(stats_.peak_group.find("gate_up_proj"), std::string::npos) << stats_.peak_group;
  EXPECT_EQ(stats_.zero_copy_params, static_cast<size_t>(L));  // the renamed routers
  expect_round_trip(params);
}

TEST_F(PlanRoundTrip, StackedCheckpointSplitsIntoAModuleList) {
  const int64_t E = 3, H = 4, I = 2;
  NamedTensors ckpt{{"layers.0.mlp.experts.down_proj", iota(DType::kBF16, {E, H, I})}};
  ExpectedParams exp;
  for (int64_t e = 0; e < E; ++e) exp["layers.0.experts." + std::to_string(e) + ".w2.weight"] = {{H, I}};
  auto params = load(ckpt, {WeightConverter{{"mlp.experts.down_proj"}, {"experts.*.w2.weight"}, {SplitModulelist(0)}}},
                     exp);
  ASSERT_EQ(params.size(), static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) {
    const Tensor& w = params.at("layers.0.experts." + std::to_string(e) + ".w2.weight");
    for (int64_t i = 0; i < H * I; ++i) ASSERT_EQ(at(w, i), e * H * I + i);
  }
  EXPECT_EQ(stats_.materialized_bytes, 0u);  // unbinding dim 0 gives views
  expect_round_trip(params);
}

TEST_F(PlanRoundTrip, ChunkThenPermuteForRopeOnQAndKOnly) {
  const int64_t nq = 4, nkv = 2, hd = 4, H = 6;
  NamedTensors ckpt{{"l.0.self_attn.qkv_proj.weight", iota(DType::kF32, {(nq + 2 * nkv) * hd, H})}};
  ExpectedParams exp{{"l.0.self_attn.q_proj.weight", {{nq * hd, H}}},
                     {"l.0.self_attn.k_proj.weight", {{nkv * hd, H}}},
                     {"l.0.self_attn.v_proj.weight", {{nkv * hd, H}}}};
  WeightConverter rule = kQkvSplit;
  rule.operations = {Chunk(0), PermuteForRope(nq, hd).on_slots({0}), PermuteForRope(nkv, hd).on_slots({1})};
  auto params = load(ckpt, {rule}, exp);
  const auto check = [&](const Tensor& t, int64_t heads, int64_t row0) {
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t j = 0; j < 2; ++j)
        for (int64_t i = 0; i < hd / 2; ++i)
          for (int64_t c = 0; c < H; ++c)
            ASSERT_EQ(at(t, (h * hd + j * (hd / 2) + i) * H + c), (row0 + h * hd + 2 * i + j) * H + c);
  };
  check(params.at("l.0.self_attn.q_proj.weight"), nq, 0);
  check(params.at("l.0.self_attn.k_proj.weight"), nkv, nq * hd);
  const Tensor& v = params.at("l.0.self_attn.v_proj.weight");
  for (int64_t i = 0; i < v.numel(); ++i) ASSERT_EQ(at(v, i), (nq + nkv) * hd * H + i);  // untouched
  expect_round_trip(params);

  // A caller holding q and k (not v) gets the group run whole: it writes v too.
  auto again = load_with(ConversionPlan::compile({rule}, SourceIndex::from_checkpoint(*ckpt_), exp),
                         {"l.0.self_attn.q_proj.weight", "l.0.self_attn.k_proj.weight"});
  EXPECT_EQ(again.size(), 3u);
  EXPECT_EQ(stats_.skipped_params, 0u);
}

// Parameters the caller already has (the weights cache of an earlier load): a group
// writing only those is not read or run; one writing others too runs whole.
TEST_F(PlanRoundTrip, GroupsWritingOnlyParametersTheCallerHasAreNotRun) {
  const int64_t nq = 4, nkv = 2, hd = 4, H = 6;
  NamedTensors ckpt{{"l.0.q", iota(DType::kF32, {nq * hd, H})},
                    {"l.0.k", iota(DType::kF32, {nkv * hd, H}, 500)},
                    {"l.0.v", iota(DType::kF32, {nkv * hd, H}, 900)}};
  ExpectedParams exp{{"l.0.q", {{nq * hd, H}}}, {"l.0.k", {{nkv * hd, H}}}, {"l.0.v", {{nkv * hd, H}}}};
  WeightRules rules{WeightConverter{{"^l.0.q$"}, {"l.0.q"}, {PermuteForRope(nq, hd)}, false, "rope q"},
                    WeightConverter{{"^l.0.k$"}, {"l.0.k"}, {PermuteForRope(nkv, hd)}, false, "rope k"}};
  const SourceIndex src = write_checkpoint(ckpt, SafetensorsOrder::kLikePython);
  auto all = load_with(ConversionPlan::compile(rules, src, exp));
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(stats_.materialized_params, 2u);
  EXPECT_EQ(stats_.skipped_params, 0u);

  auto rest = load_with(ConversionPlan::compile(rules, src, exp), {"l.0.q", "l.0.v"});
  EXPECT_EQ(rest.count("l.0.q"), 0u) << "its group writes only what the caller has";
  EXPECT_EQ(rest.count("l.0.v"), 0u) << "a view the caller has is not handed over either";
  ASSERT_EQ(rest.count("l.0.k"), 1u);
  EXPECT_TRUE(testing::same_bytes(rest.at("l.0.k"), all.at("l.0.k")));
  EXPECT_EQ(stats_.materialized_params, 1u);
  EXPECT_EQ(stats_.skipped_params, 2u);
  EXPECT_EQ(stats_.groups, 1u);
}

// llama.cpp's Gemma norms are 1 + w; AddScalar(-1) loads them and its reverse
// writes them back, in the tensor's own dtype.
TEST_F(PlanRoundTrip, AddScalarShiftsFloatTensorsAndRefusesQuantized) {
  NamedTensors ckpt{{"l.0.norm.weight", Tensor::from_f32({0, 1, 2, 3, 4, 5}, {6}).to(DType::kBF16)}};
  ExpectedParams exp{{"l.0.input_layernorm.weight", {{6}}}};
  auto params = load(ckpt, {WeightConverter{{"norm.weight"}, {"input_layernorm.weight"}, {AddScalar(-1.0)}}}, exp);
  const Tensor& w = params.at("l.0.input_layernorm.weight");
  EXPECT_EQ(w.dtype(), DType::kBF16);
  EXPECT_EQ(w.to_f32_vector(), (std::vector<float>{-1, 0, 1, 2, 3, 4}));
  EXPECT_EQ(stats_.materialized_bytes, 12u);
  expect_round_trip(params);
  EXPECT_EQ(AddScalar(-1.0).reverse().scalar, 1.0);
  EXPECT_EQ(AddScalar(-1.0).describe(), "AddScalar(-1)");
  ShapeBundle q{{{{4, 32}}, DType::kQ8_0}};
  EXPECT_FALSE(infer_shapes(AddScalar(1.0), q).ok()) << "quantized blocks cannot be shifted element-wise";
}

TEST_F(PlanRoundTrip, TransposeWithCheckDimsOnlyWhereShapesDiffer) {
  NamedTensors ckpt{{"a.proj.weight", iota(DType::kF32, {3, 5})}, {"b.proj.weight", iota(DType::kF32, {5, 3}, 50)}};
  ExpectedParams exp{{"a.linear.weight", {{5, 3}}}, {"b.linear.weight", {{5, 3}}}};
  auto params = load(ckpt, {WeightConverter{{"proj.weight"}, {"linear.weight"}, {Transpose(0, 1, true)}}}, exp);
  const Tensor& a = params.at("a.linear.weight");
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t j = 0; j < 3; ++j) ASSERT_EQ(at(a, i * 3 + j), j * 5 + i);
  const Tensor& b = params.at("b.linear.weight");
  for (int64_t i = 0; i < 15; ++i) ASSERT_EQ(at(b, i), 50 + i);
  EXPECT_EQ(stats_.zero_copy_params, 1u);
  expect_round_trip(params);
}

TEST_F(PlanRoundTrip, ModelDtypeCastsOnLoadAndBackOnSave) {
  NamedTensors ckpt{{"w", Tensor::from_f32({1.0f, -2.5f, 3.25f, 0.5f}, {2, 2})}};
  auto params = load(ckpt, {}, {{"w", {{2, 2}, DType::kBF16}}});
  ASSERT_EQ(params.at("w").dtype(), DType::kBF16);
  EXPECT_EQ(params.at("w").to_f32_vector(), (std::vector<float>{1.0f, -2.5f, 3.25f, 0.5f}));
  expect_round_trip(params);  // these values are exact in bf16
}

TEST_F(PlanRoundTrip, LoadRefusesACheckpointWithOtherHeaders) {
  NamedTensors ckpt{{"w", iota(DType::kF32, {2, 2})}};
  load(ckpt, {}, {{"w", {{2, 2}}}});
  SourceIndex other;
  other.add("w", DType::kF32, {4});
  auto plan = ConversionPlan::compile({}, other, {{"w", {{4}}}});
  ASSERT_TRUE(plan.ok());
  auto st = plan->load(*ckpt_, [](const std::string&, Tensor) { return Status::Ok(); });
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("'w'"), std::string::npos);
}

TEST(PlanSharded, RoundTripsShardsAndIndex) {
  TempDir dir;
  const std::string d = dir.path();
  NamedTensors s1{{"l.0.self_attn.qkv_proj.weight", iota(DType::kF32, {8, 4})}, {"z.weight", iota(DType::kF32, {3})}};
  NamedTensors s2{{"a.weight", iota(DType::kBF16, {5}, 9)}};
  ASSERT_TRUE(write_safetensors(d + "/model-00001-of-00002.safetensors", s1, {{"format", "pt"}}, SafetensorsOrder::kLikePython).ok());
  ASSERT_TRUE(write_safetensors(d + "/model-00002-of-00002.safetensors", s2, {{"format", "pt"}}, SafetensorsOrder::kLikePython).ok());
  testing::write_file(d + "/model.safetensors.index.json",
                      R"({"metadata": {"total_size": 150}, "weight_map": {"l.0.self_attn.qkv_proj.weight": "model-00001-of-00002.safetensors",
                          "z.weight": "model-00001-of-00002.safetensors", "a.weight": "model-00002-of-00002.safetensors"}})");
  auto ck = Checkpoint::open(d);
  ASSERT_TRUE(ck.ok()) << ck.status().to_string();
  ExpectedParams exp{{"l.0.self_attn.q_proj.weight", {{4, 4}}}, {"l.0.self_attn.k_proj.weight", {{2, 4}}},
                     {"l.0.self_attn.v_proj.weight", {{2, 4}}}, {"z.weight", {{3}}}, {"a.weight", {{5}}}};
  auto plan = ConversionPlan::compile({kQkvSplit}, SourceIndex::from_checkpoint(*ck), exp);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  std::map<std::string, Tensor> params;
  ASSERT_TRUE(plan->load(*ck, [&](const std::string& n, Tensor t) { params[n] = t; return Status::Ok(); }).ok());
  const std::string out = dir.file("saved");
  auto st = plan->save(params_from(params), out);
  ASSERT_TRUE(st.ok()) << st.to_string();
  for (const char* f : {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"})
    EXPECT_TRUE(read_file(d + "/" + f) == read_file(out + "/" + f)) << f;
  auto again = Checkpoint::open(out);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_TRUE(again->sharded());
  EXPECT_EQ(again->names(), ck->names());
  EXPECT_EQ(read_file(out + "/model.safetensors.index.json").find("\"total_size\": 150") != std::string::npos, true);
}

}  // namespace
}  // namespace loom
