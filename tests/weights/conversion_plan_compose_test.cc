// ConversionPlan::compose: a second stage of rules written against the first
// stage's outputs (a kernel layout on top of an architecture's conversion), its
// checks before any byte is read, the streamed load, and the reverse through
// both stages back to the original bytes.
#include <gtest/gtest.h>

#include <cstring>

#include "io/io_test_util.h"
#include "loom/io/safetensors_writer.h"
#include "loom/weights/conversion_plan.h"
#include "weights/plan_file_fixture.h"
#include "weights/weights_test_util.h"

namespace loom {
namespace {

using testing::at;
using testing::iota;
using testing::read_file;
using testing::same_bytes;
using testing::TempDir;

#define EXPECT_MENTIONS(msg, text) EXPECT_NE((msg).find(text), std::string::npos) << (msg)

// Phi3-shaped: 4 query heads, 2 kv heads, head_dim 2, hidden 8, intermediate 6, 2 layers.
constexpr int64_t H = 8, kQ = 8, kKV = 4, I = 6, L = 2;

std::string layer(int64_t l) { return "model.layers." + std::to_string(l) + "."; }

// The architecture's rules (stage 1): the checkpoint's fused tensors split.
WeightRules phi3_rules() {
  return {WeightConverter{{"self_attn.qkv_proj.weight"},
                          {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"},
                          {Chunk(0)},
                          false,
                          "qkv split"},
          WeightConverter{{"mlp.gate_up_proj.weight"}, {"mlp.gate_proj.weight", "mlp.up_proj.weight"}, {Chunk(0)}, false,
                          "gate_up split"}};
}

// The module tree's parameters (what stage 1 produces).
ExpectedParams model_params() {
  ExpectedParams e{{"model.embed_tokens.weight", {{10, H}}}, {"model.norm.weight", {{H}}}};
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = layer(l);
    e[p + "self_attn.q_proj.weight"] = {{kQ, H}};
    e[p + "self_attn.k_proj.weight"] = {{kKV, H}};
    e[p + "self_attn.v_proj.weight"] = {{kKV, H}};
    e[p + "post_attention_layernorm.weight"] = {{H}};
    e[p + "mlp.gate_proj.weight"] = {{I, H}};
    e[p + "mlp.up_proj.weight"] = {{I, H}};
    e[p + "mlp.down_proj.weight"] = {{H, I}};
  }
  return e;
}

std::string anchored(const std::string& s) { return "^" + s + "$"; }

// Layout rules as loom's built-in kernels write them (anchored to one module):
// FusedQKV on layer 0 only, RMSNormMLP on every layer.
struct Layouts {
  WeightRules rules;
  ExpectedParams expected;
};
Layouts layouts() {
  Layouts out{{}, model_params()};
  ExpectedParams& e = out.expected;
  {
    const std::string p = layer(0) + "self_attn.";
    out.rules.push_back(WeightConverter{{anchored(p + "q_proj.weight"), anchored(p + "k_proj.weight"),
                                         anchored(p + "v_proj.weight")},
                                        {anchored(p + "qkv_proj.weight")},
                                        {Concatenate(0)},
                                        false,
                                        "FusedQKV at layer 0"});
    for (const char* n : {"q_proj.weight", "k_proj.weight", "v_proj.weight"}) e.erase(p + n);
    e[p + "qkv_proj.weight"] = {{kQ + 2 * kKV, H}};
  }
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = layer(l), norm = p + "post_attention_layernorm.";
    out.rules.push_back(WeightConverter{{anchored(p + "mlp.gate_proj.weight"), anchored(p + "mlp.up_proj.weight")},
                                        {anchored(norm + "gate_up_proj.weight")},
                                        {Concatenate(0)},
                                        false,
                                        "RMSNormMLP at layer " + std::to_string(l)});
    out.rules.push_back(WeightRenaming{anchored(p + "mlp.down_proj.weight"), norm + "down_proj.weight", false,
                                       "RMSNormMLP down at layer " + std::to_string(l)});
    for (const char* n : {"mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"}) e.erase(p + n);
    e[norm + "gate_up_proj.weight"] = {{2 * I, H}};
    e[norm + "down_proj.weight"] = {{H, I}};
  }
  return out;
}

// The checkpoint: every element says where it came from.
NamedTensors phi3_checkpoint(DType dtype) {
  NamedTensors c{{"model.embed_tokens.weight", iota(dtype, {10, H}, 7)}, {"model.norm.weight", iota(dtype, {H}, 3)}};
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = layer(l);
    c.emplace_back(p + "self_attn.qkv_proj.weight", iota(dtype, {kQ + 2 * kKV, H}, 1000 * l));
    c.emplace_back(p + "post_attention_layernorm.weight", iota(dtype, {H}, 1000 * l + 300));
    c.emplace_back(p + "mlp.gate_up_proj.weight", iota(dtype, {2 * I, H}, 1000 * l + 400));
    c.emplace_back(p + "mlp.down_proj.weight", iota(dtype, {H, I}, 1000 * l + 700));
  }
  return c;
}

