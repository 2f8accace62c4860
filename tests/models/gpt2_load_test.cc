// GPT2LMHeadModel keeps GPT-2's layout in the checkpoint (Conv1D weights
// [in, out], q|k|v fused in c_attn, transformer.h.N names); the load plan maps
// it onto loom's modules, and config.json's GPT-2 field names are understood.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "loom/io/checkpoint.h"
#include "loom/models/model.h"
#include "models/models_test_util.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using models_test::fixture;

// param[r][c] == conv[c][col0 + r]: a Linear weight [out, in] taken from a Conv1D block [in, out].
void expect_transposed_block(const Tensor& conv, int64_t col0, const Tensor& param, const std::string& what) {
  const std::vector<float> a = conv.to_f32_vector(), b = param.to_f32_vector();
  const int64_t in = conv.dim(0), conv_cols = conv.dim(1);
  ASSERT_EQ(param.dim(1), in) << what;
  int64_t bad = 0;
  for (int64_t r = 0; r < param.dim(0); ++r)
    for (int64_t c = 0; c < in; ++c)
      bad += a[static_cast<size_t>(c * conv_cols + col0 + r)] != b[static_cast<size_t>(r * in + c)];
  EXPECT_EQ(bad, 0) << what;
}

TEST(Gpt2Load, ConfigAndConv1DWeightsMapOntoModules) {
  for (const char* variant : {"gpt2-f32", "gpt2-bf16", "gpt2_legacy-f32"}) {
    SCOPED_TRACE(variant);
    auto model = models::Model::load(fixture(variant).string()).value();
    nlohmann::json raw;
    {
      std::ifstream in(fixture(variant) / "config.json");
      raw = nlohmann::json::parse(in);
    }
    const ModelConfig& c = model->config();
    EXPECT_EQ(c.hidden_size, raw["n_embd"].get<int64_t>());
    EXPECT_EQ(c.num_hidden_layers, raw["n_layer"].get<int64_t>());
    EXPECT_EQ(c.num_attention_heads, raw["n_head"].get<int64_t>());
    EXPECT_EQ(c.intermediate_size, raw["n_inner"].get<int64_t>());
    EXPECT_EQ(model->module().class_name(), "GPT2LMHeadModel");
    const auto& p = model->parameters();
    ASSERT_EQ(p.at("model.embed_positions.weight").dim(0), raw["n_positions"].get<int64_t>());

    const std::string pre = std::string(variant).find("legacy") != std::string::npos ? "" : "transformer.";
    auto ck = Checkpoint::open(fixture(variant).string()).value();
    const int64_t h = c.hidden_size;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      const std::string src = pre + "h." + std::to_string(l) + ".", dst = "model.layers." + std::to_string(l) + ".";
      Tensor c_attn = ck.get(src + "attn.c_attn.weight").value();
      expect_transposed_block(c_attn, 0, p.at(dst + "self_attn.q_proj.weight"), dst + "q");
      expect_transposed_block(c_attn, h, p.at(dst + "self_attn.k_proj.weight"), dst + "k");
      expect_transposed_block(c_attn, 2 * h, p.at(dst + "self_attn.v_proj.weight"), dst + "v");
      expect_transposed_block(ck.get(src + "attn.c_proj.weight").value(), 0, p.at(dst + "self_attn.o_proj.weight"), "o");
      expect_transposed_block(ck.get(src + "mlp.c_fc.weight").value(), 0, p.at(dst + "mlp.up_proj.weight"), "fc");
      expect_transposed_block(ck.get(src + "mlp.c_proj.weight").value(), 0, p.at(dst + "mlp.down_proj.weight"), "proj");
      const std::vector<float> bias = ck.get(src + "attn.c_attn.bias").value().to_f32_vector();
      const std::vector<float> vb = p.at(dst + "self_attn.v_proj.bias").to_f32_vector();
      ASSERT_EQ(vb.size(), static_cast<size_t>(h));
      EXPECT_TRUE(std::equal(vb.begin(), vb.end(), bias.begin() + 2 * h));
      EXPECT_EQ(p.count(dst + "input_layernorm.bias"), 1u);
    }
  }
}

class BrokenGpt2 : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("loom_broken_gpt2_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(fixture("gpt2-f32") / f, dir_ / f);
    std::ifstream in(dir_ / "config.json");
    config_ = nlohmann::json::parse(in);
  }
  void TearDown() override { fs::remove_all(dir_); }
  Status load_with(const nlohmann::json& j) {
    std::ofstream(dir_ / "config.json") << j.dump(1);
    return models::Model::load(dir_.string()).status();
  }

  fs::path dir_;
  nlohmann::json config_;
};

TEST_F(BrokenGpt2, UnsupportedOptionsAreNamed) {
  auto j = config_;
  j["scale_attn_by_inverse_layer_idx"] = true;
  Status s = load_with(j);
  EXPECT_EQ(s.code(), ErrorCode::kUnsupported);
  EXPECT_NE(s.message().find("scale_attn_by_inverse_layer_idx"), std::string::npos) << s.message();
  j = config_;
  j["activation_function"] = "relu";
  s = load_with(j);
  EXPECT_EQ(s.code(), ErrorCode::kUnsupported);
  EXPECT_NE(s.message().find("relu"), std::string::npos) << s.message();
}

TEST_F(BrokenGpt2, WrongEmbeddingWidthNamesTheFusedTensor) {
  auto j = config_;
  j["n_embd"] = j["n_embd"].get<int64_t>() + j["n_head"].get<int64_t>();  // still divisible by n_head
  Status s = load_with(j);
  EXPECT_FALSE(s.ok());
  // The plan names the tensor by its renamed key and the converter that reads it.
  EXPECT_NE(s.message().find("layers.0.attn.c_attn.weight"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("Chunk"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace loom
