// Gemma3ForCausalLM and Gemma3ForConditionalGeneration: config handling
// (Gemma3TextConfig's defaults, the sliding pattern, the two RoPEs, 5.x
// rope_parameters, text_config), what the step graph records, and refusals.
// Parity with PyTorch is parity_test.cc's gemma3, gemma3_mm and gemma3_mm_v5
// fixtures.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include "loom/models/model.h"
#include "models/models_test_util.h"

namespace loom {
namespace gemma3_test {

namespace fs = std::filesystem;
using models_test::fixture;

class Gemma3Config : public ::testing::Test {
 protected:
  void use(const std::string& variant) {
    dir_ = fs::temp_directory_path() / ("loom_gemma3_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(fixture(variant) / f, dir_ / f);
    std::ifstream in(dir_ / "config.json");
    config_ = nlohmann::json::parse(in);
  }
  void TearDown() override { fs::remove_all(dir_); }

  Result<std::shared_ptr<models::Model>> load() {
    std::ofstream(dir_ / "config.json") << config_.dump(2);
    return models::Model::load(dir_.string());
  }
  void expect_error(ErrorCode code, const std::string& needle) {
    auto r = load();
    ASSERT_FALSE(r.ok()) << config_.dump();
    EXPECT_EQ(r.status().code(), code) << r.status().to_string();
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().to_string();
  }
  // Per layer: (sliding_window, rope theta, rope type, rope factor) as recorded.
  struct LayerOps {
    int64_t window = -1;
    double theta = 0, factor = 0, scale = 0;
    std::string rope_type;
  };
  static std::map<int64_t, LayerOps> layer_ops(const graph::Graph& g) {
    std::map<int64_t, LayerOps> out;
    for (const graph::Node& n : g.nodes()) {
      if (n.op == "attention") {
        out[n.attr_int("layer")].window = n.attr_int("sliding_window");
        out[n.attr_int("layer")].scale = n.attr_float("scale");
      }
    }
    for (const graph::Node& n : g.nodes()) {
      if (n.op != "rope") continue;
      // scope model.layers.<i>.self_attn
      const std::string prefix = "model.layers.";
      if (n.scope.rfind(prefix, 0) != 0) continue;
      const int64_t layer = std::stoll(n.scope.substr(prefix.size()));
      out[layer].theta = n.attr_float("theta");
      out[layer].factor = n.attr_float("factor");
      out[layer].rope_type = n.attr_str("rope_type");
    }
    return out;
  }

  fs::path dir_;
  nlohmann::json config_;
};

const graph::Node* gemma3_find_op(const graph::Graph& g, const std::string& op, const std::string& scope) {
  for (const graph::Node& n : g.nodes())
    if (n.op == op && n.scope == scope) return &n;
  return nullptr;
}

TEST_F(Gemma3Config, FixtureGraphRecordsEveryGemma3Piece) {
  use("gemma3-f32");
  ASSERT_FALSE(config_.contains("layer_types")) << "the fixture relies on the default pattern";
  auto model = load().value();
  EXPECT_EQ(model->module().class_name(), "Gemma3ForCausalLM");
  const graph::Graph& g = *model->step_graph();
  const graph::Node* scale = gemma3_find_op(g, "scale", "model");
  ASSERT_NE(scale, nullptr) << "embeddings are scaled by sqrt(hidden_size)";
  EXPECT_EQ(scale->attr_float("factor"), 8.0);
  EXPECT_EQ(gemma3_find_op(g, "softcap", ""), nullptr) << "no final soft-cap by default";
  int norms = 0;
  for (const graph::Node& n : g.nodes()) {
    if (n.op != "rms_norm") continue;
    ++norms;
    EXPECT_EQ(n.attr_float("weight_offset"), 1.0) << n.scope << ": every Gemma3 norm scales by (1 + w)";
  }
  EXPECT_EQ(norms, 6 * (4 + 2) + 1) << "four norms a layer, q_norm and k_norm, the final norm";
  ASSERT_NE(gemma3_find_op(g, "rms_norm", "model.layers.0.self_attn.q_norm"), nullptr);
  for (const auto& [layer, ops] : layer_ops(g)) {
    const bool full = layer == 5;  // sliding_window_pattern 6
    EXPECT_EQ(ops.window, full ? 0 : 16) << "layer " << layer;
    EXPECT_DOUBLE_EQ(ops.scale, 1.0 / std::sqrt(32.0));
    EXPECT_EQ(ops.theta, full ? 1e6 : 1e4) << "layer " << layer;
    EXPECT_EQ(ops.rope_type, full ? "linear" : "default") << "layer " << layer;
    if (full) EXPECT_EQ(ops.factor, 2.0);
  }
  EXPECT_EQ(model->parameters().count("lm_head.weight"), 0u) << "tied to model.embed_tokens.weight";
}

TEST_F(Gemma3Config, AbsentFieldsTakeGemma3TextConfigDefaults) {
  use("gemma3-f32");
  for (const char* k : {"query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping",
                        "hidden_activation", "sliding_window", "rope_theta", "rope_scaling", "rope_local_base_freq"})
    config_.erase(k);
  config_["sliding_window_pattern"] = 3;  // 4.x configs carry the pattern instead of layer_types
  auto model = load().value();
  EXPECT_EQ(model->config().hidden_act, "gelu_pytorch_tanh");
  for (const auto& [layer, ops] : layer_ops(*model->step_graph())) {
    const bool full = (layer + 1) % 3 == 0;
    EXPECT_EQ(ops.window, full ? 0 : 4096) << "layer " << layer;
    EXPECT_EQ(ops.theta, full ? 1e6 : 1e4) << "layer " << layer;
    EXPECT_EQ(ops.rope_type, "default");
    EXPECT_DOUBLE_EQ(ops.scale, 1.0 / 16.0);
  }
}

TEST_F(Gemma3Config, FinalSoftCapOfTheCausalLmIsApplied) {
  use("gemma3-f32");
  config_["final_logit_softcapping"] = 30.0;
  config_["attn_logit_softcapping"] = 50.0;  // never applied by Gemma3's attention
  auto model = load().value();
  const graph::Graph& g = *model->step_graph();
  ASSERT_NE(gemma3_find_op(g, "softcap", ""), nullptr);
  EXPECT_EQ(gemma3_find_op(g, "softcap", "")->attr_float("cap"), 30.0);
  for (const graph::Node& n : g.nodes())
    if (n.op == "attention") EXPECT_EQ(n.attr_float("softcap"), 0.0);
}

TEST_F(Gemma3Config, ConditionalGenerationLoadsItsLanguageModelOnly) {
  use("gemma3_mm-f32");
  ASSERT_TRUE(config_.contains("text_config"));
  auto model = load().value();
  EXPECT_EQ(model->module().class_name(), "Gemma3ForConditionalGeneration");
  EXPECT_EQ(model->config().hidden_size, 64);
  for (const auto& [name, t] : model->parameters())
    EXPECT_EQ(name.find("vision"), std::string::npos) << name;
  const auto ops = layer_ops(*model->step_graph());
  ASSERT_EQ(ops.size(), 5u);
  for (const auto& [layer, o] : ops) {
    const bool full = layer == 1 || layer == 4;  // explicit layer_types win over sliding_window_pattern 3
    EXPECT_EQ(o.window, full ? 0 : 8) << "layer " << layer;
    EXPECT_EQ(o.theta, full ? 1e6 : 100.0) << "layer " << layer;
  }
}

TEST_F(Gemma3Config, TransformersFiveLayoutAndRopeParametersPerLayerType) {
  use("gemma3_mm_v5-f32");
  ASSERT_TRUE(config_["text_config"].contains("rope_parameters"));
  auto model = load().value();
  const graph::Graph& g = *model->step_graph();
  EXPECT_EQ(gemma3_find_op(g, "softcap", ""), nullptr)
      << "Gemma3ForConditionalGeneration applies no final soft-cap, whatever the config says";
  for (const auto& [layer, o] : layer_ops(g)) {
    const bool full = layer % 2 == 1;
    EXPECT_EQ(o.theta, full ? 50000.0 : 10000.0) << "layer " << layer;
    EXPECT_EQ(o.rope_type, full ? "linear" : "default") << "layer " << layer;
  }
}

TEST_F(Gemma3Config, UnsupportedOrBadFieldsAreNamed) {
  use("gemma3-f32");
  const nlohmann::json good = config_;
  config_["hidden_activation"] = "relu";
  expect_error(ErrorCode::kUnsupported, "hidden_activation 'relu'");
  config_ = good;
  config_["use_bidirectional_attention"] = true;
  expect_error(ErrorCode::kUnsupported, "use_bidirectional_attention");
  config_ = good;
  config_["final_logit_softcapping"] = -1.0;
  expect_error(ErrorCode::kInvalidArgument, "final_logit_softcapping");
  config_ = good;
  config_["query_pre_attn_scalar"] = 0;
  expect_error(ErrorCode::kInvalidArgument, "query_pre_attn_scalar");
  config_ = good;
  config_["sliding_window"] = nullptr;
  expect_error(ErrorCode::kInvalidArgument, "sliding_window is null");
  config_ = good;
  config_["sliding_window_pattern"] = 0;
  expect_error(ErrorCode::kParseError, "sliding_window_pattern");
  config_ = good;
  config_["layer_types"] = {"full_attention", "local", "full_attention", "full_attention", "full_attention",
                            "full_attention"};
  expect_error(ErrorCode::kInvalidArgument, "layer_types entry 1");
  config_ = good;
  config_["rope_local_base_freq"] = -5;
  expect_error(ErrorCode::kParseError, "rope_local_base_freq");
  config_ = good;
  config_.erase("rope_scaling");
  config_["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}, {"rope_theta", 1e6}}},
                                {"sliding_attention", {{"rope_type", "linear"}, {"factor", 2.0}}}};
  expect_error(ErrorCode::kUnsupported, "sliding_attention.rope_type 'linear'");
  config_ = good;
  config_["model_type"] = "gemma3";
  config_["text_config"] = "not an object";
  expect_error(ErrorCode::kParseError, "text_config must be an object");
}

}  // namespace gemma3_test
}  // namespace loom
