// config.json parsing. Expected defaults are Transformers' (LlamaConfig,
// Qwen2Config, Qwen3Config, MistralConfig and modeling_rope_utils), typed here
// from their source, not from loom's output.
#include <gtest/gtest.h>

#include <cmath>

#include "io/io_test_util.h"
#include "loom/io/model_config.h"

namespace loom {
namespace {

using nlohmann::json;

ModelConfig parse_ok(const json& j) {
  auto c = ModelConfig::from_json(j, "test/config.json");
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? c.value() : ModelConfig{};
}

void expect_error(const json& j, ErrorCode code, const std::vector<std::string>& needles) {
  auto c = ModelConfig::from_json(j, "test/config.json");
  ASSERT_FALSE(c.ok()) << j.dump();
  EXPECT_EQ(c.status().code(), code) << c.status().to_string();
  EXPECT_NE(c.status().message().find("test/config.json"), std::string::npos) << c.status().message();
  for (const std::string& n : needles)
    EXPECT_NE(c.status().message().find(n), std::string::npos) << c.status().message();
}

std::vector<std::string> repeat(const char* s, size_t n) { return std::vector<std::string>(n, s); }

TEST(ModelConfigDefaults, Llama) {
  ModelConfig c = parse_ok({{"model_type", "llama"}});
  EXPECT_EQ(c.vocab_size, 32000);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.intermediate_size, 11008);
  EXPECT_EQ(c.num_hidden_layers, 32);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.num_key_value_heads, 32);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.max_position_embeddings, 2048);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
  EXPECT_DOUBLE_EQ(c.partial_rotary_factor, 1.0);
  EXPECT_EQ(c.rope_scaling.rope_type, "default");
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_EQ(c.hidden_act, "silu");
  EXPECT_FALSE(c.sliding_window.has_value());
  EXPECT_EQ(c.layer_types, repeat("full_attention", 32));
  EXPECT_EQ(c.bos_token_id, std::optional<int64_t>(1));
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{2});
  EXPECT_FALSE(c.pad_token_id.has_value());
  EXPECT_EQ(c.torch_dtype, "");
}

TEST(ModelConfigDefaults, Qwen2) {
  ModelConfig c = parse_ok({{"model_type", "qwen2"}});
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.intermediate_size, 22016);
  EXPECT_EQ(c.num_hidden_layers, 32);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.num_key_value_heads, 32);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.max_position_embeddings, 32768);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.use_sliding_window);
  EXPECT_EQ(c.max_window_layers, 28);
  // sliding_window defaults to 4096 but is nulled when use_sliding_window is false.
  EXPECT_FALSE(c.sliding_window.has_value());
  EXPECT_EQ(c.layer_types, repeat("full_attention", 32));
  EXPECT_FALSE(c.bos_token_id.has_value());
  EXPECT_TRUE(c.eos_token_ids.empty());
}

TEST(ModelConfigDefaults, Qwen3) {
  ModelConfig c = parse_ok({{"model_type", "qwen3"}, {"hidden_size", 1024}, {"num_attention_heads", 16},
                            {"num_key_value_heads", 8}});
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_EQ(c.intermediate_size, 22016);
  EXPECT_EQ(c.head_dim, 128);  // Qwen3's own default, not 1024 / 16
  EXPECT_EQ(c.max_position_embeddings, 32768);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.max_window_layers, 28);
  EXPECT_FALSE(c.sliding_window.has_value());
  EXPECT_EQ(c.layer_types, repeat("full_attention", 32));
}

TEST(ModelConfigDefaults, Mistral) {
  ModelConfig c = parse_ok({{"model_type", "mistral"}});
  EXPECT_EQ(c.vocab_size, 32000);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.intermediate_size, 14336);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.sliding_window, std::optional<int64_t>(4096));
  EXPECT_EQ(c.layer_types, repeat("sliding_attention", 32));
  EXPECT_EQ(c.bos_token_id, std::optional<int64_t>(1));
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{2});
}

TEST(ModelConfigDefaults, UnknownModelTypeGetsGenericDefaults) {
  ModelConfig c = parse_ok({{"model_type", "falcon_mamba_like"},
                            {"vocab_size", 100},
                            {"hidden_size", 64},
                            {"num_hidden_layers", 2},
                            {"num_attention_heads", 4}});
  EXPECT_EQ(c.model_type, "falcon_mamba_like");
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.intermediate_size, 0);
  EXPECT_EQ(c.max_position_embeddings, 2048);
  EXPECT_TRUE(c.tie_word_embeddings);  // PretrainedConfig's default
  EXPECT_EQ(c.layer_types, repeat("full_attention", 2));
  expect_error({{"model_type", "something"}, {"vocab_size", 100}, {"num_hidden_layers", 2}, {"num_attention_heads", 4}},
               ErrorCode::kParseError, {"'hidden_size'", "missing"});
}

