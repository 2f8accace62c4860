// GGUF as a model format: every Llama-family fixture written as GGUF (q/k rows in
// llama.cpp's interleaved order, tied lm_head left out) and loaded back runs the
// same logits as its safetensors checkpoint, bit for bit; quantized GGUF files
// match load-time quantization of the same recipe bit for bit, and stay within
// each type's bound of the f32 logits; broken or unmapped files fail by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>

#include "loom/io/gguf.h"
#include "loom/io/gguf_writer.h"
#include "loom/models/gguf_mapping.h"
#include "loom/models/model.h"
#include "loom/models/save_gguf.h"
#include "loom/weights/quantization_recipe.h"
#include "models/model_run_util.h"

namespace loom::models_test {
namespace {

namespace fs = std::filesystem;

fs::path temp_gguf(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("loom_gguf_model_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir / (name + ".gguf");
}

models::GgufSaveOptions recipe_options(const models::Model& m, const std::string& recipe_name) {
  models::GgufSaveOptions so;
  const QuantizationRecipe recipe = quantization_recipe(recipe_name).value();
  const ModelConfig c = m.config();
  so.file_type = recipe.gguf_file_type;
  so.tensor_type = [recipe, c](const std::string& name, const Tensor& t) -> Result<std::optional<DType>> {
    return recipe.type_for(name, t.shape(), c.num_hidden_layers, c.tie_word_embeddings);
  };
  return so;
}

class GgufRoundTrip : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufRoundTrip, LogitsEqualTheSafetensorsCheckpoint) {
  const std::string name = GetParam();
  auto st = models::Model::load(existing_fixture(name).string()).value();
  const fs::path path = temp_gguf(name);
  ASSERT_TRUE(models::save_gguf(*st, path.string()).ok());

  auto file = io::GgufFile::open(path.string()).value();
  EXPECT_EQ(file->architecture().value(), models::gguf_architecture_for(st->config()).value());
  EXPECT_EQ(file->find("output.weight") == nullptr, st->config().tie_word_embeddings) << name;

