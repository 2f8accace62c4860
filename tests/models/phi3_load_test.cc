// Phi3ForCausalLM stores q/k/v and gate/up fused; the load plan splits them
// (unevenly under GQA) into loom's q/k/v and gate/up parameters, and bad
// checkpoints fail before any tensor byte is read, naming the tensor.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "loom/io/checkpoint.h"
#include "loom/io/safetensors_writer.h"
#include "loom/models/model.h"
#include "models/models_test_util.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using models_test::fixture;

// Row block [r0, r0 + rows) of a checkpoint tensor equals `param` byte for byte.
void expect_rows(const Tensor& fused, int64_t r0, const Tensor& param, const std::string& what) {
  ASSERT_EQ(param.dim(1), fused.dim(1)) << what;
  ASSERT_LE(r0 + param.dim(0), fused.dim(0)) << what;
  const size_t row_bytes = static_cast<size_t>(fused.dim(1)) * dtype_size(fused.dtype());
  EXPECT_EQ(0, std::memcmp(static_cast<const char*>(fused.data()) + r0 * row_bytes, param.data(),
                           static_cast<size_t>(param.dim(0)) * row_bytes))
      << what;
}

TEST(Phi3Load, FusedTensorsSplitIntoModuleParameters) {
  for (const char* variant : {"phi3-f32", "phi3-bf16", "phi3_sliding-f32"}) {
    auto model = models::Model::load(fixture(variant).string()).value();
    const ModelConfig& c = model->config();
    const auto& params = model->parameters();
    EXPECT_EQ(params.count("model.layers.0.self_attn.qkv_proj.weight"), 0u);
    auto ck = Checkpoint::open(fixture(variant).string()).value();
    const int64_t nq = c.num_attention_heads * c.head_dim, nkv = c.num_key_value_heads * c.head_dim;
    ASSERT_NE(nq, nkv) << "the fixture should split unevenly";
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      Tensor qkv = ck.get(p + "self_attn.qkv_proj.weight").value();
      expect_rows(qkv, 0, params.at(p + "self_attn.q_proj.weight"), p + "q");
      expect_rows(qkv, nq, params.at(p + "self_attn.k_proj.weight"), p + "k");
      expect_rows(qkv, nq + nkv, params.at(p + "self_attn.v_proj.weight"), p + "v");
      Tensor gate_up = ck.get(p + "mlp.gate_up_proj.weight").value();
      expect_rows(gate_up, 0, params.at(p + "mlp.gate_proj.weight"), p + "gate");
      expect_rows(gate_up, c.intermediate_size, params.at(p + "mlp.up_proj.weight"), p + "up");
    }
    size_t converted = 0;
    for (const auto& g : model->weight_plan().groups()) converted += g.identity() ? 0 : 1;
    EXPECT_EQ(converted, static_cast<size_t>(2 * c.num_hidden_layers)) << variant;
    EXPECT_EQ(model->module().class_name(), "Phi3ForCausalLM");
  }
  auto sliding = models::Model::load(fixture("phi3_sliding-f32").string()).value();
  for (int64_t l = 0; l < sliding->config().num_hidden_layers; ++l)
    EXPECT_TRUE(sliding->config().is_sliding_layer(l)) << "Phi3's sliding_window applies to every layer";
}

class BrokenPhi3 : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("loom_broken_phi3_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(fixture("phi3-f32") / f, dir_ / f);
  }
  void TearDown() override { fs::remove_all(dir_); }
  Status load() { return models::Model::load(dir_.string()).status(); }

  fs::path dir_;
};

TEST_F(BrokenPhi3, WrongFusedShapeNamesTheTensorAndRule) {
  NamedTensors tensors;
  {
    auto ck = Checkpoint::open(dir_.string()).value();
    for (const auto& name : ck.names()) tensors.emplace_back(name, ck.get(name).value().clone());
  }
  for (auto& [name, t] : tensors)
    if (name == "model.layers.1.self_attn.qkv_proj.weight") t = Tensor::zeros(DType::kF32, {t.dim(0) - 4, t.dim(1)});
  ASSERT_TRUE(write_safetensors((dir_ / "model.safetensors").string(), tensors).ok());
  Status s = load();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("model.layers.1.self_attn.qkv_proj.weight"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("qkv_proj"), std::string::npos) << s.message();
}

TEST_F(BrokenPhi3, MissingFusedTensorIsNamed) {
  NamedTensors tensors;
  {
    auto ck = Checkpoint::open(dir_.string()).value();
    for (const auto& name : ck.names())
      if (name != "model.layers.0.mlp.gate_up_proj.weight") tensors.emplace_back(name, ck.get(name).value().clone());
  }
  ASSERT_TRUE(write_safetensors((dir_ / "model.safetensors").string(), tensors).ok());
  Status s = load();
  EXPECT_EQ(s.code(), ErrorCode::kNotFound) << s.to_string();
  EXPECT_NE(s.message().find("model.layers.0.mlp.gate_proj.weight"), std::string::npos) << s.message();
}

TEST_F(BrokenPhi3, Phi3ConfigDefaultsApplyWhenFieldsAreAbsent) {
  nlohmann::json j;
  {
    std::ifstream in(dir_ / "config.json");
    j = nlohmann::json::parse(in);
  }
  // Phi3Config: tie_word_embeddings false (PretrainedConfig would say true), rms_norm_eps 1e-5.
  j.erase("tie_word_embeddings");
  j.erase("rms_norm_eps");
  j["rms_norm_eps"] = nullptr;
  std::ofstream(dir_ / "config.json") << j.dump(1);
  auto model = models::Model::load(dir_.string()).value();
  EXPECT_FALSE(model->config().tie_word_embeddings);
  EXPECT_FALSE(model->module().settings().tie_word_embeddings);
  EXPECT_DOUBLE_EQ(model->config().rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(model->module().settings().norm_eps, 1e-5);
  EXPECT_EQ(model->parameters().count("lm_head.weight"), 1u);
}

TEST_F(BrokenPhi3, AttentionBiasIsRejected) {
  nlohmann::json j;
  {
    std::ifstream in(dir_ / "config.json");
    j = nlohmann::json::parse(in);
  }
  j["attention_bias"] = true;
  std::ofstream(dir_ / "config.json") << j.dump(1);
  Status s = load();
  EXPECT_EQ(s.code(), ErrorCode::kUnsupported) << s.to_string();
  EXPECT_NE(s.message().find("attention_bias"), std::string::npos) << s.message();
}

// Phi-3 128k's factors must cover rotary_dim / 2 frequencies (here 3/4 of each head).
TEST_F(BrokenPhi3, LongRopeWithTheWrongFactorCountIsRejectedClearly) {
  nlohmann::json j;
  {
    std::ifstream in(dir_ / "config.json");
    j = nlohmann::json::parse(in);
  }
  const int64_t half = j["hidden_size"].get<int64_t>() / j["num_attention_heads"].get<int64_t>() * 3 / 8;
  j["rope_scaling"] = {{"type", "longrope"},
                       {"short_factor", std::vector<double>(static_cast<size_t>(half + 1), 1.0)},
                       {"long_factor", std::vector<double>(static_cast<size_t>(half + 1), 2.0)}};
  std::ofstream(dir_ / "config.json") << j.dump(1);
  Status s = load();
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("longrope"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(std::to_string(half) + " values"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace loom