SourceIndex index_of(const NamedTensors& tensors) {
  SourceIndex s;
  for (const auto& [name, t] : tensors) s.add(name, t.dtype(), t.shape());
  return s;
}

Result<ConversionPlan> compose_on(const WeightRules& first_rules, const SourceIndex& src, const ExpectedParams& first,
                                  const WeightRules& second_rules, const ExpectedParams& second) {
  CompileOptions a;
  a.rules_name = "architecture rule";
  auto one = ConversionPlan::compile(first_rules, src, first, a);
  if (!one.ok()) return one.status();
  CompileOptions b;
  b.rules_name = "layout rule";
  return ConversionPlan::compose(std::move(one).value(), second_rules, second, b);
}

std::string compose_error(const WeightRules& first_rules, const SourceIndex& src, const ExpectedParams& first,
                          const WeightRules& second_rules, const ExpectedParams& second) {
  auto plan = compose_on(first_rules, src, first, second_rules, second);
  EXPECT_FALSE(plan.ok()) << "composed but should not have";
  return plan.ok() ? "" : plan.status().message();
}

// ---------------------------------------------------------------- compile on headers

TEST(ComposeCompile, ChunkStageThenConcatenateStageOnAHandBuiltIndex) {
  const SourceIndex src = index_of(phi3_checkpoint(DType::kBF16));
  const Layouts lay = layouts();
  auto plan = compose_on(phi3_rules(), src, model_params(), lay.rules, lay.expected);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  ASSERT_NE(plan->second_stage(), nullptr);
  // Stage 1 as without layouts: two converted groups a layer plus pass-throughs.
  size_t converted = 0;
  for (const auto& g : plan->groups()) converted += g.identity() ? 0 : 1;
  EXPECT_EQ(converted, static_cast<size_t>(2 * L));
  // Stage 2 reads the first stage's names and writes the final ones.
  const ConversionPlan& two = *plan->second_stage();
  const ConversionGroup* qkv = nullptr;
  for (const auto& g : two.groups())
    if (g.targets[0][0].name == "model.layers.0.self_attn.qkv_proj.weight") qkv = &g;
  ASSERT_NE(qkv, nullptr) << two.describe();
  ASSERT_EQ(qkv->sources.size(), 3u);
  EXPECT_EQ(qkv->sources[1][0].name, "model.layers.0.self_attn.k_proj.weight");
  EXPECT_EQ(qkv->sources[1][0].shape, (Shape{kKV, H}));
  EXPECT_EQ(qkv->sources[1][0].dtype, DType::kBF16);
  EXPECT_MENTIONS(qkv->rule_description, "layout rule #0");
  EXPECT_TRUE(plan->unused_sources().empty());
  EXPECT_TRUE(plan->missing_params().empty());
  EXPECT_MENTIONS(plan->describe(), "then:\n");
}

