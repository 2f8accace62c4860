// generation_config.json parsing; expected defaults are Transformers'
// GenerationConfig defaults.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "loom/batching/generation_config_file.h"

namespace loom {
namespace {

using nlohmann::json;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "loom-gen-test-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string write(const std::string& name, const std::string& text) const {
    const std::string p = (std::filesystem::path(path_) / name).string();
    std::ofstream(p) << text;
    return p;
  }

 private:
  std::string path_;
};

GenerationConfig parse_ok(const json& j) {
  auto c = batching::generation_config_from_json(j, "m/generation_config.json");
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? c.value() : GenerationConfig{};
}

void expect_error(const json& j, ErrorCode code, const std::string& field) {
  auto c = batching::generation_config_from_json(j, "m/generation_config.json");
  ASSERT_FALSE(c.ok()) << j.dump();
  EXPECT_EQ(c.status().code(), code) << c.status().to_string();
  EXPECT_NE(c.status().message().find("m/generation_config.json"), std::string::npos) << c.status().message();
  EXPECT_NE(c.status().message().find(field), std::string::npos) << c.status().message();
}

TEST(GenerationConfig, TransformersDefaults) {
  const GenerationConfig c;
  EXPECT_FALSE(c.max_new_tokens.has_value());
  EXPECT_EQ(c.max_length, 20);
  EXPECT_FALSE(c.do_sample);
  EXPECT_DOUBLE_EQ(c.temperature, 1.0);
  EXPECT_EQ(c.top_k, 50);
  EXPECT_DOUBLE_EQ(c.top_p, 1.0);
  EXPECT_FALSE(c.min_p.has_value());
  EXPECT_DOUBLE_EQ(c.repetition_penalty, 1.0);
  EXPECT_EQ(c.num_return_sequences, 1);
  EXPECT_TRUE(c.eos_token_ids.empty());
  EXPECT_TRUE(c.stop_strings.empty());
  EXPECT_FALSE(c.seed.has_value());
  EXPECT_TRUE(c.validate().ok());
  // An empty file means the same defaults.
  const GenerationConfig e = parse_ok(json::object());
  EXPECT_EQ(e.max_length, 20);
  EXPECT_EQ(e.top_k, 50);
}

TEST(GenerationConfig, NewTokenBudgetFollowsMaxLengthUnlessMaxNewTokensIsSet) {
  GenerationConfig c;
  EXPECT_EQ(c.new_token_budget(15), 5);
  EXPECT_EQ(c.new_token_budget(20), 0);
  EXPECT_EQ(c.new_token_budget(64), 0);
  c.max_length = 100;
  EXPECT_EQ(c.new_token_budget(64), 36);
  c.max_new_tokens = 7;
  EXPECT_EQ(c.new_token_budget(64), 7);
  EXPECT_EQ(c.new_token_budget(1000), 7);
}

TEST(GenerationConfig, RealLlama31File) {
  // meta-llama/Llama-3.1-8B-Instruct generation_config.json.
  const GenerationConfig c = parse_ok(json::parse(R"({
    "bos_token_id": 128000, "do_sample": true, "eos_token_id": [128001, 128008, 128009],
    "temperature": 0.6, "top_p": 0.9, "transformers_version": "4.42.3"})"));
  EXPECT_TRUE(c.do_sample);
  EXPECT_DOUBLE_EQ(c.temperature, 0.6);
  EXPECT_DOUBLE_EQ(c.top_p, 0.9);
  EXPECT_EQ(c.top_k, 50);
  EXPECT_EQ(c.bos_token_id, std::optional<int64_t>(128000));
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
  EXPECT_EQ(c.source, "m/generation_config.json");
}

TEST(GenerationConfig, EveryField) {
  const GenerationConfig c = parse_ok({{"max_new_tokens", 32},
                                       {"max_length", 4096},
                                       {"do_sample", true},
                                       {"temperature", 0.0},
                                       {"top_k", 0},
                                       {"top_p", 0.95},
                                       {"min_p", 0.05},
                                       {"repetition_penalty", 1.1},
                                       {"num_return_sequences", 2},
                                       {"eos_token_id", 2},
                                       {"pad_token_id", -1},
                                       {"stop_strings", "###"},
                                       {"seed", 1234}});
  EXPECT_EQ(c.max_new_tokens, std::optional<int64_t>(32));
  EXPECT_EQ(c.max_length, 4096);
  EXPECT_DOUBLE_EQ(c.temperature, 0.0);
  EXPECT_EQ(c.top_k, 0);
  EXPECT_DOUBLE_EQ(c.top_p, 0.95);
  EXPECT_EQ(c.min_p, std::optional<double>(0.05));
  EXPECT_DOUBLE_EQ(c.repetition_penalty, 1.1);
  EXPECT_EQ(c.num_return_sequences, 2);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{2});
  EXPECT_EQ(c.pad_token_id, std::optional<int64_t>(-1));  // Transformers only warns
  EXPECT_EQ(c.stop_strings, std::vector<std::string>{"###"});
  EXPECT_EQ(c.seed, std::optional<uint64_t>(1234));

  const GenerationConfig l = parse_ok({{"stop_strings", {"\n\n", "User:"}}, {"eos_token_id", nullptr}, {"top_k", nullptr}});
  EXPECT_EQ(l.stop_strings, (std::vector<std::string>{"\n\n", "User:"}));
  EXPECT_TRUE(l.eos_token_ids.empty());
  EXPECT_EQ(l.top_k, 50);  // null keeps the default
}