  auto gg = models::Model::load(path.string());
  ASSERT_TRUE(gg.ok()) << gg.status().to_string();
  EXPECT_EQ(gg.value()->config().num_hidden_layers, st->config().num_hidden_layers);
  EXPECT_EQ(gg.value()->config().num_key_value_heads, st->config().num_key_value_heads);
  for (const auto& [pname, t] : st->parameters()) {
    auto it = gg.value()->parameters().find(pname);
    ASSERT_NE(it, gg.value()->parameters().end()) << pname;
    EXPECT_EQ(it->second.shape(), t.shape()) << pname;
  }
  const std::vector<int32_t> prompt = prompt_of(name);
  const std::vector<float> want = logits_of(st, prompt), got = logits_of(gg.value(), prompt);
  ASSERT_EQ(got.size(), want.size());
  // Norms are stored as F32 (bf16 → f32 is exact) and every matrix as it was, so
  // the same kernels see the same numbers.
  EXPECT_EQ(logits_diff(got, want).max_abs, 0.0) << name;
  EXPECT_EQ(greedy_of(gg.value(), prompt), greedy_of(st, prompt)) << name;
  fs::remove(path);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GgufRoundTrip,
                         ::testing::Values("llama-f32", "llama-bf16", "llama_mha_untied-f32", "llama_bias-f32",
                                           "llama_kv1_headdim-f32", "llama_rope_linear-f32", "llama_rope_llama3-f32", "qwen2-f32", "qwen2-bf16",
                                           "qwen3-f32", "qwen3-bf16", "phi3-f32", "phi3_sliding-f32", "phi3_longrope-f32",
                                           "mixtral-f32", "mixtral-bf16", "qwen2_moe-f32", "qwen3_moe-f32", "qwen3_moe-bf16",
                                           "gemma2-f32", "gemma2-bf16", "gemma3-f32", "gemma3-bf16", "gpt_oss-f32",
                                           "gpt_oss-bf16", "gpt_oss_mxfp4-f32"));

// llama.cpp's gpt-oss: attn_sinks, post_attention_norm, the biased router and
// experts (the gate_up bias split into ffn_gate_exps.bias / ffn_up_exps.bias),
// MXFP4 experts kept as the checkpoint's blocks, the window and expert width as
// keys; a file without loom's truncate key reads as llama.cpp runs YaRN.
TEST(GgufModel, GptOssFollowsLlamaCppsGptOss) {
  auto st = models::Model::load(existing_fixture("gpt_oss_mxfp4-f32").string()).value();
  const fs::path path = temp_gguf("gpt_oss_layout");
  ASSERT_TRUE(models::save_gguf(*st, path.string()).ok());
  auto file = io::GgufFile::open(path.string()).value();
  EXPECT_EQ(file->architecture().value(), "gpt-oss");
  EXPECT_EQ(file->find_value("gpt-oss.expert_count")->as_int("n").value(), 4);
  EXPECT_EQ(file->find_value("gpt-oss.expert_used_count")->as_int("n").value(), 2);
  EXPECT_EQ(file->find_value("gpt-oss.expert_feed_forward_length")->as_int("n").value(), 96);
  EXPECT_EQ(file->find_value("gpt-oss.attention.sliding_window")->as_int("n").value(), 16);
  EXPECT_EQ(file->find_value("gpt-oss.rope.scaling.type")->as_string("t").value(), "yarn");
  EXPECT_FALSE(file->find_value("loom.rope.scaling.yarn_truncate")->as_bool("t").value());
  for (const char* name : {"blk.1.attn_sinks.weight", "blk.1.post_attention_norm.weight", "blk.1.ffn_gate_inp.weight",
                           "blk.1.ffn_gate_inp.bias", "blk.1.ffn_gate_exps.bias", "blk.1.ffn_up_exps.bias",
                           "blk.1.ffn_down_exps.bias", "blk.1.attn_q.bias", "blk.1.attn_output.bias"})
    EXPECT_NE(file->find(name), nullptr) << name;
  EXPECT_EQ(file->find("blk.1.ffn_norm.weight"), nullptr);
  const Tensor up = file->get("blk.1.ffn_up_exps.weight").value();
  EXPECT_EQ(up.dtype(), DType::kMXFP4);
  EXPECT_EQ(up.shape(), (Shape{4, 96, 64}));
  // Expert 3's up rows are rows [96, 192) of loom's gate_up_proj, the same MXFP4 bytes.
  const Tensor gu = st->parameters().at("model.layers.1.mlp.experts.gate_up_proj");
  const Tensor mine = gu.slice_rows(3, 4).reshape({192, 64}).slice_rows(96, 192);
  const Tensor theirs = up.slice_rows(3, 4).reshape({96, 64});
  ASSERT_EQ(mine.nbytes(), theirs.nbytes());
  EXPECT_EQ(0, std::memcmp(mine.data(), theirs.data(), mine.nbytes()));
  EXPECT_EQ(file->get("blk.1.ffn_up_exps.bias").value().shape(), (Shape{4, 96}));
  EXPECT_EQ(file->get("blk.1.ffn_down_exps.bias").value().dtype(), DType::kF32);

  const nlohmann::json c = models::config_json_from_gguf(*file).value();
  EXPECT_EQ(c.at("model_type"), "gpt_oss");
  EXPECT_EQ(c.at("num_local_experts"), 4);
  EXPECT_EQ(c.at("intermediate_size"), 96);
  EXPECT_EQ(c.at("layer_types"), nlohmann::json({"sliding_attention", "full_attention", "sliding_attention",
                                                  "full_attention"}));
  EXPECT_EQ(c.at("rope_scaling").at("truncate"), false);
  fs::remove(path);

  // Only llama.cpp's SwiGLU constants and window pattern have a GGUF form.
  ModelConfig limit = st->config();
  limit.raw["swiglu_limit"] = 6.0;
  const auto refused = models::gguf_metadata_for(limit);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("swiglu_limit"), std::string::npos) << refused.status().to_string();
  ModelConfig all_full = st->config();
  all_full.layer_types.assign(4, "full_attention");
  EXPECT_FALSE(models::gguf_metadata_for(all_full).ok());
}

// llama.cpp's qwen3moe: the expert width under expert_feed_forward_length, the
// router and stacked experts under llama.cpp's names; it makes every layer sparse
// and renormalises the top-k weights, so a Qwen3-MoE that does neither has no
// GGUF form (it would run differently there) and is refused by name.
TEST(GgufModel, Qwen3MoeFollowsLlamaCppsQwen3moe) {
  auto st = models::Model::load(existing_fixture("qwen3_moe-f32").string()).value();
  const fs::path path = temp_gguf("qwen3_moe_layout");
  ASSERT_TRUE(models::save_gguf(*st, path.string()).ok());
  auto file = io::GgufFile::open(path.string()).value();
  EXPECT_EQ(file->architecture().value(), "qwen3moe");
  EXPECT_EQ(file->find_value("qwen3moe.expert_count")->as_int("n").value(), 8);
  EXPECT_EQ(file->find_value("qwen3moe.expert_used_count")->as_int("n").value(), 3);
  EXPECT_EQ(file->find_value("qwen3moe.expert_feed_forward_length")->as_int("n").value(), 256);
  for (const char* name : {"blk.1.ffn_gate_inp.weight", "blk.1.ffn_gate_exps.weight", "blk.1.ffn_up_exps.weight",
                           "blk.1.ffn_down_exps.weight", "blk.1.attn_q_norm.weight", "blk.1.attn_k_norm.weight"})
    EXPECT_NE(file->find(name), nullptr) << name;
  // Expert 5's up_proj is rows [256, 512) of its gate_up_proj, and ffn_up_exps[5] in the file.
  const Tensor gu = st->parameters().at("model.layers.1.mlp.experts.gate_up_proj");
  const Tensor up = file->get("blk.1.ffn_up_exps.weight").value();
  EXPECT_EQ(up.shape(), (Shape{8, 256, 256}));
  EXPECT_EQ(up.slice_rows(5, 6).to_f32_vector(), gu.slice_rows(5, 6).reshape({512, 256}).slice_rows(256, 512).to_f32_vector());
  const nlohmann::json c = models::config_json_from_gguf(*file).value();
  EXPECT_EQ(c.at("model_type"), "qwen3_moe");
  EXPECT_EQ(c.at("moe_intermediate_size"), 256);
  EXPECT_EQ(c.at("norm_topk_prob"), true);
  EXPECT_EQ(c.at("mlp_only_layers"), nlohmann::json::array());
  fs::remove(path);

  auto dense = models::Model::load(existing_fixture("qwen3_moe_dense_layers-f32").string()).value();
  const Status refused = models::save_gguf(*dense, temp_gguf("qwen3_moe_dense").string());
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("norm_topk_prob"), std::string::npos) << refused.to_string();
  ModelConfig renormalised = dense->config();
  renormalised.raw["norm_topk_prob"] = true;
  const auto dense_layers = models::gguf_metadata_for(renormalised);
  ASSERT_FALSE(dense_layers.ok());
  EXPECT_NE(dense_layers.status().message().find("mlp_only_layers"), std::string::npos) << dense_layers.status().to_string();
}