// ---------------------------------------------------------------- load / save

class ComposeRoundTrip : public testing::PlanFileFixture {
 protected:
  std::map<std::string, Tensor> load(const NamedTensors& tensors, const WeightRules& first_rules,
                                     const ExpectedParams& first, const WeightRules& second_rules,
                                     const ExpectedParams& second) {
    const SourceIndex src = write_checkpoint(tensors, SafetensorsOrder::kAsGiven);
    return load_with(compose_on(first_rules, src, first, second_rules, second));
  }
};

TEST_F(ComposeRoundTrip, SplitByTheArchitectureFusedAgainByTheLayouts) {
  const NamedTensors ckpt = phi3_checkpoint(DType::kBF16);
  const Layouts lay = layouts();
  auto params = load(ckpt, phi3_rules(), model_params(), lay.rules, lay.expected);
  ASSERT_EQ(params.size(), lay.expected.size());
  for (const auto& [name, e] : lay.expected) {
    ASSERT_TRUE(params.count(name)) << name;
    EXPECT_EQ(params.at(name).shape(), e.shape) << name;
  }
  std::map<std::string, Tensor> original(ckpt.begin(), ckpt.end());
  // Fused again, the tensors equal the checkpoint's fused ones byte for byte.
  EXPECT_TRUE(same_bytes(params.at("model.layers.0.self_attn.qkv_proj.weight"),
                         original.at("model.layers.0.self_attn.qkv_proj.weight")));
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = layer(l);
    EXPECT_TRUE(same_bytes(params.at(p + "post_attention_layernorm.gate_up_proj.weight"),
                           original.at(p + "mlp.gate_up_proj.weight")));
    EXPECT_TRUE(same_bytes(params.at(p + "post_attention_layernorm.down_proj.weight"), original.at(p + "mlp.down_proj.weight")));
  }
  // Layer 1 has no FusedQKV: its split q/k/v come through both stages.
  const Tensor& k1 = params.at("model.layers.1.self_attn.k_proj.weight");
  for (int64_t i = 0; i < k1.numel(); ++i) ASSERT_EQ(at(k1, i), 1000 + kQ * H + i);

  // A Chunk undone by a Concatenate is the identity: the re-fused tensors are
  // the checkpoint's own bytes in the mapping, and nothing is allocated.
  EXPECT_EQ(params.at("model.layers.0.self_attn.qkv_proj.weight").data(),
            ckpt_->get("model.layers.0.self_attn.qkv_proj.weight").value().data());
  EXPECT_EQ(params.at("model.layers.1.post_attention_layernorm.gate_up_proj.weight").data(),
            ckpt_->get("model.layers.1.mlp.gate_up_proj.weight").value().data());
  EXPECT_EQ(stats_.peak_buffered_bytes, 0u);
  EXPECT_EQ(stats_.peak_group_bytes, 0u);
  EXPECT_EQ(stats_.materialized_bytes, 0u);
  EXPECT_EQ(stats_.zero_copy_params, lay.expected.size());

  expect_round_trip(params);
}

