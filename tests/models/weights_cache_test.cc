// Weights made at load (quantized, or put back in order from llama.cpp's rows) go
// through a GGUF file in the cache directory: the first load writes it, later loads
// map it (and the runtime can then copy them into its layouts with the pages handed
// back), with the same logits bit for bit as keeping them in memory. A changed
// checkpoint gets a new entry (the old one is evicted); a broken entry is made again,
// and an unwritable cache only costs the caching.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "loom/core/cache_dir.h"
#include "loom/core/file_pages.h"
#include "scoped_env.h"
#include "loom/io/gguf.h"
#include "loom/models/model.h"
#include "loom/models/save_gguf.h"
#include "loom/weights/quantization_recipe.h"
#include "models/model_run_util.h"
#include "loom/weights/weights_cache.h"

namespace loom::models_test {
namespace {

namespace fs = std::filesystem;

class WeightsCache : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("loom_quantized_cache_test_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    // A copy of the fixture, whose files the test may touch.
    checkpoint_ = root_ / "checkpoint";
    fs::copy(existing_fixture("llama_mha_untied-f32"), checkpoint_, fs::copy_options::recursive);
    cache_ = root_ / "cache";
    cache_env_.emplace("LOOM_CACHE_DIR", cache_.string());
  }
  void TearDown() override {
    cache_env_.reset();
    fs::remove_all(root_);
  }
  std::shared_ptr<models::Model> load() {
    models::LoadOptions lo;
    lo.quantize = quantization_recipe("q4_k_m").value();
    return models::Model::load(checkpoint_.string(), lo).value();
  }
  // The payloads of the cache's entries of weights made at load (packed entries aside).
  std::vector<fs::path> cache_files() const {
    std::vector<fs::path> out;
    for (const CacheEntryInfo& e : weights_entries())
      for (const std::string& f : e.files)
        if (f.ends_with(".gguf")) out.push_back(f);
    return out;
  }
  std::vector<CacheEntryInfo> weights_entries() const {
    std::vector<CacheEntryInfo> out;
    if (!fs::exists(cache_)) return out;
    for (CacheEntryInfo& e : list_cache_entries(cache_.string()))
      if (e.kind == "weights") out.push_back(std::move(e));
    return out;
  }
  // Quantized parameters, and how many of them lie in a file mapping.
  static std::pair<int, int> quantized_and_mapped(const models::Model& m) {
    int quantized = 0, mapped = 0;
    for (const auto& [name, t] : m.parameters()) {
      if (!dtype_is_quantized(t.dtype())) continue;
      ++quantized;
      mapped += in_file_mapping(t.data(), t.nbytes()) ? 1 : 0;
    }
    return {quantized, mapped};
  }
  fs::path root_, checkpoint_, cache_;
  std::optional<test::ScopedEnv> cache_env_;
};

TEST_F(WeightsCache, FirstLoadWritesTheFileLaterLoadsMapItWithTheSameLogits) {
  const std::vector<int32_t> prompt = prompt_of("llama_mha_untied-f32");
  auto first = load();
  ASSERT_EQ(cache_files().size(), 1u);
  const auto [quantized, mapped] = quantized_and_mapped(*first);
  EXPECT_GE(quantized, 7) << "q/k/v/o/gate/up/down of a layer at least";
  EXPECT_EQ(mapped, quantized) << "the first load also reads its weights from the file it wrote";
  const std::vector<float> expected = logits_of(first, prompt);

  const fs::file_time_type written = fs::last_write_time(cache_files()[0]);
  EXPECT_EQ(first->load_stats().skipped_params, 0u);
  auto again = load();
  EXPECT_EQ(quantized_and_mapped(*again).second, quantized);
  EXPECT_EQ(again->load_stats().skipped_params, static_cast<size_t>(quantized))
      << "the cached weights' sources are not read again";
  EXPECT_EQ(fs::last_write_time(cache_files()[0]), written) << "a later load maps the file, it does not rewrite it";
  EXPECT_EQ(logits_diff(logits_of(again, prompt), expected).max_abs, 0.0);

  setenv("LOOM_CACHE_DIR", "off", 1);
  auto in_memory = load();
  EXPECT_EQ(quantized_and_mapped(*in_memory), std::make_pair(quantized, 0));
  EXPECT_EQ(logits_diff(logits_of(in_memory, prompt), expected).max_abs, 0.0) << "quantized in memory, read as rows";
  EXPECT_EQ(cache_files().size(), 1u);
}

// A recipe of the same name that picks other types (an older loom's, say, which
// quantized MoE routers) does not read the weights the first one cached.
TEST_F(WeightsCache, ARecipeChoosingOtherTypesGetsItsOwnEntry) {
  auto first = load();
  ASSERT_EQ(cache_files().size(), 1u);
  models::LoadOptions lo;
  lo.quantize = quantization_recipe("q4_k_m").value();
  lo.quantize->base = DType::kQ8_0;  // same name, other choices
  auto other = models::Model::load(checkpoint_.string(), lo).value();
  EXPECT_EQ(other->load_stats().skipped_params, 0u) << "the first recipe's cached weights were taken";
  EXPECT_EQ(other->parameters().at("model.layers.0.self_attn.q_proj.weight").dtype(), DType::kQ8_0);
  EXPECT_EQ(cache_files().size(), 2u);
}

TEST_F(WeightsCache, AChangedCheckpointGetsANewEntryAndABrokenOneIsMadeAgain) {
  const std::vector<int32_t> prompt = prompt_of("llama_mha_untied-f32");
  const std::vector<float> expected = logits_of(load(), prompt);
  ASSERT_EQ(cache_files().size(), 1u);
  const fs::path first = cache_files()[0];
  const fs::path weights = checkpoint_ / "model.safetensors";
  ASSERT_TRUE(fs::exists(weights));
  fs::last_write_time(weights, fs::last_write_time(weights) + std::chrono::seconds(5));
  EXPECT_EQ(logits_diff(logits_of(load(), prompt), expected).max_abs, 0.0);
  ASSERT_EQ(cache_files().size(), 1u) << "the old entry, whose source changed, is evicted";
  EXPECT_NE(cache_files()[0], first) << "the checkpoint's new time is a new key";
  // Another recipe of the same checkpoint is another file, kept beside it.
  models::LoadOptions q8;
  q8.quantize = quantization_recipe("q8_0").value();
  models::Model::load(checkpoint_.string(), q8).value();
  ASSERT_EQ(cache_files().size(), 2u);
  const std::vector<CacheEntryInfo> listed = weights_entries();
  ASSERT_EQ(listed.size(), 2u);
  for (const CacheEntryInfo& e : listed) {
    EXPECT_EQ(e.source, checkpoint_.string());
    EXPECT_TRUE(e.what == "quantized to q4_k_m" || e.what == "quantized to q8_0") << e.what;
    EXPECT_EQ(e.problem, "");
  }

  // Cut every cache file short: each load finds its entry unreadable, warns, quantizes
  // again and rewrites it.
  for (const fs::path& f : cache_files()) fs::resize_file(f, fs::file_size(f) / 2);
  auto reloaded = load();
  EXPECT_EQ(logits_diff(logits_of(reloaded, prompt), expected).max_abs, 0.0);
  const auto [quantized, mapped] = quantized_and_mapped(*reloaded);
  EXPECT_EQ(mapped, quantized);
  auto whole = [&] {
    int n = 0;
    for (const fs::path& f : cache_files()) n += io::GgufFile::open(f.string()).ok() ? 1 : 0;
    return n;
  };
  EXPECT_EQ(whole(), 1) << "the q4_k_m file is whole again";
  models::Model::load(checkpoint_.string(), q8).value();
  EXPECT_EQ(whole(), 2) << "and the q8_0 one";
  EXPECT_EQ(cache_files().size(), 2u);

  // A manifest damaged: the entry is made again too.
  for (const CacheEntryInfo& e : weights_entries())
    for (const std::string& f : e.files)
      if (f.ends_with(".entry")) std::ofstream(f) << "loom cache entry 1\nkind weights\n";
  auto remade = load();
  EXPECT_EQ(remade->load_stats().skipped_params, 0u) << "its weights are not taken from a damaged entry";
  EXPECT_EQ(logits_diff(logits_of(remade, prompt), expected).max_abs, 0.0);
  EXPECT_EQ(load()->load_stats().skipped_params, static_cast<size_t>(quantized)) << "the entry is whole again";
}

// A Llama GGUF stores q/k rows in llama.cpp's rotary order; the rows put back are
// made in memory, so they go through the cache too (no --quantize).
TEST_F(WeightsCache, LlamaCppQueryAndKeyRowsPutBackAreCachedAndMapped) {
  auto st = models::Model::load(std::string(LOOM_SOURCE_DIR) + "/models/loom-kjv-tiny").value();
  const fs::path gguf = root_ / "kjv.gguf";
  ASSERT_TRUE(models::save_gguf(*st, gguf.string()).ok());
  const std::vector<int32_t> prompt = {4090, 1130, 258, 2081, 386, 3355, 258, 733, 267, 258, 616, 46};
  auto mapped = models::Model::load(gguf.string()).value();
  ASSERT_EQ(cache_files().size(), 1u);
  EXPECT_EQ(cache_files()[0].filename().string().rfind("weights-", 0), 0u) << cache_files()[0];
  EXPECT_EQ(weights_entries()[0].what, "converted at load");
  int rows_put_back = 0;
  for (const auto& [name, t] : mapped->parameters()) {
    const bool qk = name.find("q_proj.weight") != std::string::npos || name.find("k_proj.weight") != std::string::npos;
    if (!qk) continue;
    ++rows_put_back;
    EXPECT_TRUE(in_file_mapping(t.data(), t.nbytes())) << name;
  }
  EXPECT_EQ(rows_put_back, 2 * st->config().num_hidden_layers);
  EXPECT_EQ(mapped->load_stats().materialized_params, static_cast<size_t>(rows_put_back));
  // A later load takes them from the cache without reading llama.cpp's rows.
  auto again = models::Model::load(gguf.string()).value();
  EXPECT_EQ(again->load_stats().materialized_params, 0u);
  EXPECT_EQ(again->load_stats().skipped_params, static_cast<size_t>(rows_put_back));
  for (const auto& [name, t] : again->parameters()) EXPECT_TRUE(t.data() != nullptr) << name;
  EXPECT_EQ(again->parameters().size(), mapped->parameters().size());
  EXPECT_EQ(logits_diff(logits_of(again, prompt), logits_of(mapped, prompt)).max_abs, 0.0);
  setenv("LOOM_CACHE_DIR", "off", 1);
  auto in_memory = models::Model::load(gguf.string()).value();
  EXPECT_FALSE(in_file_mapping(in_memory->parameters().at("model.layers.0.self_attn.q_proj.weight").data(), 1));
  const std::vector<float> expected = logits_of(st, prompt);
  EXPECT_EQ(logits_diff(logits_of(mapped, prompt), expected).max_abs, 0.0);
  EXPECT_EQ(logits_diff(logits_of(in_memory, prompt), expected).max_abs, 0.0);
}

// A cache file that lacks a weight the load makes (written by a load that made fewer)
// is written again with all of them, those it had included.
TEST_F(WeightsCache, AFileLackingAWeightIsWrittenAgainWithAllOfThem) {
  WeightsCacheKey key{checkpoint_.string(), "", "test", "the plan"};
  auto made = [](float v) { return Tensor::from_f32(std::vector<float>(64 * 1024, v), {256, 256}); };
  std::map<std::string, Tensor> params{{"a", made(1.0f)}};
  ASSERT_TRUE(map_weights_through_cache(key, {{"a", DType::kF32}}, &params).ok());
  std::map<std::string, Tensor> found = find_cached_weights(key);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_TRUE(in_file_mapping(found.at("a").data(), found.at("a").nbytes()));

  params = {{"a", found.at("a")}, {"b", made(2.0f)}};
  ASSERT_TRUE(map_weights_through_cache(key, {{"a", DType::kF32}, {"b", DType::kF32}}, &params).ok());
  found = find_cached_weights(key);
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found.at("a").to_f32_vector(), std::vector<float>(64 * 1024, 1.0f));
  EXPECT_EQ(found.at("b").to_f32_vector(), std::vector<float>(64 * 1024, 2.0f));
  EXPECT_EQ(cache_files().size(), 1u) << "the same key's entry, written again";

  WeightsCacheKey other = key;
  other.loaded = "another plan";
  EXPECT_TRUE(find_cached_weights(other).empty()) << "another plan is another key";
}

TEST_F(WeightsCache, AnUnwritableCacheDirectoryKeepsTheWeightsInMemory) {
  const fs::path blocker = root_ / "not-a-directory";
  std::ofstream(blocker) << "x";
  setenv("LOOM_CACHE_DIR", (blocker / "cache").c_str(), 1);
  const std::vector<int32_t> prompt = prompt_of("llama_mha_untied-f32");
  auto m = load();
  const auto [quantized, mapped] = quantized_and_mapped(*m);
  EXPECT_GT(quantized, 0);
  EXPECT_EQ(mapped, 0);
  setenv("LOOM_CACHE_DIR", cache_.c_str(), 1);
  EXPECT_EQ(logits_diff(logits_of(m, prompt), logits_of(load(), prompt)).max_abs, 0.0);
}

}  // namespace
}  // namespace loom::models_test