// llama.cpp multiplies by Gemma's norm weights as stored, so its files hold 1 + w
// (convert_hf_to_gguf adds 1); its attention scale comes from the layer count,
// and loom keeps Transformers' query_pre_attn_scalar beside it.
TEST(GgufModel, Gemma2NormsAreStoredPlusOneAndTheQueryScalarSurvives) {
  auto st = models::Model::load(existing_fixture("gemma2-f32").string()).value();
  const fs::path path = temp_gguf("gemma2_layout");
  ASSERT_TRUE(models::save_gguf(*st, path.string()).ok());
  auto file = io::GgufFile::open(path.string()).value();
  const std::vector<float> w = st->parameters().at("model.layers.1.pre_feedforward_layernorm.weight").to_f32_vector();
  const std::vector<float> stored = file->get("blk.1.ffn_norm.weight").value().to_f32_vector();
  ASSERT_EQ(stored.size(), w.size());
  for (size_t i = 0; i < w.size(); ++i) EXPECT_EQ(stored[i], w[i] + 1.0f) << i;
  ASSERT_NE(file->find("blk.0.post_ffw_norm.weight"), nullptr);
  ASSERT_NE(file->find("blk.0.post_attention_norm.weight"), nullptr);
  EXPECT_EQ(file->find_value("gemma2.attention.sliding_window")->as_int("w").value(), 16);
  EXPECT_FLOAT_EQ(static_cast<float>(file->find_value("gemma2.attn_logit_softcapping")->as_double("c").value()), 5.0f);

  // Without loom's key (a file from llama.cpp's converter), the scale follows
  // llama.cpp's rule: head_dim for every Gemma2 size but the 46-layer one.
  io::GgufMetadata md;
  for (const auto& kv : file->metadata())
    if (kv.first != "loom.gemma2.query_pre_attn_scalar") md.push_back(kv);
  io::GgufTensors ts;
  for (const auto& info : file->tensors()) ts.emplace_back(info.name, file->view(info));
  const fs::path plain = temp_gguf("gemma2_llama_cpp");
  ASSERT_TRUE(io::write_gguf(plain.string(), md, ts).ok());
  const nlohmann::json with_key = models::config_json_from_gguf(*file).value();
  const nlohmann::json without = models::config_json_from_gguf(*io::GgufFile::open(plain.string()).value()).value();
  EXPECT_EQ(with_key.at("query_pre_attn_scalar").get<double>(), 24.0);
  EXPECT_EQ(without.at("query_pre_attn_scalar").get<double>(), 32.0);
  EXPECT_EQ(without.at("hidden_activation"), "gelu_pytorch_tanh");
  EXPECT_EQ(without.at("layer_types").at(0), "sliding_attention");
  EXPECT_EQ(without.at("layer_types").at(1), "full_attention");
  fs::remove(path);
  fs::remove(plain);
}