TEST_F(ComposeRoundTrip, AConcatenationInAnotherOrderIsNotTakenForTheIdentity) {
  const NamedTensors ckpt = phi3_checkpoint(DType::kF32);
  ExpectedParams fin = model_params();
  const std::string p = layer(0) + "self_attn.";
  for (const char* n : {"q_proj.weight", "k_proj.weight", "v_proj.weight"}) fin.erase(p + n);
  fin[p + "vkq.weight"] = {{kQ + 2 * kKV, H}};
  WeightRules second{WeightConverter{{anchored(p + "v_proj.weight"), anchored(p + "k_proj.weight"), anchored(p + "q_proj.weight")},
                                     {anchored(p + "vkq.weight")},
                                     {Concatenate(0)},
                                     false,
                                     "v, k, q"}};
  auto params = load(ckpt, phi3_rules(), model_params(), second, fin);
  const Tensor& vkq = params.at(p + "vkq.weight");
  // Rows: v (checkpoint rows 12..15), k (8..11), q (0..7).
  for (int64_t r = 0; r < kQ + 2 * kKV; ++r) {
    const int64_t from = r < kKV ? kQ + kKV + r : r < 2 * kKV ? kQ + (r - kKV) : r - 2 * kKV;
    for (int64_t c = 0; c < H; ++c) ASSERT_EQ(at(vkq, r * H + c), from * H + c) << r;
  }
  EXPECT_EQ(stats_.materialized_bytes, static_cast<uint64_t>((kQ + 2 * kKV) * H * 4));
  expect_round_trip(params);
}

TEST_F(ComposeRoundTrip, OutputsWaitingForALaterStageOneGroupAreBufferedAndCounted) {
  // Stage 1 transposes a and b (materializing them); stage 2 concatenates the
  // results, so a's transpose waits while c passes through.
  NamedTensors ckpt{{"a", iota(DType::kF32, {3, 4}, 0)}, {"c", iota(DType::kF32, {5}, 100)}, {"b", iota(DType::kF32, {3, 2}, 200)}};
  WeightRules first{WeightConverter{{"^a$"}, {"a_t"}, {Transpose(0, 1)}, false, "transpose a"},
                    WeightConverter{{"^b$"}, {"b_t"}, {Transpose(0, 1)}, false, "transpose b"}};
  ExpectedParams mid{{"a_t", {{4, 3}}}, {"b_t", {{2, 3}}}, {"c", {{5}}}};
  WeightRules second{WeightConverter{{"^a_t$", "^b_t$"}, {"ab"}, {Concatenate(0)}, false, "fuse"}};
  ExpectedParams fin{{"ab", {{6, 3}}}, {"c", {{5}}}};
  auto params = load(ckpt, first, mid, second, fin);
  ASSERT_EQ(params.size(), 2u);
  const Tensor& ab = params.at("ab");
  // Row r < 4 of ab is column r of a; row 4 + r is column r of b.
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t c = 0; c < 3; ++c)
      ASSERT_EQ(at(ab, r * 3 + c), r < 4 ? c * 4 + r : 200 + c * 2 + (r - 4)) << r << "," << c;
  const uint64_t a_bytes = 12 * 4, b_bytes = 6 * 4;
  EXPECT_EQ(stats_.peak_buffered_bytes, a_bytes + b_bytes);
  // When the concatenation runs, a_t, b_t and ab are alive at once.
  EXPECT_EQ(stats_.peak_group_bytes, 2 * (a_bytes + b_bytes));
  EXPECT_MENTIONS(stats_.peak_group, "'fuse'");
  EXPECT_EQ(stats_.groups, 3u + 2u);
  EXPECT_EQ(stats_.zero_copy_params, 1u);  // c
  expect_round_trip(params);

  // A caller holding ab (the weights cache of an earlier load): neither transpose nor
  // the fuse runs, only c passes through both stages.
  auto rest = load_with(compose_on(first, SourceIndex::from_checkpoint(*ckpt_), mid, second, fin), {"ab"});
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(rest.count("c"), 1u);
  EXPECT_EQ(stats_.skipped_params, 1u);
  EXPECT_EQ(stats_.groups, 2u);
  EXPECT_EQ(stats_.materialized_bytes, 0u);
  EXPECT_EQ(stats_.peak_buffered_bytes, 0u);
}

