// Seeded sampling gives the same tokens run after run and whatever the thread
// count: the kernels' reduction order does not depend on the split.
#include <gtest/gtest.h>

#include <filesystem>

#include "loom/batching/generate.h"
#include "loom/models/model.h"
#include "models/models_test_util.h"

namespace loom {
namespace {

using models_test::fixture;

std::vector<int32_t> sample(const std::shared_ptr<models::Model>& model, int threads, uint64_t seed) {
  ThreadPool pool(threads);
  auto runner = batching::ModelRunner::create(model, "cpu", &pool).value();
  batching::GenerateOptions o;
  o.max_new_tokens = 40;
  o.sampling.do_sample = true;
  o.sampling.temperature = 1.3f;  // flat enough that tokens vary
  o.sampling.top_k = 40;
  o.sampling.top_p = 0.97f;
  o.sampling.repetition_penalty = 1.1f;
  o.seed = seed;
  return batching::generate(*runner, {5, 17, 42, 9, 100, 3}, o).value().generated_ids;
}

TEST(SamplingDeterminism, SameSeedSameTokensAcrossRunsAndThreadCounts) {
  for (const char* variant : {"llama-f32", "qwen3-bf16"}) {
    auto model = models::Model::load(fixture(variant)).value();
    const auto one = sample(model, 1, 1234);
    EXPECT_EQ(one, sample(model, 1, 1234)) << variant;
    EXPECT_EQ(one, sample(model, 2, 1234)) << variant;
    EXPECT_EQ(one, sample(model, 3, 1234)) << variant;
    EXPECT_NE(one, sample(model, 2, 99)) << variant << ": a different seed should change the sample";
  }
}

TEST(Generate, StopsAtEosAndRejectsBadInput) {
  auto model = models::Model::load(fixture("llama-f32")).value();
  auto runner = batching::ModelRunner::create(model, "cpu").value();
  batching::GenerateOptions o;
  o.max_new_tokens = 10;
  auto greedy = batching::generate(*runner, {1, 2, 3}, o).value();
  ASSERT_EQ(greedy.generated_ids.size(), 10u);
  EXPECT_EQ(greedy.finish_reason, generation::FinishReason::kLength);
  // Declaring the 4th greedy token EOS stops right there.
  o.eos_token_ids = {greedy.generated_ids[3]};
  auto stopped = batching::generate(*runner, {1, 2, 3}, o).value();
  EXPECT_EQ(stopped.finish_reason, generation::FinishReason::kEos);
  EXPECT_EQ(stopped.generated_ids.size(), 4u);

  EXPECT_EQ(batching::generate(*runner, {}, o).status().code(), ErrorCode::kInvalidArgument);
  auto bad = batching::generate(*runner, {1, static_cast<int32_t>(model->vocab_size()), 3}, o);
  EXPECT_EQ(bad.status().code(), ErrorCode::kOutOfRange);
  EXPECT_NE(bad.status().message().find("vocabulary"), std::string::npos) << bad.status().message();
  // The runner is still usable after a rejected request.
  EXPECT_EQ(batching::generate(*runner, {1, 2, 3}, o).value().generated_ids, stopped.generated_ids);
}

}  // namespace
}  // namespace loom
