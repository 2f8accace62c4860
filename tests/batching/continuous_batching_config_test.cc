#include "loom/batching/continuous_batching_config.h"

#include <gtest/gtest.h>

namespace loom::batching {
namespace {

using json = nlohmann::json;

TEST(ContinuousBatchingConfig, DefaultsAreTransformers) {
  const ContinuousBatchingConfig c;
  EXPECT_EQ(c.page_size, 256);
  EXPECT_FALSE(c.num_blocks);
  EXPECT_FALSE(c.max_batch_tokens);
  EXPECT_TRUE(c.allow_block_sharing);
  EXPECT_EQ(c.scheduler_type, "fifo");
  EXPECT_FALSE(c.return_logprobs);
  EXPECT_EQ(c.cpu_offload_space.value(), 0.0);
  EXPECT_DOUBLE_EQ(c.cpu_offload_space_safety_threshold, 0.8);
  EXPECT_EQ(c.max_queue_size, 0);
  EXPECT_EQ(c.kv_cache_dtype, "float32");
  EXPECT_EQ(c.kv_dtype(), DType::kF32);
  EXPECT_FALSE(c.per_request_processors);
  EXPECT_TRUE(c.drop_unsupported_processors);
  EXPECT_TRUE(c.disable_nccl_graph_mixing);
  EXPECT_EQ(c.cpu_group_timeout.value(), 300.0);
  EXPECT_TRUE(c.validate().ok());
  EXPECT_TRUE(c.cpu_no_op_fields().empty());
}

TEST(ContinuousBatchingConfig, LoadsEveryFieldFromJsonAndRoundTrips) {
  const json j = {{"page_size", 16}, {"num_blocks", 40}, {"max_batch_tokens", 64}, {"max_memory_percent", 0.5},
                  {"max_requests_per_batch", 8}, {"max_blocks_per_request", 12}, {"allow_block_sharing", false},
                  {"use_async_batching", true}, {"use_cuda_graph", json::array({true, false})},
                  {"q_padding_interval_size", 32}, {"kv_padding_interval_size", 64},
                  {"varlen_compile_config", {{"fullgraph", true}}}, {"decode_compile_config", nullptr},
                  {"default_compile_level", 2}, {"scheduler_type", "prefill_first"}, {"safety_margin", 0.1},
                  {"return_logprobs", true}, {"seed", 42}, {"auto_switch_to_flash", false},
                  {"cpu_offload_space", 1.5}, {"cpu_offload_space_safety_threshold", 0.5}, {"max_queue_size", 100},
                  {"per_request_processors", true}, {"drop_unsupported_processors", false},
                  {"disable_nccl_graph_mixing", false}, {"cpu_group_timeout", nullptr},
                  {"use_default_compile_configs", true}, {"max_cached_graphs", 4}, {"kv_cache_dtype", "bfloat16"},
                  {"adaptive_speculation", false}};
  const ContinuousBatchingConfig c = ContinuousBatchingConfig::from_json(j, "cb.json").value();
  EXPECT_EQ(c.page_size, 16);
  EXPECT_EQ(*c.num_blocks, 40);
  EXPECT_EQ(*c.max_batch_tokens, 64);
  EXPECT_EQ(c.use_cuda_graph->first, true);
  EXPECT_EQ(c.use_cuda_graph->second, false);
  EXPECT_EQ(c.varlen_compile_config->at("fullgraph"), true);
  EXPECT_FALSE(c.decode_compile_config);
  EXPECT_EQ(c.scheduler_type, "prefill_first");
  EXPECT_EQ(*c.seed, 42u);
  EXPECT_FALSE(c.cpu_group_timeout);
  EXPECT_EQ(*c.cpu_offload_space, 1.5);
  EXPECT_EQ(c.kv_dtype(), DType::kBF16);
  EXPECT_EQ(c.adaptive_speculation, false);
  const ContinuousBatchingConfig back = ContinuousBatchingConfig::from_json(c.to_json()).value();
  EXPECT_EQ(back.to_json(), c.to_json());
  // Every GPU-only field set above is reported as having no effect on CPU.
  const auto notes = c.cpu_no_op_fields();
  for (const char* f : {"use_cuda_graph", "q_padding_interval_size", "kv_padding_interval_size",
                        "varlen_compile_config", "default_compile_level", "auto_switch_to_flash",
                        "disable_nccl_graph_mixing", "use_default_compile_configs", "max_cached_graphs"}) {
    bool found = false;
    for (const auto& n : notes) found |= n.rfind(std::string(f) + ":", 0) == 0;
    EXPECT_TRUE(found) << f;
  }
  // cpu_group_timeout bounds tensor parallelism's waits: not a no-op.
  for (const auto& n : notes) EXPECT_NE(n.rfind("cpu_group_timeout:", 0), 0u) << n;
  const ContinuousBatchingConfig both = ContinuousBatchingConfig::from_json({{"use_cuda_graph", true}}).value();
  EXPECT_TRUE(both.use_cuda_graph->first && both.use_cuda_graph->second);
}

TEST(ContinuousBatchingConfig, BadValuesNameTheField) {
  auto err = [](const json& j) {
    Result<ContinuousBatchingConfig> r = ContinuousBatchingConfig::from_json(j, "cb.json");
    return r.ok() ? std::string("ok") : r.status().message();
  };
  EXPECT_NE(err({{"page_size", 0}}).find("page_size"), std::string::npos);
  EXPECT_NE(err({{"num_blocks", -1}}).find("num_blocks"), std::string::npos);
  EXPECT_NE(err({{"max_batch_tokens", 0}}).find("max_batch_tokens"), std::string::npos);
  EXPECT_NE(err({{"max_memory_percent", 1.5}}).find("max_memory_percent"), std::string::npos);
  EXPECT_NE(err({{"scheduler_type", "lifo"}}).find("scheduler_type"), std::string::npos);
  EXPECT_NE(err({{"kv_cache_dtype", "float8"}}).find("field 'kv_cache_dtype' must be one of float32, bfloat16, float16, q8_0, q4_0"),
            std::string::npos)
      << err({{"kv_cache_dtype", "float8"}});
  EXPECT_NE(err({{"cache_type_k", "q5_1"}}).find("field 'cache_type_k'"), std::string::npos);
  EXPECT_NE(err({{"cache_type_v", "int8"}}).find("field 'cache_type_v'"), std::string::npos);
  EXPECT_NE(err({{"kv_cache_rotation", "yes"}}).find("field 'kv_cache_rotation' must be 'auto', 'on' or 'off'"),
            std::string::npos);
  EXPECT_NE(err({{"kv_cache_dtype", 16}}).find("kv_cache_dtype"), std::string::npos);
  EXPECT_NE(err({{"safety_margin", 1.0}}).find("safety_margin"), std::string::npos);
  EXPECT_NE(err({{"cpu_offload_space", -2}}).find("cpu_offload_space"), std::string::npos);
  EXPECT_NE(err({{"cpu_offload_space_safety_threshold", 0}}).find("cpu_offload_space_safety_threshold"), std::string::npos);
  EXPECT_NE(err({{"max_queue_size", -1}}).find("max_queue_size"), std::string::npos);
  EXPECT_NE(err({{"default_compile_level", 4}}).find("default_compile_level"), std::string::npos);
  // io's one reader and its one text; 2.0 is an integer there, 2.5 is not.
  EXPECT_EQ(err({{"page_size", 2.5}}), "cb.json: field 'page_size' must be an integer, got 2.5");
  EXPECT_EQ(ContinuousBatchingConfig::from_json({{"page_size", 32.0}}).value().page_size, 32);
  EXPECT_NE(err({{"allow_block_sharing", "yes"}}).find("allow_block_sharing"), std::string::npos);
  EXPECT_NE(err({{"use_cuda_graph", json::array({true})}}).find("use_cuda_graph"), std::string::npos);
  EXPECT_NE(err({{"varlen_compile_config", 3}}).find("varlen_compile_config"), std::string::npos);
  EXPECT_NE(err({{"pagesize", 16}}).find("unknown field 'pagesize'"), std::string::npos);
  EXPECT_NE(err({{"seed", -1}}).find("seed"), std::string::npos);
  EXPECT_NE(err(json::array()).find("JSON object"), std::string::npos);
  // The deprecated block_size is an alias, but not a contradicting one.
  EXPECT_EQ(ContinuousBatchingConfig::from_json({{"block_size", 32}}).value().effective_page_size(), 32);
  EXPECT_NE(err({{"block_size", 32}, {"page_size", 64}}).find("block_size"), std::string::npos);
}

TEST(ContinuousBatchingConfig, ResolveInfersWhatIsUnset) {
  ContinuousBatchingConfig c;
  c.page_size = 16;
  // 1 MiB available, 90% of it for blocks of 16 positions × 4 layers × 64 bytes = 4 KiB.
  const CbResources r = resolve(c, 64, 4, 1 << 20, 1 << 30).value();
  EXPECT_EQ(r.block_bytes, 4096u);
  EXPECT_EQ(r.num_blocks, static_cast<int64_t>(0.9 * (1 << 20) / 4096));
  EXPECT_EQ(r.max_batch_tokens, 256);
  EXPECT_EQ(r.max_requests_per_batch, 256);  // capped by the token budget
  EXPECT_DOUBLE_EQ(r.safety_margin, 0.2);   // fifo's default
  EXPECT_EQ(r.swap_pages, 0);
  c.num_blocks = 7;
  c.max_batch_tokens = 32;
  c.scheduler_type = "prefill_first";
  c.cpu_offload_space = 1.0 / 1024;  // 1 MiB of 1 KiB pages
  const CbResources s = resolve(c, 64, 4, 1 << 20, 1ull << 30).value();
  EXPECT_EQ(s.num_blocks, 7);
  EXPECT_EQ(s.max_requests_per_batch, 32);
  EXPECT_DOUBLE_EQ(s.safety_margin, 0.0);
  EXPECT_EQ(s.swap_pages, 1024);
  c.cpu_offload_space = 4.0;  // more than 0.8 of 1 GiB of RAM: clamped
  EXPECT_EQ(resolve(c, 64, 4, 1 << 20, 1ull << 30).value().swap_pages,
            static_cast<int64_t>(0.8 * (1ull << 30) / 1024));
  c.num_blocks.reset();
  c.max_memory_percent = 0.5;
  EXPECT_EQ(resolve(c, 64, 4, 1 << 20, 1ull << 30).value().num_blocks, 128);
  EXPECT_FALSE(resolve(c, 64, 4, 1000, 1ull << 30).ok());  // not even one block
}

TEST(ContinuousBatchingConfig, ResolveInfersTheStepBudgetFromMemory) {
  ContinuousBatchingConfig c;
  c.page_size = 16;
  c.max_memory_percent = 0.5;
  const size_t available = 64ull << 20;     // 64 MiB: a budget of 32 MiB
  const size_t act = 256 * 1024;            // 256 KiB of activations per step token
  const double budget = 0.5 * static_cast<double>(available);
  // Both unset: a step is 1% of the positions the pool holds (capped at 256), the
  // blocks take the rest. Blocks are 16 positions × 4 layers × 64 bytes = 4 KiB.
  CbResources r = resolve(c, 64, 4, available, 1ull << 30, act).value();
  EXPECT_TRUE(r.max_batch_tokens_inferred);
  const double positions = budget / (4096.0 / 16 + 0.01 * static_cast<double>(act));
  EXPECT_EQ(r.max_batch_tokens, static_cast<int64_t>(0.01 * positions));
  EXPECT_EQ(r.num_blocks, static_cast<int64_t>((budget - static_cast<double>(r.max_batch_tokens * act)) / 4096));
  EXPECT_LE(static_cast<double>(r.num_blocks) * 4096 + static_cast<double>(r.max_batch_tokens * act), budget);
  // num_blocks given: the step gets what the blocks leave.
  c.num_blocks = 4000;
  r = resolve(c, 64, 4, available, 1ull << 30, act).value();
  EXPECT_EQ(r.max_batch_tokens, static_cast<int64_t>((budget - 4000.0 * 4096) / static_cast<double>(act)));
  // ... and nothing left is an error naming the fields.
  c.num_blocks = 9000;
  Result<CbResources> bad = resolve(c, 64, 4, available, 1ull << 30, act);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("num_blocks = 9000"), std::string::npos) << bad.status().to_string();
  // max_batch_tokens given: the blocks get what the step leaves.
  c.num_blocks.reset();
  c.max_batch_tokens = 20;
  r = resolve(c, 64, 4, available, 1ull << 30, act).value();
  EXPECT_FALSE(r.max_batch_tokens_inferred);
  EXPECT_EQ(r.num_blocks, static_cast<int64_t>((budget - 20.0 * static_cast<double>(act)) / 4096));
  // Plenty of memory: the step budget stops at 256.
  c.max_batch_tokens.reset();
  EXPECT_EQ(resolve(c, 64, 4, 64ull << 30, 1ull << 36, act).value().max_batch_tokens, 256);
}

TEST(ContinuousBatchingConfig, FileBackedSwapIsBoundedByTheDisk) {
  ContinuousBatchingConfig c = ContinuousBatchingConfig::from_json(
      {{"cpu_offload_space", 1e6}, {"cpu_offload_path", "/tmp"}, {"num_blocks", 8}, {"max_batch_tokens", 16}}).value();
  EXPECT_EQ(*c.cpu_offload_path, "/tmp");
  EXPECT_EQ(c.to_json()["cpu_offload_path"], "/tmp");
  const size_t disk = free_disk_bytes("/tmp");
  ASSERT_GT(disk, 0u);
  const CbResources r = resolve(c, 64, 4, 1 << 20, 1ull << 40).value();  // RAM would allow far more
  EXPECT_EQ(r.swap_path, "/tmp");
  EXPECT_LE(static_cast<double>(r.swap_pages) * 64 * 256, 0.8 * static_cast<double>(disk) + 1);
  EXPECT_FALSE(ContinuousBatchingConfig::from_json({{"cpu_offload_path", ""}}).ok());
  EXPECT_FALSE(ContinuousBatchingConfig::from_json({{"cpu_offload_path", 3}}).ok());
}

}  // namespace
}  // namespace loom::batching
