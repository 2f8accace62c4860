#include <gtest/gtest.h>

#include <filesystem>

#include "io/io_test_util.h"
#include "loom/io/checkpoint.h"
#include "loom/io/safetensors_writer.h"

namespace loom {
namespace {

using testing::TempDir;

Tensor f32(std::vector<float> v, Shape s) { return Tensor::from_f32(v, std::move(s)); }

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Two shards and their index, as Transformers' save_pretrained lays them out.
void write_sharded(const TempDir& dir, const std::string& index_json) {
  ASSERT_TRUE(write_safetensors(dir.file("model-00001-of-00002.safetensors"),
                                {{"embed.weight", f32({1, 2, 3, 4, 5, 6}, {3, 2})},
                                 {"layers.0.w", f32({7, 8}, {2}).to(DType::kBF16)}})
                  .ok());
  ASSERT_TRUE(write_safetensors(dir.file("model-00002-of-00002.safetensors"),
                                {{"layers.1.w", f32({9, 10}, {2})}, {"norm.weight", f32({11}, {1})}})
                  .ok());
  testing::write_file(dir.file("model.safetensors.index.json"), index_json);
}

const char* kIndex = R"({
  "metadata": {"total_size": 44},
  "weight_map": {
    "embed.weight": "model-00001-of-00002.safetensors",
    "layers.0.w": "model-00001-of-00002.safetensors",
    "layers.1.w": "model-00002-of-00002.safetensors",
    "norm.weight": "model-00002-of-00002.safetensors"
  }
})";

TEST(Checkpoint, SingleFileDirectory) {
  TempDir dir;
  ASSERT_TRUE(write_safetensors(dir.file("model.safetensors"),
                                {{"b", f32({1, 2, 3, 4}, {2, 2})}, {"a", f32({0.5f, -1}, {2}).to(DType::kBF16)}})
                  .ok());
  auto ck = Checkpoint::open(dir.path());
  ASSERT_TRUE(ck.ok()) << ck.status().to_string();
  EXPECT_FALSE(ck->sharded());
  EXPECT_EQ(ck->dir(), dir.path());
  EXPECT_EQ(ck->names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(ck->shard_files(), std::vector<std::string>{dir.file("model.safetensors")});
  EXPECT_EQ(ck->parameter_count(), 6);
  EXPECT_EQ(ck->bytes_per_dtype(), (std::map<DType, uint64_t>{{DType::kF32, 16}, {DType::kBF16, 4}}));
  EXPECT_EQ(ck->parameters_per_dtype(), (std::map<DType, int64_t>{{DType::kF32, 4}, {DType::kBF16, 2}}));
  EXPECT_EQ(ck->total_bytes(), 20u);

  auto b = ck->get("b");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->to_f32_vector(), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(ck->find("b")->shape, (Shape{2, 2}));

  // get_as: same dtype is the zero-copy view itself; another dtype converts.
  auto same = ck->get_as("b", DType::kF32);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->data(), b->data());
  auto widened = ck->get_as("a", DType::kF32);
  ASSERT_TRUE(widened.ok());
  EXPECT_EQ(widened->dtype(), DType::kF32);
  EXPECT_EQ(widened->to_f32_vector(), (std::vector<float>{0.5f, -1}));

  auto missing = ck->get("c");
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  EXPECT_TRUE(contains(missing.status().message(), "'c'"));
}

TEST(Checkpoint, PathToASingleFile) {
  TempDir dir;
  const std::string path = dir.file("weights.safetensors");
  ASSERT_TRUE(write_safetensors(path, {{"x", f32({1}, {1})}}).ok());
  auto ck = Checkpoint::open(path);
  ASSERT_TRUE(ck.ok()) << ck.status().to_string();
  EXPECT_EQ(ck->dir(), dir.path());
  EXPECT_EQ(ck->source(), path);
  EXPECT_TRUE(ck->contains("x"));
}