TEST(ModelConfig, RealLlama32Config) {
  // meta-llama/Llama-3.2-1B config.json.
  const json j = json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu",
    "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192,
    "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "transformers_version": "4.45.0.dev0", "use_cache": true, "vocab_size": 128256})");
  ModelConfig c = parse_ok(j);
  EXPECT_EQ(c.architectures, std::vector<std::string>{"LlamaForCausalLM"});
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.num_hidden_layers, 16);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.rope_type, "llama3");
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 32.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, std::optional<int64_t>(128000));
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{128001});
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_EQ(c.dtype(), std::optional<DType>(DType::kBF16));
  EXPECT_EQ(c.raw.at("pretraining_tp"), 1);
}

TEST(ModelConfig, KeyValueHeadsAbsentVersusNull) {
  EXPECT_EQ(parse_ok({{"model_type", "llama"}, {"num_attention_heads", 16}}).num_key_value_heads, 16);
  EXPECT_EQ(parse_ok({{"model_type", "mistral"}, {"num_attention_heads", 16}}).num_key_value_heads, 8);
  EXPECT_EQ(parse_ok({{"model_type", "mistral"}, {"num_attention_heads", 16}, {"num_key_value_heads", nullptr}})
                .num_key_value_heads,
            16);
  EXPECT_EQ(parse_ok({{"model_type", "qwen2"}, {"num_attention_heads", 64}}).num_key_value_heads, 32);
}

TEST(ModelConfig, HeadDim) {
  EXPECT_EQ(parse_ok({{"model_type", "mistral"}, {"hidden_size", 5120}, {"num_attention_heads", 32}, {"head_dim", 128}})
                .head_dim,
            128);
  EXPECT_EQ(parse_ok({{"model_type", "qwen2"}, {"hidden_size", 896}, {"num_attention_heads", 14},
                      {"num_key_value_heads", 2}})
                .head_dim,
            64);
  EXPECT_EQ(parse_ok({{"model_type", "mistral"}, {"head_dim", nullptr}}).head_dim, 128);
  // Not divisible, but head_dim given: fine.
  EXPECT_EQ(parse_ok({{"model_type", "llama"}, {"hidden_size", 100}, {"num_attention_heads", 8},
                      {"num_key_value_heads", 8}, {"head_dim", 16}})
                .head_dim,
            16);
  expect_error({{"model_type", "llama"}, {"hidden_size", 100}, {"num_attention_heads", 8}}, ErrorCode::kInvalidArgument,
               {"'hidden_size'", "100", "num_attention_heads", "head_dim"});
}

TEST(ModelConfig, HeadsMustBeAMultipleOfKvHeads) {
  expect_error({{"model_type", "llama"}, {"num_attention_heads", 32}, {"num_key_value_heads", 5}},
               ErrorCode::kInvalidArgument, {"num_attention_heads", "num_key_value_heads"});
}

TEST(ModelConfig, SizeErrors) {
  expect_error({{"model_type", "llama"}, {"hidden_size", 0}}, ErrorCode::kInvalidArgument, {"'hidden_size'", "positive"});
  expect_error({{"model_type", "llama"}, {"vocab_size", -5}}, ErrorCode::kInvalidArgument, {"'vocab_size'"});
  expect_error({{"model_type", "llama"}, {"num_key_value_heads", 0}}, ErrorCode::kInvalidArgument,
               {"'num_key_value_heads'"});
  expect_error({{"model_type", "llama"}, {"head_dim", -64}}, ErrorCode::kInvalidArgument, {"'head_dim'"});
  expect_error({{"model_type", "llama"}, {"rms_norm_eps", 0}}, ErrorCode::kInvalidArgument, {"'rms_norm_eps'"});
  expect_error({{"model_type", "mistral"}, {"sliding_window", 0}}, ErrorCode::kInvalidArgument, {"'sliding_window'"});
}