// llama.cpp's gemma3: every norm stored as 1 + w (the per-head q/k norms too),
// the window under attention.sliding_window, the global RoPE base and its linear
// scaling as for any model, the sliding layers' base beside them; its fixed 5:1
// pattern and 10k local base mean other Gemma3s have no GGUF form, refused by name.
TEST(GgufModel, Gemma3FollowsLlamaCppsGemma3) {
  auto st = models::Model::load(existing_fixture("gemma3-f32").string()).value();
  const fs::path path = temp_gguf("gemma3_layout");
  ASSERT_TRUE(models::save_gguf(*st, path.string()).ok());
  auto file = io::GgufFile::open(path.string()).value();
  EXPECT_EQ(file->architecture().value(), "gemma3");
  for (const auto& [param, gguf] : std::map<std::string, std::string>{
           {"model.layers.2.self_attn.q_norm.weight", "blk.2.attn_q_norm.weight"},
           {"model.layers.2.self_attn.k_norm.weight", "blk.2.attn_k_norm.weight"},
           {"model.layers.2.pre_feedforward_layernorm.weight", "blk.2.ffn_norm.weight"},
           {"model.layers.2.post_feedforward_layernorm.weight", "blk.2.post_ffw_norm.weight"}}) {
    const std::vector<float> w = st->parameters().at(param).to_f32_vector();
    const std::vector<float> stored = file->get(gguf).value().to_f32_vector();
    ASSERT_EQ(stored.size(), w.size()) << gguf;
    for (size_t i = 0; i < w.size(); ++i) ASSERT_EQ(stored[i], w[i] + 1.0f) << gguf << " " << i;
  }
  EXPECT_EQ(file->find_value("gemma3.attention.sliding_window")->as_int("w").value(), 16);
  EXPECT_EQ(file->find_value("gemma3.rope.freq_base")->as_double("b").value(), 1e6);
  EXPECT_EQ(file->find_value("gemma3.rope.freq_base_swa")->as_double("b").value(), 1e4);
  EXPECT_EQ(file->find_value("gemma3.rope.scaling.type")->as_string("t").value(), "linear");
  EXPECT_EQ(file->find_value("gemma3.rope.scaling.factor")->as_double("f").value(), 2.0);
  EXPECT_EQ(file->find_value("gemma3.final_logit_softcapping"), nullptr);
  const nlohmann::json c = models::config_json_from_gguf(*file).value();
  EXPECT_EQ(c.at("model_type"), "gemma3_text");
  EXPECT_EQ(c.at("query_pre_attn_scalar").get<double>(), 32.0);
  EXPECT_EQ(c.at("rope_local_base_freq").get<double>(), 1e4);
  EXPECT_EQ(c.at("layer_types").at(4), "sliding_attention");
  EXPECT_EQ(c.at("layer_types").at(5), "full_attention");
  fs::remove(path);

  // gemma3_mm: layer 1 full, layer 5 absent; llama.cpp would slide layer 1.
  auto mm = models::Model::load(existing_fixture("gemma3_mm-f32").string()).value();
  const Status pattern = models::save_gguf(*mm, temp_gguf("gemma3_mm").string());
  ASSERT_FALSE(pattern.ok());
  EXPECT_NE(pattern.message().find("every sixth layer"), std::string::npos) << pattern.to_string();
  ModelConfig local = st->config();
  local.raw["rope_local_base_freq"] = 100.0;
  const auto refused = models::gguf_metadata_for(local);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("rope_local_base_freq"), std::string::npos) << refused.status().to_string();
}

