// Load → save_pretrained reproduces the checkpoint: for every fixture
// architecture the written safetensors are byte for byte the original file
// (fused tensors fused again, tied lm_head, dtypes, order), and the side files
// are copied. The saved folder loads again.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "loom/io/checkpoint.h"
#include "loom/io/safetensors_writer.h"
#include "loom/models/model.h"
#include "loom/models/save_pretrained.h"
#include "models/models_test_util.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using models_test::variant_names;
using models_test::fixtures_dir;

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

fs::path scratch(const std::string& tag) {
  return fs::temp_directory_path() / ("loom_save_" + std::to_string(::getpid()) + "_" + tag);
}

class SavePretrained : public ::testing::TestWithParam<std::string> {};

TEST_P(SavePretrained, RoundTripIsByteIdentical) {
  const fs::path src = fixtures_dir() / GetParam();
  const fs::path out = scratch(GetParam());
  fs::remove_all(out);
  auto model = models::Model::load(src.string()).value();
  std::vector<std::string> reported;
  models::SaveOptions o;
  o.on_file = [&](const std::string& f) { reported.push_back(f); };
  ASSERT_TRUE(models::save_pretrained(*model, out.string(), o).ok());

  const std::string original = read_bytes(src / "model.safetensors");
  const std::string written = read_bytes(out / "model.safetensors");
  ASSERT_FALSE(original.empty());
  EXPECT_EQ(written.size(), original.size()) << GetParam();
  EXPECT_TRUE(written == original) << GetParam() << ": saved model.safetensors differs from the original";
  for (const char* side : {"config.json", "generation_config.json"}) {
    EXPECT_EQ(read_bytes(out / side), read_bytes(src / side)) << side;
    EXPECT_NE(std::find(reported.begin(), reported.end(), side), reported.end()) << side;
  }
  EXPECT_FALSE(fs::exists(out / "reference.json")) << "only checkpoint files are copied";

  // The saved folder is a checkpoint loom loads to the same parameters.
  auto again = models::Model::load(out.string()).value();
  ASSERT_EQ(again->parameters().size(), model->parameters().size());
  for (const auto& [name, t] : model->parameters()) {
    const Tensor& u = again->parameters().at(name);
    ASSERT_EQ(u.shape(), t.shape()) << name;
    ASSERT_EQ(u.dtype(), t.dtype()) << name;
    EXPECT_EQ(0, std::memcmp(u.data(), t.data(), t.nbytes())) << name;
  }
  fs::remove_all(out);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SavePretrained, ::testing::ValuesIn(variant_names()), [](const auto& info) {
  std::string s = info.param;
  for (auto& ch : s)
    if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
});
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(SavePretrained);

// A sharded checkpoint with fused tensors (Phi3) comes back shard by shard,
// with an index mapping every tensor to its original shard.
TEST(SavePretrainedSharded, ShardsAndIndexAreReproduced) {
  const fs::path src = fixtures_dir() / "phi3-bf16";
  const fs::path sharded = scratch("sharded_src"), out = scratch("sharded_out");
  fs::remove_all(sharded);
  fs::remove_all(out);
  fs::create_directories(sharded);
  fs::copy_file(src / "config.json", sharded / "config.json");
  NamedTensors first, second;
  nlohmann::json index;
  {
    auto ck = Checkpoint::open(src.string()).value();
    for (const auto& name : ck.names()) {
      const bool late = name.find("layers.1.") != std::string::npos || name == "model.norm.weight";
      (late ? second : first).emplace_back(name, ck.get(name).value().clone());
      index["weight_map"][name] = late ? "model-00002-of-00002.safetensors" : "model-00001-of-00002.safetensors";
    }
  }
  ASSERT_FALSE(first.empty());
  ASSERT_FALSE(second.empty());
  const std::map<std::string, std::string> meta{{"format", "pt"}};
  ASSERT_TRUE(write_safetensors((sharded / "model-00001-of-00002.safetensors").string(), first, meta,
                                SafetensorsOrder::kLikePython).ok());
  ASSERT_TRUE(write_safetensors((sharded / "model-00002-of-00002.safetensors").string(), second, meta,
                                SafetensorsOrder::kLikePython).ok());
  index["metadata"]["total_size"] = 0;
  std::ofstream(sharded / "model.safetensors.index.json") << index.dump(2);

  auto model = models::Model::load(sharded.string()).value();
  ASSERT_TRUE(models::save_pretrained(*model, out.string()).ok());
  for (const char* shard : {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"})
    EXPECT_TRUE(read_bytes(out / shard) == read_bytes(sharded / shard)) << shard;
  std::ifstream in(out / "model.safetensors.index.json");
  ASSERT_TRUE(in) << "no index written";
  const nlohmann::json written = nlohmann::json::parse(in);
  EXPECT_EQ(written["weight_map"], index["weight_map"]);
  auto again = models::Model::load(out.string()).value();
  EXPECT_EQ(again->parameters().size(), model->parameters().size());
  fs::remove_all(sharded);
  fs::remove_all(out);
}

TEST(SavePretrainedErrors, RefusesTheModelsOwnDirectory) {
  const fs::path src = fixtures_dir() / "llama-f32";
  auto model = models::Model::load(src.string()).value();
  Status s = models::save_pretrained(*model, src.string());
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("own directory"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace loom