// Sizes come from files we did not write: one entry per layer is allocated from
// num_hidden_layers (1e10 asked for 320 GB under the fuzzer), and token ids are int32.
TEST(ModelConfig, SizesHaveCeilings) {
  expect_error({{"model_type", "llama"}, {"num_hidden_layers", 1e10}}, ErrorCode::kInvalidArgument,
               {"'num_hidden_layers'", "must be at most 65536, got 10000000000"});
  expect_error({{"model_type", "llama"}, {"vocab_size", 1LL << 31}}, ErrorCode::kInvalidArgument,
               {"'vocab_size'", "must be at most 2147483647"});
  expect_error({{"model_type", "llama"}, {"head_dim", 1LL << 40}}, ErrorCode::kInvalidArgument, {"'head_dim'"});
  EXPECT_EQ(parse_ok({{"model_type", "llama"}, {"num_hidden_layers", 65536}}).layer_types.size(), 65536u);
}

TEST(ModelConfig, TypeErrors) {
  expect_error({{"model_type", "llama"}, {"hidden_size", "4096"}}, ErrorCode::kParseError,
               {"'hidden_size'", "integer", "\"4096\""});
  expect_error({{"model_type", "llama"}, {"num_hidden_layers", 2.5}}, ErrorCode::kParseError, {"'num_hidden_layers'"});
  expect_error({{"model_type", "llama"}, {"tie_word_embeddings", 1}}, ErrorCode::kParseError,
               {"'tie_word_embeddings'", "true or false"});
  expect_error({{"model_type", "llama"}, {"eos_token_id", "2"}}, ErrorCode::kParseError, {"'eos_token_id'"});
  expect_error({{"model_type", "llama"}, {"architectures", "LlamaForCausalLM"}}, ErrorCode::kParseError,
               {"'architectures'"});
  expect_error({{"model_type", "llama"}, {"rope_scaling", "linear"}}, ErrorCode::kParseError, {"'rope_scaling'"});
  expect_error({{"model_type", 3}}, ErrorCode::kParseError, {"'model_type'"});
  expect_error({{"hidden_size", 64}}, ErrorCode::kParseError, {"'model_type'", "missing"});
  expect_error(json::array(), ErrorCode::kParseError, {"object"});
  // Integral floats are integers.
  EXPECT_EQ(parse_ok({{"model_type", "llama"}, {"hidden_size", 4096.0}}).hidden_size, 4096);
}

TEST(ModelConfig, EosIntListNullAbsent) {
  EXPECT_EQ(parse_ok({{"model_type", "llama"}, {"eos_token_id", 7}}).eos_token_ids, std::vector<int64_t>{7});
  EXPECT_EQ(parse_ok({{"model_type", "llama"}, {"eos_token_id", {128001, 128008, 128009}}}).eos_token_ids,
            (std::vector<int64_t>{128001, 128008, 128009}));
  EXPECT_TRUE(parse_ok({{"model_type", "llama"}, {"eos_token_id", nullptr}}).eos_token_ids.empty());
  EXPECT_EQ(parse_ok({{"model_type", "llama"}}).eos_token_ids, std::vector<int64_t>{2});
  EXPECT_FALSE(parse_ok({{"model_type", "llama"}, {"bos_token_id", nullptr}}).bos_token_id.has_value());
  EXPECT_EQ(parse_ok({{"model_type", "qwen2"}, {"pad_token_id", 151643}}).pad_token_id,
            std::optional<int64_t>(151643));
}

TEST(ModelConfigRope, LinearWithLegacyTypeKey) {
  ModelConfig c = parse_ok({{"model_type", "llama"}, {"rope_scaling", {{"type", "linear"}, {"factor", 2}}}});
  EXPECT_EQ(c.rope_scaling.rope_type, "linear");
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 2.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.attention_factor, 1.0);
}

TEST(ModelConfigRope, Dynamic) {
  ModelConfig c =
      parse_ok({{"model_type", "llama"}, {"rope_scaling", {{"rope_type", "dynamic"}, {"factor", 4.0}}}, {"rope_theta", 1e6}});
  EXPECT_EQ(c.rope_scaling.rope_type, "dynamic");
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 4.0);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 0);  // not given, not defaulted for dynamic
}

TEST(ModelConfigRope, Llama3OriginalMaxDefaultsToMaxPositions) {
  ModelConfig c = parse_ok({{"model_type", "llama"},
                            {"max_position_embeddings", 4096},
                            {"rope_scaling",
                             {{"rope_type", "llama3"}, {"factor", 8}, {"low_freq_factor", 1}, {"high_freq_factor", 4}}}});
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 4096);
}