// llama.cpp's rows differ from Transformers' for q/k only in the Llama family:
// the file must hold them interleaved, not as loaded.
TEST(GgufModel, LlamaQueryRowsAreStoredInterleaved) {
  auto st = models::Model::load(existing_fixture("llama-f32").string()).value();
  const fs::path path = temp_gguf("llama_rows");
  ASSERT_TRUE(models::save_gguf(*st, path.string()).ok());
  auto file = io::GgufFile::open(path.string()).value();
  const Tensor stored = file->get("blk.0.attn_q.weight").value();
  const Tensor loaded = st->parameters().at("model.layers.0.self_attn.q_proj.weight");
  const int64_t hd = st->config().head_dim, cols = loaded.dim(1);
  const float* s = stored.data_as<float>();
  const float* l = loaded.data_as<float>();
  // Interleaved row 2i+j of head 0 is half-split row j*hd/2 + i.
  for (int64_t i = 0; i < hd / 2; ++i)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t k = 0; k < cols; ++k)
        ASSERT_EQ(s[(2 * i + j) * cols + k], l[(j * hd / 2 + i) * cols + k]) << "row " << 2 * i + j;
  fs::remove(path);
}

// A Llama 3 file from llama.cpp's converter has only the rope divisors
// (rope_freqs.weight), not loom's copy of the parameters: they are recovered
// from the divisors, and the logits stay those of the checkpoint.
TEST(GgufModel, Llama3RopeScalingIsRecoveredFromRopeFreqs) {
  const std::string name = "llama_rope_llama3-f32";
  auto st = models::Model::load(existing_fixture(name).string()).value();
  const fs::path full = temp_gguf("llama3_full"), bare = temp_gguf("llama3_bare");
  ASSERT_TRUE(models::save_gguf(*st, full.string()).ok());
  auto file = io::GgufFile::open(full.string()).value();
  ASSERT_NE(file->find("rope_freqs.weight"), nullptr);
  io::GgufMetadata md;
  for (const auto& kv : file->metadata())
    if (kv.first.rfind("loom.", 0) != 0) md.push_back(kv);
  ASSERT_LT(md.size(), file->metadata().size()) << "loom's own rope keys were expected in the file";
  io::GgufTensors ts;
  for (const auto& t : file->tensors()) ts.emplace_back(t.name, file->view(t));
  ASSERT_TRUE(io::write_gguf(bare.string(), md, ts).ok());
  auto gg = models::Model::load(bare.string());
  ASSERT_TRUE(gg.ok()) << gg.status().to_string();
  EXPECT_EQ(gg.value()->config().rope_scaling.rope_type, "llama3");
  const std::vector<int32_t> prompt = prompt_of(name);
  const LogitsDiff d = logits_diff(logits_of(gg.value(), prompt), logits_of(st, prompt));
  EXPECT_LE(d.max_abs, 1e-3) << "rope parameters recovered from rope_freqs.weight";
  fs::remove(full);
  fs::remove(bare);
}