TEST_F(ComposeRoundTrip, SecondStageDtypeCastsOnLoadAndBackOnSave) {
  NamedTensors ckpt{{"qk", Tensor::from_f32({1.0f, -2.5f, 3.25f, 0.5f, 8.0f, -0.125f}, {3, 2})}};
  WeightRules first{WeightConverter{{"^qk$"}, {"q", "k"}, {Chunk(0, {2, 1})}, false, "split"}};
  ExpectedParams mid{{"q", {{2, 2}}}, {"k", {{1, 2}}}};
  WeightRules second{WeightRenaming{"^k$", "key", false, "rename k"}};
  ExpectedParams fin{{"q", {{2, 2}}}, {"key", {{1, 2}, DType::kBF16}}};
  auto params = load(ckpt, first, mid, second, fin);
  ASSERT_EQ(params.at("key").dtype(), DType::kBF16);
  ASSERT_EQ(params.at("q").dtype(), DType::kF32);
  EXPECT_EQ(params.at("key").to_f32_vector(), (std::vector<float>{8.0f, -0.125f}));
  EXPECT_EQ(stats_.zero_copy_params, 1u);
  expect_round_trip(params);  // exact in bf16
}

TEST_F(ComposeRoundTrip, AComposedPlanRefusesOtherHeaders) {
  const NamedTensors ckpt = phi3_checkpoint(DType::kF32);
  const Layouts lay = layouts();
  load(ckpt, phi3_rules(), model_params(), lay.rules, lay.expected);
  ASSERT_TRUE(plan_.has_value());
  const std::string other = dir_.file("other.safetensors");
  NamedTensors changed = ckpt;
  changed[2].second = iota(DType::kF32, {kQ + 2 * kKV + 2, H});
  ASSERT_TRUE(write_safetensors(other, changed, {}, SafetensorsOrder::kAsGiven).ok());
  auto st = plan_->load(Checkpoint::open(other).value(), [](const std::string&, Tensor) { return Status::Ok(); });
  ASSERT_FALSE(st.ok());
  EXPECT_MENTIONS(st.status().message(), "'model.layers.0.self_attn.qkv_proj.weight'");
}

// ---------------------------------------------------------------- conflicts

TEST(ComposeConflicts, TwoLayoutsReadingTheSameParameterNameBothRules) {
  const SourceIndex src = index_of(phi3_checkpoint(DType::kF32));
  Layouts lay = layouts();
  // A second layout that also wants layer 0's k_proj.
  lay.rules.push_back(WeightConverter{{anchored("model.layers.0.self_attn.k_proj.weight")},
                                      {anchored("model.layers.0.self_attn.k_t.weight")},
                                      {Transpose(0, 1)},
                                      false,
                                      "KTranspose at layer 0"});
  lay.expected["model.layers.0.self_attn.k_t.weight"] = {{H, kKV}};
  const std::string msg = compose_error(phi3_rules(), src, model_params(), lay.rules, lay.expected);
  EXPECT_MENTIONS(msg, "conflicting rules for parameter 'model.layers.0.self_attn.k_proj.weight'");
  EXPECT_MENTIONS(msg, "layout rule #0 WeightConverter 'FusedQKV at layer 0'");
  EXPECT_MENTIONS(msg, "'KTranspose at layer 0'");
}

TEST(ComposeConflicts, TwoLayoutsWritingTheSameParameterNameBothRules) {
  const SourceIndex src = index_of(phi3_checkpoint(DType::kF32));
  Layouts lay = layouts();
  // Layer 1's q/k/v fused into layer 0's name.
  const std::string p = layer(1) + "self_attn.";
  lay.rules.push_back(WeightConverter{{anchored(p + "q_proj.weight"), anchored(p + "k_proj.weight"), anchored(p + "v_proj.weight")},
                                      {anchored("model.layers.0.self_attn.qkv_proj.weight")},
                                      {Concatenate(0)},
                                      false,
                                      "FusedQKV misplaced"});
  for (const char* n : {"q_proj.weight", "k_proj.weight", "v_proj.weight"}) lay.expected.erase(p + n);
  const std::string msg = compose_error(phi3_rules(), src, model_params(), lay.rules, lay.expected);
  EXPECT_MENTIONS(msg, "'model.layers.0.self_attn.qkv_proj.weight' written twice");
  EXPECT_MENTIONS(msg, "'FusedQKV at layer 0'");
  EXPECT_MENTIONS(msg, "'FusedQKV misplaced'");
}