TEST(ModelConfigRope, YarnDefaults) {
  ModelConfig c = parse_ok({{"model_type", "qwen2"},
                            {"max_position_embeddings", 32768},
                            {"rope_scaling", {{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}}}});
  const RopeScaling& r = c.rope_scaling;
  EXPECT_EQ(r.rope_type, "yarn");
  EXPECT_DOUBLE_EQ(r.factor, 4.0);
  EXPECT_EQ(r.original_max_position_embeddings, 32768);
  EXPECT_DOUBLE_EQ(r.beta_fast, 32.0);
  EXPECT_DOUBLE_EQ(r.beta_slow, 1.0);
  EXPECT_TRUE(r.truncate);
  EXPECT_FALSE(r.attention_factor_given);
  EXPECT_DOUBLE_EQ(r.attention_factor, 0.1 * std::log(4.0) + 1.0);  // get_mscale(factor)
}

TEST(ModelConfigRope, YarnMscaleAndFactorFromLengths) {
  // DeepSeek-style: mscale == mscale_all_dim makes the attention factor 1.
  ModelConfig a = parse_ok({{"model_type", "llama"},
                            {"rope_scaling",
                             {{"rope_type", "yarn"}, {"factor", 40}, {"mscale", 0.707}, {"mscale_all_dim", 0.707},
                              {"beta_fast", 0}, {"beta_slow", nullptr}, {"truncate", false},
                              {"original_max_position_embeddings", 4096}}}});
  EXPECT_DOUBLE_EQ(a.rope_scaling.attention_factor, 1.0);
  EXPECT_DOUBLE_EQ(a.rope_scaling.beta_fast, 32.0);  // 0 falls back like Python's `or`
  EXPECT_DOUBLE_EQ(a.rope_scaling.beta_slow, 1.0);
  EXPECT_FALSE(a.rope_scaling.truncate);
  ModelConfig b = parse_ok({{"model_type", "llama"},
                            {"rope_scaling",
                             {{"rope_type", "yarn"}, {"factor", 40}, {"mscale", 1.0}, {"mscale_all_dim", 0.5},
                              {"original_max_position_embeddings", 4096}}}});
  EXPECT_DOUBLE_EQ(b.rope_scaling.attention_factor,
                   (0.1 * std::log(40.0) + 1.0) / (0.1 * 0.5 * std::log(40.0) + 1.0));
  // factor null: max_position_embeddings / original_max_position_embeddings.
  ModelConfig c = parse_ok({{"model_type", "llama"},
                            {"max_position_embeddings", 16384},
                            {"rope_scaling", {{"rope_type", "yarn"}, {"factor", nullptr}, {"original_max_position_embeddings", 4096}}}});
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 4.0);
  // An explicit attention_factor wins.
  ModelConfig d = parse_ok({{"model_type", "llama"},
                            {"rope_scaling", {{"rope_type", "yarn"}, {"factor", 2.0}, {"attention_factor", 0.8}}}});
  EXPECT_DOUBLE_EQ(d.rope_scaling.attention_factor, 0.8);
  EXPECT_TRUE(d.rope_scaling.attention_factor_given);
  EXPECT_EQ(d.rope_scaling.original_max_position_embeddings, 2048);
}

TEST(ModelConfigRope, TopLevelOriginalMaxTakesPriority) {
  ModelConfig c = parse_ok({{"model_type", "llama"},
                            {"original_max_position_embeddings", 1024},
                            {"rope_scaling", {{"rope_type", "yarn"}, {"factor", 2.0}, {"original_max_position_embeddings", 4096}}}});
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 1024);
}

TEST(ModelConfigRope, NewerRopeParametersKey) {
  ModelConfig c = parse_ok({{"model_type", "qwen3"},
                            {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 1000000.0}}}});
  EXPECT_EQ(c.rope_scaling.rope_type, "default");
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  ModelConfig p = parse_ok({{"model_type", "llama"},
                            {"rope_parameters", {{"rope_type", "linear"}, {"factor", 3}, {"partial_rotary_factor", 0.5}}}});
  EXPECT_DOUBLE_EQ(p.rope_scaling.factor, 3.0);
  EXPECT_DOUBLE_EQ(p.partial_rotary_factor, 0.5);
  EXPECT_EQ(p.rotary_dim(), 64);
}