struct QuantCase {
  const char* recipe;
  double max_nmse;  // of the bundled model's logits vs its f32 logits
};

class GgufQuantized : public ::testing::TestWithParam<QuantCase> {};

// Quantizing while writing and loading back, or quantizing at load, run the same
// blocks: the logits agree bit for bit. On the bundled (trained) model they stay
// within each type's bound of the f32 logits, with the same argmax everywhere
// (random fixtures amplify weight error ~100× and say little about a real model).
TEST_P(GgufQuantized, MatchesLoadTimeQuantizationAndStaysNearF32) {
  const QuantCase qc = GetParam();
  const std::string dir = std::string(LOOM_SOURCE_DIR) + "/models/loom-kjv-tiny";
  auto st = models::Model::load(dir).value();
  const fs::path path = temp_gguf(std::string("kjv_") + qc.recipe);
  ASSERT_TRUE(models::save_gguf(*st, path.string(), recipe_options(*st, qc.recipe)).ok());
  auto file = io::GgufFile::open(path.string()).value();
  const QuantizationRecipe recipe = quantization_recipe(qc.recipe).value();
  int quantized = 0;
  for (const auto& t : file->tensors()) quantized += dtype_is_quantized(t.dtype) ? 1 : 0;
  EXPECT_GE(quantized, 1 + 6 * st->config().num_hidden_layers) << qc.recipe << ": q/k/v/o/gate/up and the output";

  auto gg = models::Model::load(path.string()).value();
  models::LoadOptions lo;
  lo.quantize = recipe;
  auto at_load = models::Model::load(dir, lo).value();
  for (const auto& [pname, t] : at_load->parameters())
    EXPECT_EQ(gg->parameters().at(pname).dtype(), t.dtype()) << pname;
  // "In the beginning God created the heaven and the earth." with BOS (loom tokenize).
  const std::vector<int32_t> prompt = {4090, 1130, 258, 2081, 386, 3355, 258, 733, 267, 258, 616, 46};
  const std::vector<float> f32 = logits_of(st, prompt), from_file = logits_of(gg, prompt),
                           loaded = logits_of(at_load, prompt);
  EXPECT_EQ(logits_diff(from_file, loaded).max_abs, 0.0) << qc.recipe;
  const LogitsDiff d = logits_diff(from_file, f32);
  std::printf("%-7s logits vs f32: NMSE %.3g, max |Δ| %.3g\n", qc.recipe, d.nmse, d.max_abs);
  EXPECT_LE(d.nmse, qc.max_nmse) << qc.recipe;
  EXPECT_GT(d.max_abs, 0.0) << qc.recipe << ": quantized logits equal f32 exactly, so nothing was quantized";
  // The most likely next token stays the same almost everywhere (near-ties may flip).
  const int64_t vocab = st->vocab_size();
  const size_t rows = f32.size() / static_cast<size_t>(vocab);
  size_t same = 0;
  for (size_t row = 0; row < rows; ++row) {
    auto argmax = [&](const std::vector<float>& l) {
      return std::max_element(l.begin() + row * vocab, l.begin() + (row + 1) * vocab) - (l.begin() + row * vocab);
    };
    same += argmax(from_file) == argmax(f32) ? 1 : 0;
  }
  EXPECT_GE(same * 10, rows * 9) << qc.recipe << ": argmax agrees on " << same << " of " << rows << " rows";
  fs::remove(path);
}

INSTANTIATE_TEST_SUITE_P(Recipes, GgufQuantized,
                         ::testing::Values(QuantCase{"q8_0", 1e-4}, QuantCase{"q6_k", 5e-4}, QuantCase{"q5_k_m", 1e-3},
                                           QuantCase{"q4_k_m", 2e-3}, QuantCase{"q4_0", 3e-3}),
                         [](const auto& info) { return std::string(info.param.recipe); });

