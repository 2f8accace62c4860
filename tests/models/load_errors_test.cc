// A checkpoint that does not fit its architecture fails to load with an error
// naming the file and the tensor or field; the process carries on.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "loom/core/logging.h"
#include "loom/io/checkpoint.h"
#include "loom/io/safetensors_writer.h"
#include "loom/models/model.h"
#include "models/models_test_util.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using models_test::fixture;

// A scratch copy of the llama-f32 fixture that a test may break.
class BrokenCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("loom_broken_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(fixture("llama-f32") / f, dir_ / f);
  }
  void TearDown() override { fs::remove_all(dir_); }

  nlohmann::json config() {
    std::ifstream in(dir_ / "config.json");
    return nlohmann::json::parse(in);
  }
  void write_config(const nlohmann::json& j) { std::ofstream(dir_ / "config.json") << j.dump(1); }
  // Rewrites model.safetensors through `edit`, which may drop or replace tensors.
  void rewrite_weights(const std::function<void(NamedTensors&)>& edit) {
    NamedTensors tensors;
    {
      auto ck = Checkpoint::open(dir_.string()).value();
      for (const auto& name : ck.names()) tensors.emplace_back(name, ck.get(name).value().clone());
    }
    edit(tensors);
    ASSERT_TRUE(write_safetensors((dir_ / "model.safetensors").string(), tensors).ok());
  }
  Status load() { return models::Model::load(dir_.string()).status(); }

  fs::path dir_;
};

TEST_F(BrokenCheckpoint, IntactCopyLoads) { EXPECT_TRUE(load().ok()) << load().to_string(); }

TEST_F(BrokenCheckpoint, UnknownModelType) {
  auto j = config();
  j["model_type"] = "frobnicator";
  j["architectures"] = {"FrobnicatorForCausalLM"};
  write_config(j);
  Status s = load();
  EXPECT_EQ(s.code(), ErrorCode::kUnsupported);
  EXPECT_NE(s.message().find("frobnicator"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("llama"), std::string::npos) << "should list what is supported: " << s.message();
}

TEST_F(BrokenCheckpoint, MissingTensorIsNamed) {
  rewrite_weights([](NamedTensors& t) {
    t.erase(std::remove_if(t.begin(), t.end(), [](const auto& p) { return p.first == "model.layers.1.mlp.up_proj.weight"; }),
            t.end());
  });
  Status s = load();
  EXPECT_EQ(s.code(), ErrorCode::kNotFound);
  EXPECT_NE(s.message().find("model.layers.1.mlp.up_proj.weight"), std::string::npos) << s.message();
}

TEST_F(BrokenCheckpoint, WrongShapeIsNamedWithBothShapes) {
  rewrite_weights([](NamedTensors& t) {
    for (auto& [name, tensor] : t)
      if (name == "model.layers.0.self_attn.o_proj.weight") tensor = Tensor::zeros(DType::kF32, {tensor.dim(0), tensor.dim(1) + 1});
  });
  Status s = load();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("model.layers.0.self_attn.o_proj.weight"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("expects"), std::string::npos) << s.message();
}

TEST_F(BrokenCheckpoint, IntegerWeightsAreUnsupported) {
  rewrite_weights([](NamedTensors& t) {
    for (auto& [name, tensor] : t)
      if (name == "model.norm.weight") tensor = Tensor::zeros(DType::kI32, tensor.shape());
  });
  Status s = load();
  EXPECT_EQ(s.code(), ErrorCode::kUnsupported);
  EXPECT_NE(s.message().find("model.norm.weight"), std::string::npos) << s.message();
}

TEST_F(BrokenCheckpoint, ExtraTensorIsOnlyAWarning) {
  rewrite_weights([](NamedTensors& t) { t.emplace_back("model.unused_extra", Tensor::zeros(DType::kF32, {3})); });
  const LogLevel level = log_level();
  set_log_level(LogLevel::kWarn);
  ::testing::internal::CaptureStderr();
  const Status s = load();
  const std::string warnings = ::testing::internal::GetCapturedStderr();
  set_log_level(level);
  EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_NE(warnings.find("model.unused_extra"), std::string::npos) << "the warning names the tensor: " << warnings;
}

TEST_F(BrokenCheckpoint, TruncatedFileIsAnErrorNotACrash) {
  fs::resize_file(dir_ / "model.safetensors", fs::file_size(dir_ / "model.safetensors") / 2);
  Status s = load();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("model.safetensors"), std::string::npos) << s.message();
}

TEST_F(BrokenCheckpoint, HeadsNotDividingIsAConfigError) {
  auto j = config();
  j["num_key_value_heads"] = 3;
  write_config(j);
  Status s = load();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("num_key_value_heads"), std::string::npos) << s.message();
}

TEST(ModelLoad, MissingDirectoryAndConfig) {
  EXPECT_EQ(models::Model::load("/nonexistent/loom").status().code(), ErrorCode::kNotFound);
  const fs::path empty = fs::temp_directory_path() / "loom_empty_model_dir";
  fs::create_directories(empty);
  Status s = models::Model::load(empty.string()).status();
  EXPECT_EQ(s.code(), ErrorCode::kNotFound);
  EXPECT_NE(s.message().find("config.json"), std::string::npos);
  fs::remove_all(empty);
}

}  // namespace
}  // namespace loom