TEST(GenerationConfig, ValidationErrorsNameTheField) {
  expect_error({{"temperature", -0.5}}, ErrorCode::kInvalidArgument, "temperature");
  expect_error({{"top_p", 0.0}}, ErrorCode::kInvalidArgument, "top_p");
  expect_error({{"top_p", 1.5}}, ErrorCode::kInvalidArgument, "top_p");
  expect_error({{"top_k", -1}}, ErrorCode::kInvalidArgument, "top_k");
  expect_error({{"min_p", 1.5}}, ErrorCode::kInvalidArgument, "min_p");
  expect_error({{"min_p", -0.1}}, ErrorCode::kInvalidArgument, "min_p");
  expect_error({{"repetition_penalty", 0}}, ErrorCode::kInvalidArgument, "repetition_penalty");
  expect_error({{"max_new_tokens", 0}}, ErrorCode::kInvalidArgument, "max_new_tokens");
  expect_error({{"max_length", 0}}, ErrorCode::kInvalidArgument, "max_length");
  expect_error({{"num_return_sequences", 0}}, ErrorCode::kInvalidArgument, "num_return_sequences");
  expect_error({{"eos_token_id", {2, -3}}}, ErrorCode::kInvalidArgument, "eos_token_id");
  expect_error({{"stop_strings", {"ok", ""}}}, ErrorCode::kInvalidArgument, "stop_strings");

  // validate() on a config built in code names the field too.
  GenerationConfig c;
  c.top_p = 2;
  Status s = c.validate();
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("top_p"), std::string::npos);
}

TEST(GenerationConfig, TypeErrorsNameTheField) {
  expect_error({{"temperature", "hot"}}, ErrorCode::kParseError, "'temperature'");
  expect_error({{"do_sample", 1}}, ErrorCode::kParseError, "'do_sample'");
  expect_error({{"top_k", 1.5}}, ErrorCode::kParseError, "'top_k'");
  expect_error({{"eos_token_id", {"2"}}}, ErrorCode::kParseError, "'eos_token_id'");
  expect_error({{"stop_strings", {1, 2}}}, ErrorCode::kParseError, "'stop_strings'");
  expect_error({{"seed", -1}}, ErrorCode::kParseError, "'seed'");
  expect_error(json::array(), ErrorCode::kParseError, "object");
}

TEST(GenerationConfig, FromDirOrDefault) {
  TempDir dir;
  auto defaults = batching::generation_config_from_dir_or_default(dir.path());
  ASSERT_TRUE(defaults.ok()) << defaults.status().to_string();
  EXPECT_EQ(defaults->max_length, 20);
  EXPECT_EQ(defaults->source, "defaults");

  const std::string file = dir.write("generation_config.json", R"({"do_sample": true, "top_k": 20})");
  auto read = batching::generation_config_from_dir_or_default(dir.path());
  ASSERT_TRUE(read.ok()) << read.status().to_string();
  EXPECT_TRUE(read->do_sample);
  EXPECT_EQ(read->top_k, 20);
  EXPECT_EQ(read->source, file);

  dir.write("generation_config.json", R"({"do_sample": tru)");
  auto bad = batching::generation_config_from_dir_or_default(dir.path());
  EXPECT_EQ(bad.status().code(), ErrorCode::kParseError);
  EXPECT_NE(bad.status().message().find(file), std::string::npos);

  dir.write("generation_config.json", R"({"temperature": -1})");
  auto invalid = batching::generation_config_from_dir_or_default(dir.path());
  EXPECT_EQ(invalid.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(invalid.status().message().find(file), std::string::npos);

  auto missing_dir = batching::generation_config_from_dir_or_default(dir.path() + "/absent");
  EXPECT_EQ(missing_dir.status().code(), ErrorCode::kNotFound);
  auto missing_file = batching::generation_config_from_file(dir.path() + "/absent.json");
  EXPECT_EQ(missing_file.status().code(), ErrorCode::kNotFound);
}

TEST(GenerationConfig, InheritSpecialTokensFillsOnlyUnsetIds) {
  GenerationConfig empty;
  empty.inherit_special_tokens({2, 3}, 1, 0);
  EXPECT_EQ(empty.eos_token_ids, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(empty.bos_token_id, std::optional<int64_t>(1));
  EXPECT_EQ(empty.pad_token_id, std::optional<int64_t>(0));

  GenerationConfig set = parse_ok({{"eos_token_id", 7}, {"bos_token_id", 6}});
  set.inherit_special_tokens({2}, 1, std::nullopt);
  EXPECT_EQ(set.eos_token_ids, std::vector<int64_t>{7});
  EXPECT_EQ(set.bos_token_id, std::optional<int64_t>(6));
  EXPECT_FALSE(set.pad_token_id.has_value());
}

}  // namespace
}  // namespace loom