// A quantized random fixture: the GGUF file and load-time quantization still agree
// bit for bit (the rows llama.cpp stores interleaved are whole blocks too).
TEST(GgufModel, QuantizedFixtureFileEqualsLoadTimeQuantization) {
  const std::string name = "llama_mha_untied-f32";
  auto st = models::Model::load(existing_fixture(name).string()).value();
  const fs::path path = temp_gguf("fixture_q4_0");
  ASSERT_TRUE(models::save_gguf(*st, path.string(), recipe_options(*st, "q4_0")).ok());
  models::LoadOptions lo;
  lo.quantize = quantization_recipe("q4_0").value();
  const std::vector<int32_t> prompt = prompt_of(name);
  EXPECT_EQ(logits_diff(logits_of(models::Model::load(path.string()).value(), prompt),
                        logits_of(models::Model::load(existing_fixture(name).string(), lo).value(), prompt))
                .max_abs,
            0.0);
  fs::remove(path);
}

// Stacked experts quantize like the matrices they stack (llama.cpp's ffn_*_exps,
// down with more bits where the _m mix says), the router stays as it was; the
// file and load-time quantization run the same blocks (the moe kernel against its
// reference on quantized experts: tests/runtime/moe_test.cc).
TEST(GgufModel, Qwen3MoeQuantizedExperts) {
  const std::string name = "qwen3_moe-f32";
  auto st = models::Model::load(existing_fixture(name).string()).value();
  const std::vector<int32_t> prompt = prompt_of(name);
  for (const char* recipe : {"q8_0", "q4_k_m"}) {
    SCOPED_TRACE(recipe);
    const fs::path path = temp_gguf(std::string("qwen3_moe_") + recipe);
    ASSERT_TRUE(models::save_gguf(*st, path.string(), recipe_options(*st, recipe)).ok());
    auto file = io::GgufFile::open(path.string()).value();
    const bool q8 = std::string(recipe) == "q8_0";
    EXPECT_EQ(file->get("blk.1.ffn_gate_exps.weight").value().dtype(), q8 ? DType::kQ8_0 : DType::kQ4_K);
    EXPECT_EQ(file->get("blk.1.ffn_up_exps.weight").value().dtype(), q8 ? DType::kQ8_0 : DType::kQ4_K);
    EXPECT_EQ(file->get("blk.0.ffn_down_exps.weight").value().dtype(), q8 ? DType::kQ8_0 : DType::kQ4_K);
    EXPECT_EQ(file->get("blk.1.ffn_down_exps.weight").value().dtype(), q8 ? DType::kQ8_0 : DType::kQ6_K);  // use_more_bits(1, 2)
    EXPECT_EQ(file->get("blk.1.ffn_gate_inp.weight").value().dtype(), DType::kF32);
    auto gg = models::Model::load(path.string()).value();
    models::LoadOptions lo;
    lo.quantize = quantization_recipe(recipe).value();
    auto at_load = models::Model::load(existing_fixture(name).string(), lo).value();
    EXPECT_EQ(at_load->parameters().at("model.layers.1.mlp.experts.gate_up_proj").dtype(), q8 ? DType::kQ8_0 : DType::kQ4_K);
    const std::vector<float> from_file = logits_of(gg, prompt);
    EXPECT_EQ(logits_diff(from_file, logits_of(at_load, prompt)).max_abs, 0.0);
    EXPECT_GT(logits_diff(from_file, logits_of(st, prompt)).max_abs, 0.0) << "nothing was quantized";
    fs::remove(path);
  }
}

