// Prefix caching end to end: requests sharing a long prefix find its blocks in
// the cache, report the expected hits, and generate what they generate without
// sharing (and alone).
#include <gtest/gtest.h>

#include <random>

#include "batching_test_util.h"
#include "loom/batching/generate_batch.h"

namespace loom::batching {
namespace {

using testing::alone;
using testing::load_fixture;
using testing::make_runner;
using testing::random_tokens;

TEST(PrefixSharing, SharedPrefixHitsTheCacheAndChangesNothing) {
  auto model = load_fixture("llama-f32");
  auto runner = make_runner(model);
  std::mt19937 rng(21);
  // The case: 32 requests behind a shared 300-token prefix. Only whole
  // pages are shared: 18 of them (288 positions); the rest of the prefix is
  // computed by each request.
  constexpr int64_t kPage = 16, kPrefix = 300, kRequests = 32, kShared = kPrefix / kPage * kPage;
  const std::vector<int32_t> prefix = random_tokens(rng, kPrefix, model->vocab_size());
  std::vector<BatchInput> inputs;
  for (int i = 0; i < kRequests; ++i) {
    BatchInput in;
    in.input_ids = prefix;
    const auto suffix = random_tokens(rng, 1 + i % 7, model->vocab_size());
    in.input_ids.insert(in.input_ids.end(), suffix.begin(), suffix.end());
    in.options.max_new_tokens = 4;
    in.options.request_id = "r" + std::to_string(i);
    inputs.push_back(std::move(in));
  }
  ContinuousBatchingConfig cfg;
  cfg.page_size = kPage;
  cfg.num_blocks = 800;
  GenerateBatchOptions opts;
  opts.warmup = false;
  std::shared_ptr<ContinuousBatchingManager> shared;
  opts.persistent_manager = &shared;

  // The first request fills the cache; the others then each find the prefix's
  // whole pages there.
  const BatchResult first = generate_batch(runner, {inputs[0]}, testing::no_eos_config(), cfg, opts).value();
  EXPECT_EQ(first.stats.prefix_hit_tokens, 0);
  const std::vector<BatchInput> rest(inputs.begin() + 1, inputs.end());
  const BatchResult with = generate_batch(runner, rest, testing::no_eos_config(), cfg, opts).value();
  EXPECT_EQ(with.stats.prefix_hit_tokens, (kRequests - 1) * kShared);
  EXPECT_EQ(with.stats.computed_tokens - first.stats.computed_tokens,
            [&] {
              int64_t n = 0;  // only the suffixes and decodes were computed
              for (const BatchInput& in : rest) n += static_cast<int64_t>(in.input_ids.size()) - kShared + 3;
              return n;
            }());
  shared->destroy();

  cfg.allow_block_sharing = false;
  opts.persistent_manager = nullptr;
  const BatchResult without = generate_batch(runner, inputs, testing::no_eos_config(), cfg, opts).value();
  EXPECT_EQ(without.stats.prefix_hit_tokens, 0);
  ASSERT_EQ(with.outputs.size(), rest.size());
  for (size_t i = 0; i < rest.size(); ++i) {
    EXPECT_EQ(with.outputs[i].request_id, rest[i].options.request_id);  // input order
    EXPECT_EQ(with.outputs[i].generated_tokens, without.outputs[i + 1].generated_tokens) << i;
    EXPECT_EQ(with.outputs[i].generated_tokens, alone(*runner, rest[i].input_ids, 4)) << i;
  }
  EXPECT_EQ(first.outputs[0].generated_tokens, without.outputs[0].generated_tokens);
}

// Stats are published before a request's final output is delivered, so a caller who
// has the result already sees its cache hit (the loop used to publish after the step).
TEST(PrefixSharing, StatsCountAHitBeforeItsResultArrives) {
  auto model = load_fixture("llama-f32");
  auto runner = make_runner(model);
  std::mt19937 rng(5);
  constexpr int64_t kPage = 16, kPrefix = 64;
  const std::vector<int32_t> prefix = random_tokens(rng, kPrefix, model->vocab_size());
  ContinuousBatchingConfig cfg;
  cfg.page_size = kPage;
  cfg.num_blocks = 64;
  auto m = ContinuousBatchingManager::create(runner, testing::no_eos_config(), cfg).value();
  ASSERT_TRUE(m->start().ok());
  RequestOptions o;
  o.max_new_tokens = 1;
  for (int round = 0; round < 6; ++round) {
    std::vector<int32_t> p = prefix;
    p.push_back(static_cast<int32_t>(3 + round));
    o.request_id = "q" + std::to_string(round);
    ASSERT_TRUE(m->add_request(p, o).ok());
    const std::optional<GenerationOutput> out = m->get_result(o.request_id, 60.0);
    ASSERT_TRUE(out.has_value());
    ASSERT_EQ(out->status, RequestStatus::kFinished);
    // Every round after the first finds the prefix's 4 whole pages.
    EXPECT_EQ(m->stats().prefix_hit_tokens, round * kPrefix) << "round " << round;
  }
  m->destroy();
}

TEST(GenerateBatch, KeepsInputOrderAndReportsFailuresInPlace) {
  auto model = load_fixture("llama-f32");
  auto runner = make_runner(model);
  std::mt19937 rng(8);
  std::vector<BatchInput> inputs(5);
  for (int i = 0; i < 5; ++i) {
    inputs[static_cast<size_t>(i)].input_ids = random_tokens(rng, 20 - 3 * i, model->vocab_size());
    inputs[static_cast<size_t>(i)].options.max_new_tokens = 1 + i;
  }
  inputs[2].input_ids = {1, 99999};  // outside the vocabulary: fails alone
  ContinuousBatchingConfig cfg;
  cfg.page_size = 16;
  cfg.num_blocks = 64;
  std::vector<BatchProgress> progress;
  GenerateBatchOptions opts;
  opts.record_timestamps = true;
  opts.progress = [&](const BatchProgress& p) { progress.push_back(p); };
  const BatchResult r = generate_batch(runner, inputs, testing::no_eos_config(), cfg, opts).value();
  ASSERT_EQ(r.outputs.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    const GenerationOutput& o = r.outputs[static_cast<size_t>(i)];
    EXPECT_EQ(o.prompt_ids, inputs[static_cast<size_t>(i)].input_ids);
    if (i == 2) {
      EXPECT_EQ(o.status, RequestStatus::kFailed);
      EXPECT_EQ(o.error_code, ErrorCode::kOutOfRange);
      continue;
    }
    EXPECT_EQ(o.status, RequestStatus::kFinished);
    EXPECT_EQ(o.generated_tokens, alone(*runner, o.prompt_ids, 1 + i));
    EXPECT_EQ(o.timestamps.size(), o.generated_tokens.size());
    EXPECT_EQ(r.find(o.request_id), &o);
  }
  ASSERT_FALSE(progress.empty());
  EXPECT_EQ(progress.back().done, 5);
  EXPECT_EQ(progress.back().total, 5);
  EXPECT_EQ(progress.back().generated_tokens, 1 + 2 + 4 + 5);
}

}  // namespace
}  // namespace loom::batching