TEST(Checkpoint, ShardedIndexWithTwoShards) {
  TempDir dir;
  write_sharded(dir, kIndex);
  auto ck = Checkpoint::open(dir.path());
  ASSERT_TRUE(ck.ok()) << ck.status().to_string();
  EXPECT_TRUE(ck->sharded());
  EXPECT_EQ(ck->source(), dir.file("model.safetensors.index.json"));
  EXPECT_EQ(ck->names(), (std::vector<std::string>{"embed.weight", "layers.0.w", "layers.1.w", "norm.weight"}));
  EXPECT_EQ(ck->shard_files(), (std::vector<std::string>{dir.file("model-00001-of-00002.safetensors"),
                                                         dir.file("model-00002-of-00002.safetensors")}));
  EXPECT_EQ(ck->file_of("embed.weight")->path(), dir.file("model-00001-of-00002.safetensors"));
  EXPECT_EQ(ck->file_of("norm.weight")->path(), dir.file("model-00002-of-00002.safetensors"));
  EXPECT_EQ(ck->get("embed.weight")->to_f32_vector(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(ck->get("layers.0.w")->dtype(), DType::kBF16);
  EXPECT_EQ(ck->get("layers.0.w")->to_f32_vector(), (std::vector<float>{7, 8}));
  EXPECT_EQ(ck->get("layers.1.w")->to_f32_vector(), (std::vector<float>{9, 10}));
  EXPECT_EQ(ck->parameter_count(), 6 + 2 + 2 + 1);

  // A view outlives the Checkpoint that produced it.
  Tensor kept;
  {
    auto again = Checkpoint::open(dir.path());
    ASSERT_TRUE(again.ok());
    kept = again->get("norm.weight").value();
  }
  EXPECT_EQ(kept.to_f32_vector(), std::vector<float>{11});
}

TEST(Checkpoint, ShardedMissingShardFile) {
  TempDir dir;
  write_sharded(dir, kIndex);
  std::filesystem::remove(dir.file("model-00002-of-00002.safetensors"));
  auto ck = Checkpoint::open(dir.path());
  ASSERT_FALSE(ck.ok());
  EXPECT_EQ(ck.status().code(), ErrorCode::kNotFound);
  EXPECT_TRUE(contains(ck.status().message(), "model-00002-of-00002.safetensors")) << ck.status().message();
  EXPECT_TRUE(contains(ck.status().message(), "model.safetensors.index.json")) << ck.status().message();
}

TEST(Checkpoint, IndexNamesATensorTheShardLacks) {
  TempDir dir;
  write_sharded(dir, R"({"weight_map": {
      "embed.weight": "model-00001-of-00002.safetensors",
      "lm_head.weight": "model-00002-of-00002.safetensors"}})");
  auto ck = Checkpoint::open(dir.path());
  ASSERT_FALSE(ck.ok());
  EXPECT_EQ(ck.status().code(), ErrorCode::kNotFound);
  EXPECT_TRUE(contains(ck.status().message(), "'lm_head.weight'")) << ck.status().message();
  EXPECT_TRUE(contains(ck.status().message(), "model-00002-of-00002.safetensors")) << ck.status().message();
}

TEST(Checkpoint, ShardTensorsOutsideTheIndexAreIgnored) {
  TempDir dir;
  write_sharded(dir, R"({"weight_map": {
      "embed.weight": "model-00001-of-00002.safetensors",
      "norm.weight": "model-00002-of-00002.safetensors"}})");
  auto ck = Checkpoint::open(dir.path());
  ASSERT_TRUE(ck.ok()) << ck.status().to_string();
  EXPECT_EQ(ck->names(), (std::vector<std::string>{"embed.weight", "norm.weight"}));
  EXPECT_FALSE(ck->contains("layers.0.w"));
}