TEST(ModelConfigRope, RopeScalingWinsAndEmptyOneFallsThrough) {
  ModelConfig a = parse_ok({{"model_type", "llama"},
                            {"rope_scaling", {{"rope_type", "linear"}, {"factor", 2}}},
                            {"rope_parameters", {{"rope_type", "dynamic"}, {"factor", 5}}}});
  EXPECT_EQ(a.rope_scaling.rope_type, "linear");
  ModelConfig b = parse_ok({{"model_type", "llama"},
                            {"rope_scaling", json::object()},
                            {"rope_parameters", {{"rope_type", "dynamic"}, {"factor", 5}}}});
  EXPECT_EQ(b.rope_scaling.rope_type, "dynamic");
  ModelConfig c = parse_ok({{"model_type", "llama"}, {"rope_scaling", nullptr}});
  EXPECT_EQ(c.rope_scaling.rope_type, "default");
}

TEST(ModelConfigRope, Errors) {
  expect_error({{"model_type", "llama"}, {"rope_scaling", {{"rope_type", "longrope"}, {"factor", 2}}}},
               ErrorCode::kParseError, {"longrope", "long_factor"});
  expect_error({{"model_type", "llama"},
                {"rope_scaling", {{"rope_type", "longrope"}, {"long_factor", {1.0, 2.0}}, {"short_factor", {1.0}}}}},
               ErrorCode::kInvalidArgument, {"long_factor", "2 values", "short_factor 1"});
  expect_error({{"model_type", "llama"},
                {"rope_scaling", {{"rope_type", "longrope"}, {"long_factor", {1.0, -2.0}}, {"short_factor", {1.0, 1.0}}}}},
               ErrorCode::kInvalidArgument, {"long_factor", "positive"});
  expect_error({{"model_type", "llama"}, {"rope_scaling", {{"rope_type", "linear"}}}}, ErrorCode::kParseError,
               {"rope_scaling", "'factor'", "linear"});
  expect_error({{"model_type", "llama"}, {"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8}, {"high_freq_factor", 4}}}},
               ErrorCode::kParseError, {"'low_freq_factor'"});
  expect_error({{"model_type", "llama"},
                {"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8}, {"low_freq_factor", 4}, {"high_freq_factor", 4}}}},
               ErrorCode::kInvalidArgument, {"'high_freq_factor'"});
  expect_error({{"model_type", "llama"}, {"rope_scaling", {{"rope_type", "linear"}, {"factor", "2"}}}},
               ErrorCode::kParseError, {"'factor'"});
  expect_error({{"model_type", "llama"}, {"rope_scaling", {{"rope_type", "linear"}, {"factor", -1}}}},
               ErrorCode::kInvalidArgument, {"'factor'"});
  expect_error({{"model_type", "llama"}, {"rope_theta", 0}}, ErrorCode::kInvalidArgument, {"'rope_theta'"});
  expect_error({{"model_type", "llama"}, {"partial_rotary_factor", 1.5}}, ErrorCode::kInvalidArgument,
               {"'partial_rotary_factor'"});
  expect_error({{"model_type", "llama"},
                {"rope_parameters", {{"full_attention", {{"rope_type", "default"}}}, {"sliding_attention", {{"rope_type", "default"}}}}}},
               ErrorCode::kUnsupported, {"per-layer-type"});
}

TEST(ModelConfigLayers, Qwen2SlidingFromMaxWindowLayers) {
  ModelConfig c = parse_ok({{"model_type", "qwen2"},
                            {"num_hidden_layers", 4},
                            {"use_sliding_window", true},
                            {"sliding_window", 64},
                            {"max_window_layers", 2}});
  EXPECT_EQ(c.sliding_window, std::optional<int64_t>(64));
  EXPECT_EQ(c.layer_types,
            (std::vector<std::string>{"full_attention", "full_attention", "sliding_attention", "sliding_attention"}));
  EXPECT_FALSE(c.is_sliding_layer(1));
  EXPECT_TRUE(c.is_sliding_layer(2));
  // Window configured but disabled: all full, window nulled.
  ModelConfig off = parse_ok({{"model_type", "qwen2"}, {"num_hidden_layers", 4}, {"sliding_window", 64},
                              {"max_window_layers", 2}, {"use_sliding_window", false}});
  EXPECT_FALSE(off.sliding_window.has_value());
  EXPECT_EQ(off.layer_types, repeat("full_attention", 4));
}

TEST(ModelConfigLayers, Qwen3ExplicitLayerTypesHonoured) {
  ModelConfig c = parse_ok({{"model_type", "qwen3"},
                            {"num_hidden_layers", 3},
                            {"use_sliding_window", true},
                            {"sliding_window", 128},
                            {"layer_types", {"sliding_attention", "full_attention", "sliding_attention"}}});
  EXPECT_EQ(c.layer_types, (std::vector<std::string>{"sliding_attention", "full_attention", "sliding_attention"}));
  expect_error({{"model_type", "qwen3"}, {"num_hidden_layers", 3}, {"layer_types", {"full_attention"}}},
               ErrorCode::kInvalidArgument, {"'layer_types'", "1 entries", "3"});
  expect_error({{"model_type", "qwen3"}, {"num_hidden_layers", 1}, {"layer_types", {"chunked_attention"}}},
               ErrorCode::kInvalidArgument, {"'layer_types'", "chunked_attention"});
  expect_error({{"model_type", "qwen3"}, {"num_hidden_layers", 1}, {"layer_types", {1}}}, ErrorCode::kParseError,
               {"'layer_types'"});
}

TEST(ModelConfigLayers, MistralWindowAppliesToEveryLayer) {
  ModelConfig c = parse_ok({{"model_type", "mistral"}, {"num_hidden_layers", 3}, {"sliding_window", 16}});
  EXPECT_EQ(c.layer_types, repeat("sliding_attention", 3));
  ModelConfig none = parse_ok({{"model_type", "mistral"}, {"num_hidden_layers", 3}, {"sliding_window", nullptr}});
  EXPECT_FALSE(none.sliding_window.has_value());
  EXPECT_EQ(none.layer_types, repeat("full_attention", 3));
  // MistralConfig has no layer_types field; Transformers ignores it, so does loom.
  ModelConfig ignored = parse_ok({{"model_type", "mistral"},
                                  {"num_hidden_layers", 2},
                                  {"sliding_window", 16},
                                  {"layer_types", {"full_attention", "full_attention"}}});
  EXPECT_EQ(ignored.layer_types, repeat("sliding_attention", 2));
}

TEST(ModelConfigLayers, LlamaIgnoresSlidingWindow) {
  ModelConfig c = parse_ok({{"model_type", "llama"}, {"num_hidden_layers", 2}, {"sliding_window", 16}});
  EXPECT_FALSE(c.sliding_window.has_value());
  EXPECT_EQ(c.layer_types, repeat("full_attention", 2));
}

TEST(ModelConfig, TorchDtypeOrNewerDtypeKey) {
  EXPECT_EQ(parse_ok({{"model_type", "llama"}, {"torch_dtype", "float32"}}).dtype(), std::optional<DType>(DType::kF32));
  EXPECT_EQ(parse_ok({{"model_type", "llama"}, {"dtype", "float16"}}).dtype(), std::optional<DType>(DType::kF16));
  EXPECT_FALSE(parse_ok({{"model_type", "llama"}, {"torch_dtype", "float64"}}).dtype().has_value());
}

TEST(ModelConfig, FromFileAndDirectory) {
  testing::TempDir dir;
  testing::write_file(dir.file("config.json"), R"({"model_type": "qwen2", "hidden_size": 896,
      "num_attention_heads": 14, "num_key_value_heads": 2, "num_hidden_layers": 24})");
  auto from_dir = ModelConfig::from_file(dir.path());
  ASSERT_TRUE(from_dir.ok()) << from_dir.status().to_string();
  EXPECT_EQ(from_dir->num_hidden_layers, 24);
  EXPECT_EQ(from_dir->source, dir.file("config.json"));
  auto from_path = ModelConfig::from_file(dir.file("config.json"));
  ASSERT_TRUE(from_path.ok());
  EXPECT_EQ(from_path->head_dim, 64);

  testing::write_file(dir.file("bad.json"), R"({"model_type": "llama", "hidden_size": })");
  auto bad = ModelConfig::from_file(dir.file("bad.json"));
  EXPECT_EQ(bad.status().code(), ErrorCode::kParseError);
  EXPECT_NE(bad.status().message().find(dir.file("bad.json")), std::string::npos);

  testing::write_file(dir.file("wrong.json"), R"({"model_type": "llama", "hidden_size": "big"})");
  auto wrong = ModelConfig::from_file(dir.file("wrong.json"));
  EXPECT_EQ(wrong.status().code(), ErrorCode::kParseError);
  EXPECT_NE(wrong.status().message().find(dir.file("wrong.json")), std::string::npos);
  EXPECT_NE(wrong.status().message().find("'hidden_size'"), std::string::npos);

  auto missing = ModelConfig::from_file(dir.file("nope/config.json"));
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
}

}  // namespace
}  // namespace loom
