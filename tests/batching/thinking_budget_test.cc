// RequestOptions::thinking_budget on the bundled model: with the section open from the
// prompt, the first `after_tokens` tokens are the unbudgeted greedy run's, the next ones are
// exactly close_ids, and what follows is the greedy continuation of prompt + those
// tokens; a section already closed, or never opened, is left alone; with a constraint
// the request is refused.
#include <gtest/gtest.h>

#include "batching_test_util.h"
#include "loom/batching/tokenizer_text_stream.h"
#include "loom/tokenizer/tokenizer.h"

namespace loom::batching {
namespace {

struct TbModel {
  std::shared_ptr<ModelRunner> runner;
  std::shared_ptr<Tokenizer> tokenizer;
};

TbModel& tb_model() {
  static TbModel b = [] {
    TbModel x;
    const std::string dir = std::string(LOOM_SOURCE_DIR) + "/models/loom-kjv-tiny";
    x.runner = testing::make_runner(models::Model::load(dir).value());
    x.tokenizer = Tokenizer::from_dir(dir).value();
    return x;
  }();
  return b;
}

std::vector<int32_t> tb_ids(const std::string& text) { return tb_model().tokenizer->encode(text, false).value().ids; }

std::unique_ptr<ContinuousBatchingManager> tb_manager() {
  ManagerOptions mo;
  std::shared_ptr<Tokenizer> tok = tb_model().tokenizer;
  mo.text_stream = [tok](const std::vector<int32_t>& prompt) -> std::unique_ptr<TextStream> {
    auto s = std::make_unique<TokenizerTextStream>(tok);
    s->start(prompt);
    return s;
  };
  auto m = ContinuousBatchingManager::create(tb_model().runner, testing::no_eos_config(), ContinuousBatchingConfig{},
                                             std::move(mo))
               .value();
  EXPECT_TRUE(m->start().ok());
  return m;
}

std::vector<int32_t> tb_run(ContinuousBatchingManager& m, const std::vector<int32_t>& prompt, int64_t max_new,
                         std::optional<ThinkingBudget> budget) {
  RequestOptions o;
  o.max_new_tokens = max_new;
  o.thinking_budget = std::move(budget);
  const std::string id = m.add_request(prompt, o).value();
  auto out = m.get_result(id, 120.0);
  EXPECT_TRUE(out.has_value());
  EXPECT_EQ(out->status, RequestStatus::kFinished) << out->error;
  return out->generated_tokens;
}

ThinkingBudget tb_budget(int64_t after, bool open_at_start) {
  ThinkingBudget b;
  b.after_tokens = after;
  b.open = "<think>";
  b.close = "</think>";
  b.open_at_start = open_at_start;
  b.close_ids = tb_ids("\n</think>\n\n");
  return b;
}

TEST(ThinkingBudget, ForcesTheCloseTagThenContinuesGreedily) {
  auto m = tb_manager();
  const std::vector<int32_t> prompt = tb_model().tokenizer->encode("In the beginning <think>\n", true).value().ids;
  const std::vector<int32_t> unbudgeted = tb_run(*m, prompt, 24, std::nullopt);
  const ThinkingBudget b = tb_budget(5, true);
  const std::vector<int32_t> got = tb_run(*m, prompt, 24, b);
  ASSERT_EQ(got.size(), 24u);
  EXPECT_EQ(std::vector<int32_t>(got.begin(), got.begin() + 5), std::vector<int32_t>(unbudgeted.begin(), unbudgeted.begin() + 5));
  EXPECT_EQ(std::vector<int32_t>(got.begin() + 5, got.begin() + 5 + static_cast<long>(b.close_ids.size())), b.close_ids);
  // The rest is what greedy decoding makes of everything before it.
  std::vector<int32_t> forced_prefix = prompt;
  forced_prefix.insert(forced_prefix.end(), got.begin(), got.begin() + 5 + static_cast<long>(b.close_ids.size()));
  const size_t rest = got.size() - 5 - b.close_ids.size();
  const std::vector<int32_t> cont = tb_run(*m, forced_prefix, static_cast<int64_t>(rest), std::nullopt);
  EXPECT_EQ(std::vector<int32_t>(got.end() - static_cast<long>(rest), got.end()), cont);
  ASSERT_TRUE(m->stop(true, 30.0).ok());
}

TEST(ThinkingBudget, LeavesClosedOrUnopenedSectionsAlone) {
  auto m = tb_manager();
  const std::vector<int32_t> prompt = tb_model().tokenizer->encode("In the beginning", true).value().ids;
  const std::vector<int32_t> unbudgeted = tb_run(*m, prompt, 12, std::nullopt);
  // Not opened by the prompt, and the model writes no <think>: nothing is forced.
  EXPECT_EQ(tb_run(*m, prompt, 12, tb_budget(3, false)), unbudgeted);
  // Budget 0 with the section open: the close tag comes first.
  const ThinkingBudget b = tb_budget(0, true);
  const std::vector<int32_t> got = tb_run(*m, prompt, 12, b);
  EXPECT_EQ(std::vector<int32_t>(got.begin(), got.begin() + static_cast<long>(b.close_ids.size())), b.close_ids);
  ASSERT_TRUE(m->stop(true, 30.0).ok());
}

TEST(ThinkingBudget, BadBudgetsAreRefused) {
  auto m = tb_manager();
  RequestOptions o;
  o.thinking_budget = tb_budget(2, true);
  o.thinking_budget->close_ids = {-1};
  EXPECT_FALSE(m->add_request({1, 2, 3}, o).ok());
  o.thinking_budget = tb_budget(-1, true);
  EXPECT_FALSE(m->add_request({1, 2, 3}, o).ok());
  ASSERT_TRUE(m->stop(true, 30.0).ok());
}

}  // namespace
}  // namespace loom::batching