TEST(Checkpoint, MalformedIndex) {
  struct Case {
    const char* what;
    const char* json;
    const char* needle;
  };
  const Case cases[] = {
      {"not json", "{\"weight_map\": ", "not valid JSON"},
      {"no weight_map", R"({"metadata": {}})", "missing \"weight_map\""},
      {"weight_map not object", R"({"weight_map": []})", "must be an object"},
      {"shard not a string", R"({"weight_map": {"embed.weight": 3}})", "'embed.weight'"},
      {"shard escapes the directory", R"({"weight_map": {"embed.weight": "../model-00001-of-00002.safetensors"}})",
       "not a path inside"},
      {"absolute shard path", R"({"weight_map": {"embed.weight": "/etc/passwd"}})", "not a path inside"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    TempDir dir;
    write_sharded(dir, c.json);
    auto ck = Checkpoint::open(dir.path());
    ASSERT_FALSE(ck.ok());
    EXPECT_EQ(ck.status().code(), ErrorCode::kParseError) << ck.status().to_string();
    EXPECT_TRUE(contains(ck.status().message(), dir.file("model.safetensors.index.json"))) << ck.status().message();
    EXPECT_TRUE(contains(ck.status().message(), c.needle)) << ck.status().message();
  }
}

TEST(Checkpoint, CorruptShardErrorNamesTheShard) {
  TempDir dir;
  write_sharded(dir, kIndex);
  testing::write_file(dir.file("model-00002-of-00002.safetensors"), testing::le64(1000) + "{}");
  auto ck = Checkpoint::open(dir.path());
  ASSERT_FALSE(ck.ok());
  EXPECT_EQ(ck.status().code(), ErrorCode::kParseError);
  EXPECT_TRUE(contains(ck.status().message(), dir.file("model-00002-of-00002.safetensors")));
}

TEST(Checkpoint, SingleFileWinsOverIndexLikeTransformers) {
  TempDir dir;
  write_sharded(dir, kIndex);
  ASSERT_TRUE(write_safetensors(dir.file("model.safetensors"), {{"only", f32({1}, {1})}}).ok());
  auto ck = Checkpoint::open(dir.path());
  ASSERT_TRUE(ck.ok());
  EXPECT_FALSE(ck->sharded());
  EXPECT_EQ(ck->names(), std::vector<std::string>{"only"});
}

TEST(Checkpoint, NothingToOpen) {
  TempDir dir;
  auto empty = Checkpoint::open(dir.path());
  EXPECT_EQ(empty.status().code(), ErrorCode::kNotFound);
  EXPECT_TRUE(contains(empty.status().message(), dir.path()));
  const std::string absent = dir.file("absent");
  auto missing = Checkpoint::open(absent);
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  EXPECT_TRUE(contains(missing.status().message(), absent));
}

TEST(Checkpoint, RequireListsFirstMissingNamesCountAndDirectory) {
  TempDir dir;
  ASSERT_TRUE(write_safetensors(dir.file("model.safetensors"), {{"present", f32({1}, {1})}}).ok());
  auto ck = Checkpoint::open(dir.path());
  ASSERT_TRUE(ck.ok());
  EXPECT_TRUE(ck->require({"present"}, "TestModel").ok());

  std::vector<std::string> wanted = {"present"};
  for (int i = 0; i < 8; ++i) wanted.push_back("missing." + std::to_string(i));
  Status s = ck->require(wanted, "TestModel");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), ErrorCode::kNotFound);
  const std::string& m = s.message();
  EXPECT_TRUE(contains(m, dir.path())) << m;
  EXPECT_TRUE(contains(m, "TestModel")) << m;
  EXPECT_TRUE(contains(m, "missing 8 of the 9")) << m;
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(contains(m, "missing." + std::to_string(i))) << m;
  EXPECT_FALSE(contains(m, "missing.5")) << m;
  EXPECT_TRUE(contains(m, "and 3 more")) << m;
}

TEST(Checkpoint, UnexpectedTensors) {
  TempDir dir;
  ASSERT_TRUE(write_safetensors(dir.file("model.safetensors"),
                                {{"used", f32({1}, {1})}, {"rotary.inv_freq", f32({1}, {1})}, {"extra", f32({1}, {1})}})
                  .ok());
  auto ck = Checkpoint::open(dir.path());
  ASSERT_TRUE(ck.ok());
  EXPECT_EQ(ck->unexpected({"used"}), (std::vector<std::string>{"extra", "rotary.inv_freq"}));
  EXPECT_EQ(ck->warn_unexpected({"used", "extra"}, "TestModel"), std::vector<std::string>{"rotary.inv_freq"});
  EXPECT_TRUE(ck->unexpected({"used", "extra", "rotary.inv_freq"}).empty());
}

}  // namespace
}  // namespace loom