TEST(ComposeConflicts, ALayoutRuleWrittenAgainstCheckpointNamesNamesTheArchitectureRule) {
  const SourceIndex src = index_of(phi3_checkpoint(DType::kF32));
  ExpectedParams fin = model_params();
  const std::string p = layer(0) + "self_attn.";
  for (const char* n : {"q_proj.weight", "k_proj.weight", "v_proj.weight"}) fin.erase(p + n);
  fin[p + "qkv_t.weight"] = {{H, kQ + 2 * kKV}};
  // qkv_proj exists only in the checkpoint, and the architecture splits it.
  WeightRules second{WeightConverter{{anchored(p + "qkv_proj.weight")}, {anchored(p + "qkv_t.weight")}, {Transpose(0, 1)},
                                     false, "QkvT at layer 0"}};
  std::string msg = compose_error(phi3_rules(), src, model_params(), second, fin);
  EXPECT_MENTIONS(msg, "layout rule #0 WeightConverter 'QkvT at layer 0'");
  EXPECT_MENTIONS(msg, "source patterns match no parameter");
  EXPECT_MENTIONS(msg, "checkpoint tensor 'model.layers.0.self_attn.qkv_proj.weight'");
  EXPECT_MENTIONS(msg, "architecture rule #0 WeightConverter 'qkv split'");

  // A name in neither stage.
  second = {WeightConverter{{anchored(p + "nothing.weight")}, {anchored(p + "qkv_t.weight")}, {Transpose(0, 1)}, false,
                            "QkvT at layer 0"}};
  msg = compose_error(phi3_rules(), src, model_params(), second, fin);
  EXPECT_MENTIONS(msg, "'QkvT at layer 0'");
  EXPECT_MENTIONS(msg, "neither a checkpoint tensor nor a first-stage parameter");

  // One source of several missing: the missing key, its rule, and the architecture rule that took it.
  Layouts lay = layouts();
  auto& fused = std::get<WeightConverter>(lay.rules[0]);
  fused.sources[2] = anchored(layer(0) + "mlp.gate_up_proj.weight");
  msg = compose_error(phi3_rules(), src, model_params(), lay.rules, lay.expected);
  EXPECT_MENTIONS(msg, "'FusedQKV at layer 0'");
  EXPECT_MENTIONS(msg, "'gate_up split'");
}

TEST(ComposeConflicts, AParameterDroppedWithoutARuleCannotBeSavedBack) {
  const SourceIndex src = index_of(phi3_checkpoint(DType::kF32));
  Layouts lay = layouts();
  lay.expected.erase("model.norm.weight");
  const std::string msg = compose_error(phi3_rules(), src, model_params(), lay.rules, lay.expected);
  EXPECT_MENTIONS(msg, "'model.norm.weight'");
  EXPECT_MENTIONS(msg, "read by no layout rule");
}

TEST(ComposeConflicts, ShapeErrorsInTheSecondStageNameTheLayoutRule) {
  const SourceIndex src = index_of(phi3_checkpoint(DType::kF32));
  Layouts lay = layouts();
  lay.expected["model.layers.0.self_attn.qkv_proj.weight"] = {{kQ + kKV, H}};
  const std::string msg = compose_error(phi3_rules(), src, model_params(), lay.rules, lay.expected);
  EXPECT_MENTIONS(msg, "layout rule #0");
  EXPECT_MENTIONS(msg, "shape mismatch for 'model.layers.0.self_attn.qkv_proj.weight'");
  EXPECT_MENTIONS(msg, "[16, 8]");
}

}  // namespace
}  // namespace loom