TEST(GgufModel, RecipesFollowLlamaCppMixRules) {
  const QuantizationRecipe q4km = quantization_recipe("q4_k_m").value();
  const int64_t layers = 16;
  // use_more_bits: first and last eighth, and every third layer between.
  EXPECT_EQ(q4km.type_for("model.layers.0.mlp.down_proj.weight", {2048, 8192}, layers, false), DType::kQ6_K);
  EXPECT_EQ(q4km.type_for("model.layers.15.self_attn.v_proj.weight", {512, 2048}, layers, false), DType::kQ6_K);
  EXPECT_EQ(q4km.type_for("model.layers.4.mlp.down_proj.weight", {2048, 8192}, layers, false), DType::kQ6_K);
  EXPECT_EQ(q4km.type_for("model.layers.3.mlp.down_proj.weight", {2048, 8192}, layers, false), DType::kQ4_K);
  EXPECT_EQ(q4km.type_for("model.layers.3.mlp.up_proj.weight", {8192, 2048}, layers, false), DType::kQ4_K);
  EXPECT_EQ(q4km.type_for("lm_head.weight", {128256, 2048}, layers, false), DType::kQ6_K);
  EXPECT_EQ(q4km.type_for("model.embed_tokens.weight", {128256, 2048}, layers, true), DType::kQ6_K);
  EXPECT_EQ(q4km.type_for("model.embed_tokens.weight", {128256, 2048}, layers, false), DType::kQ4_K);
  EXPECT_EQ(q4km.type_for("model.norm.weight", {2048}, layers, false), std::nullopt);
  // MoE: routers stay; stacked experts quantize as their matrices, down_proj with ffn_down's mix.
  EXPECT_EQ(q4km.type_for("model.layers.3.mlp.gate.weight", {128, 2048}, layers, false), std::nullopt);
  EXPECT_EQ(q4km.type_for("model.layers.3.mlp.shared_expert_gate.weight", {1, 2048}, layers, false), std::nullopt);
  EXPECT_EQ(q4km.type_for("model.layers.3.mlp.experts.gate_up_proj", {128, 1536, 2048}, layers, false), DType::kQ4_K);
  EXPECT_EQ(q4km.type_for("model.layers.3.mlp.experts.down_proj", {128, 2048, 768}, layers, false), DType::kQ4_K);
  EXPECT_EQ(q4km.type_for("model.layers.4.mlp.experts.down_proj", {128, 2048, 768}, layers, false), DType::kQ6_K);
  EXPECT_EQ(q4km.type_for("model.layers.3.mlp.experts.down_proj", {8, 64, 96}, layers, false), DType::kQ8_0);
  EXPECT_EQ(q4km.type_for("model.layers.3.self_attn.q_proj.weight", {2, 64, 48}, layers, false), std::nullopt);
  // Rows that are not whole 256-blocks fall back to Q8_0; not whole 32-blocks, unchanged.
  EXPECT_EQ(q4km.type_for("model.layers.3.mlp.up_proj.weight", {352, 128}, layers, false), DType::kQ8_0);
  EXPECT_EQ(q4km.type_for("model.layers.3.mlp.up_proj.weight", {352, 100}, layers, false), std::nullopt);
  EXPECT_EQ(quantization_recipe("q8_0").value().type_for("lm_head.weight", {4096, 256}, layers, false), DType::kQ8_0);
  EXPECT_EQ(quantization_recipe("q4_0").value().type_for("lm_head.weight", {4096, 256}, layers, false), DType::kQ6_K);
  const auto bad = quantization_recipe("q3_k");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("q4_k_m"), std::string::npos) << bad.status().to_string();
}

TEST(GgufModel, UnmappedArchitectureAndMissingKeysAreNamed) {
  const fs::path path = temp_gguf("unmapped");
  io::GgufMetadata md = {{"general.architecture", io::GgufValue::string("mamba")}};
  io::GgufTensors ts = {{"token_embd.weight", Tensor::zeros(DType::kF32, {8, 32})}};
  ASSERT_TRUE(io::write_gguf(path.string(), md, ts).ok());
  auto r = models::Model::load(path.string());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("mamba"), std::string::npos) << r.status().to_string();

  md = {{"general.architecture", io::GgufValue::string("llama")}, {"llama.block_count", io::GgufValue::u32(1)}};
  ASSERT_TRUE(io::write_gguf(path.string(), md, ts).ok());
  r = models::Model::load(path.string());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("llama.embedding_length"), std::string::npos) << r.status().to_string();
  fs::remove(path);
}

TEST(GgufModel, SlidingWindowModelsRefuseToWrite) {
  auto st = models::Model::load(existing_fixture("mistral_sliding-f32").string()).value();
  const Status s = models::save_gguf(*st, temp_gguf("sliding").string());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("sliding"), std::string::npos) << s.to_string();
}

}  // namespace
}  // namespace loom::models_test
