// Gemma2ForCausalLM's config handling (Gemma2Config's defaults, nulls that
// switch features off, refusals) and what its step graph records. Parity with
// PyTorch is parity_test.cc's gemma2 fixtures.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "loom/models/model.h"
#include "models/models_test_util.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using models_test::fixture;

class Gemma2Config : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("loom_gemma2_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(fixture("gemma2-f32") / f, dir_ / f);
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

  fs::path dir_;
  nlohmann::json config_;
};

const graph::Node* find_op(const graph::Graph& g, const std::string& op, const std::string& scope) {
  for (const graph::Node& n : g.nodes())
    if (n.op == op && n.scope == scope) return &n;
  return nullptr;
}

TEST_F(Gemma2Config, FixtureGraphRecordsEveryGemma2Piece) {
  auto model = load().value();
  EXPECT_EQ(model->module().class_name(), "Gemma2ForCausalLM");
  const graph::Graph& g = *model->step_graph();
  const graph::Node* scale = find_op(g, "scale", "model");
  ASSERT_NE(scale, nullptr) << "embeddings are scaled by sqrt(hidden_size)";
  EXPECT_EQ(scale->attr_float("factor"), 8.0);
  const graph::Node* cap = find_op(g, "softcap", "");
  ASSERT_NE(cap, nullptr) << "final logit soft-cap";
  EXPECT_EQ(cap->attr_float("cap"), 10.0);
  int norms = 0;
  for (const graph::Node& n : g.nodes()) {
    if (n.op == "rms_norm") {
      ++norms;
      EXPECT_EQ(n.attr_float("weight_offset"), 1.0) << n.scope;
    }
    if (n.op != "attention") continue;
    const int64_t layer = n.attr_int("layer");
    EXPECT_EQ(n.attr_int("sliding_window"), layer % 2 == 0 ? 16 : 0) << "layer " << layer;
    EXPECT_EQ(n.attr_float("softcap"), 5.0);
    EXPECT_DOUBLE_EQ(n.attr_float("scale"), 1.0 / std::sqrt(24.0));
  }
  EXPECT_EQ(norms, 4 * 4 + 1);
  ASSERT_NE(find_op(g, "gelu", "model.layers.0.mlp.act_fn"), nullptr);
  EXPECT_EQ(find_op(g, "gelu", "model.layers.0.mlp.act_fn")->attr_str("approximate"), "tanh");
  EXPECT_EQ(model->parameters().count("lm_head.weight"), 0u) << "tied to model.embed_tokens.weight";
}

TEST_F(Gemma2Config, AbsentFieldsTakeGemma2ConfigDefaults) {
  for (const char* k : {"query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping",
                        "hidden_activation", "sliding_window", "layer_types"})
    config_.erase(k);
  config_["hidden_act"] = "silu";  // ignored: Gemma2MLP reads hidden_activation
  auto model = load().value();
  const graph::Graph& g = *model->step_graph();
  EXPECT_EQ(find_op(g, "softcap", "")->attr_float("cap"), 30.0);
  EXPECT_EQ(find_op(g, "gelu", "model.layers.1.mlp.act_fn")->attr_str("approximate"), "tanh");
  EXPECT_EQ(model->config().hidden_act, "gelu_pytorch_tanh");
  for (const graph::Node& n : g.nodes()) {
    if (n.op != "attention") continue;
    EXPECT_EQ(n.attr_int("sliding_window"), n.attr_int("layer") % 2 == 0 ? 4096 : 0);
    EXPECT_EQ(n.attr_float("softcap"), 50.0);
    EXPECT_DOUBLE_EQ(n.attr_float("scale"), 1.0 / 16.0);
  }
}

TEST_F(Gemma2Config, NullSoftCapsAndExplicitLayerTypesSwitchFeaturesOff) {
  config_["attn_logit_softcapping"] = nullptr;
  config_["final_logit_softcapping"] = nullptr;
  config_["layer_types"] = {"full_attention", "full_attention", "sliding_attention", "full_attention"};
  auto model = load().value();
  const graph::Graph& g = *model->step_graph();
  EXPECT_EQ(find_op(g, "softcap", ""), nullptr);
  for (const graph::Node& n : g.nodes()) {
    if (n.op != "attention") continue;
    EXPECT_EQ(n.attr_float("softcap"), 0.0);
    EXPECT_EQ(n.attr_int("sliding_window"), n.attr_int("layer") == 2 ? 16 : 0);
  }
}

TEST_F(Gemma2Config, UnsupportedOrBadFieldsAreNamed) {
  const nlohmann::json good = config_;
  config_["hidden_activation"] = "relu";
  expect_error(ErrorCode::kUnsupported, "hidden_activation 'relu'");
  config_ = good;
  config_["use_bidirectional_attention"] = true;
  expect_error(ErrorCode::kUnsupported, "use_bidirectional_attention");
  config_ = good;
  config_["attn_logit_softcapping"] = -1.0;
  expect_error(ErrorCode::kInvalidArgument, "attn_logit_softcapping");
  config_ = good;
  config_["final_logit_softcapping"] = "big";
  expect_error(ErrorCode::kParseError, "final_logit_softcapping");
  config_ = good;
  config_["query_pre_attn_scalar"] = 0;
  expect_error(ErrorCode::kInvalidArgument, "query_pre_attn_scalar");
  config_ = good;
  config_["sliding_window"] = nullptr;
  expect_error(ErrorCode::kInvalidArgument, "sliding_window is null");
  config_ = good;
  config_["layer_types"] = {"full_attention", "local", "full_attention", "full_attention"};
  expect_error(ErrorCode::kInvalidArgument, "layer_types entry 1");
  config_ = good;
  config_["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  expect_error(ErrorCode::kUnsupported, "rope scaling 'linear'");
}

}  // namespace
}  // namespace loom
