// Grammar-constrained requests in a continuous batch: each one's greedy tokens equal
// what it generates alone through batching::generate with the same constraint, mixed
// with unconstrained requests and under a pool small enough to preempt; outputs match
// their constraint; max_new_tokens inside an open structure ends with "length".
#include <gtest/gtest.h>

#include <map>
#include <regex>

#include "batching_test_util.h"
#include "loom/structured/constraint.h"
#include "loom/structured/grammar_matcher.h"
#include "loom/tokenizer/tokenizer.h"

namespace loom::batching {
namespace {

using structured::ConstraintSpec;

struct Bundled {
  std::shared_ptr<const models::Model> model;
  std::shared_ptr<ModelRunner> runner;
  std::shared_ptr<Tokenizer> tokenizer;
  std::unique_ptr<structured::ConstraintRegistry> registry;
};

Bundled& bundled() {
  static Bundled b = [] {
    Bundled x;
    const std::string dir = std::string(LOOM_SOURCE_DIR) + "/models/loom-kjv-tiny";
    x.model = models::Model::load(dir).value();
    x.runner = testing::make_runner(x.model);
    x.tokenizer = Tokenizer::from_dir(dir).value();
    x.registry = std::make_unique<structured::ConstraintRegistry>(structured::TokenVocabulary::from_tokenizer(*x.tokenizer));
    return x;
  }();
  return b;
}

std::shared_ptr<structured::Constraint> constraint(ConstraintSpec::Kind kind, std::string text,
                                                   std::vector<std::string> choices = {},
                                                   structured::ConstraintRegistry* registry = nullptr) {
  ConstraintSpec s;
  s.kind = kind;
  s.text = std::move(text);
  s.choices = std::move(choices);
  return (registry ? registry : bundled().registry.get())->get(s).value();
}

std::vector<int32_t> encode(const std::string& text) { return bundled().tokenizer->encode(text, true).value().ids; }
std::string decode(const std::vector<int32_t>& ids) { return bundled().tokenizer->decode(ids, true).value(); }

struct Req {
  std::vector<int32_t> prompt;
  std::shared_ptr<structured::Constraint> constraint;  // null: unconstrained
  int64_t max_new;
};

// registry: where the constraints are compiled (a fresh one: masks not cached yet).
std::vector<Req> workload(structured::ConstraintRegistry* registry = nullptr) {
  const char* schema = R"({"type":"object","properties":{"book":{"enum":["Genesis","Exodus","Psalms"]},
      "chapter":{"type":"integer","minimum":1,"maximum":150},"words":{"type":"array","items":{"type":"string","maxLength":12},"maxItems":3}},
      "required":["book","chapter","words"],"additionalProperties":false})";
  std::vector<Req> w;
  const char* prompts[] = {"In the beginning God created", "And the LORD spake unto Moses, saying,",
                           "Blessed is the man", "The LORD is my shepherd;", "And it came to pass"};
  for (int i = 0; i < 15; ++i) {
    Req r;
    r.prompt = encode(prompts[i % 5]);
    r.max_new = 60;
    switch (i % 5) {
      case 0: r.constraint = constraint(ConstraintSpec::Kind::kJsonSchema, schema, {}, registry); break;
      case 1: r.constraint = constraint(ConstraintSpec::Kind::kRegex, "[A-Z][a-z]+ (of|and|the) [a-z]+\\.", {}, registry); break;
      case 2: r.constraint = constraint(ConstraintSpec::Kind::kChoice, "", {"blessing", "curse", "covenant"}, registry); break;
      case 3: r.constraint = constraint(ConstraintSpec::Kind::kJsonObject, "", {}, registry); r.max_new = 24; break;
      default: break;  // unconstrained neighbours
    }
    w.push_back(std::move(r));
  }
  return w;
}

std::vector<int32_t> eos_ids() {
  std::vector<int32_t> e;
  if (auto id = bundled().tokenizer->eos_token_id()) e.push_back(*id);
  return e;
}

GenerateResult alone(const Req& r) {
  GenerateOptions o;
  o.max_new_tokens = r.max_new;
  o.eos_token_ids = eos_ids();
  o.constraint = r.constraint;
  return generate(*bundled().runner, r.prompt, o).value();
}

void run_batched(const std::vector<Req>& w, const std::vector<GenerateResult>& expected, int64_t num_blocks, bool async,
                 bool expect_preemption = false, ManagerOptions options = {}) {
  ContinuousBatchingConfig cfg;
  cfg.page_size = 16;
  cfg.num_blocks = num_blocks;
  cfg.max_batch_tokens = 64;
  cfg.use_async_batching = async;
  cfg.safety_margin = 0;
  cfg.allow_block_sharing = !expect_preemption;
  GenerationConfig gc;
  gc.max_new_tokens = 60;
  for (int32_t id : eos_ids()) gc.eos_token_ids.push_back(id);
  auto m = ContinuousBatchingManager::create(bundled().runner, gc, cfg, std::move(options)).value();
  std::map<std::string, size_t> index;
  // Queued before the loop starts, so a tight pool really fills.
  for (size_t i = 0; i < w.size(); ++i) {
    RequestOptions o;
    o.max_new_tokens = w[i].max_new;
    o.constraint = w[i].constraint;
    index[m->add_request(w[i].prompt, o).value()] = i;
  }
  ASSERT_TRUE(m->start().ok());
  for (size_t done = 0; done < w.size(); ++done) {
    auto out = m->get_result(std::nullopt, 120.0);
    ASSERT_TRUE(out.has_value());
    const size_t i = index.at(out->request_id);
    ASSERT_EQ(out->status, RequestStatus::kFinished) << out->request_id << ": " << out->error;
    EXPECT_EQ(out->generated_tokens, expected[i].generated_ids) << "request " << i;
    EXPECT_EQ(out->finish_reason, expected[i].finish_reason) << "request " << i;
  }
  ASSERT_TRUE(m->stop(true, 30.0).ok());
  const ManagerStats s = m->stats();
  if (expect_preemption) EXPECT_GT(s.preempted_recompute + s.preempted_swap, 0);
}

TEST(ConstrainedBatching, GreedyOutputEqualsRunningAlone) {
  const auto w = workload();
  std::vector<GenerateResult> expected;
  for (const Req& r : w) expected.push_back(alone(r));
  // The alone results honour their constraints.
  for (size_t i = 0; i < w.size(); ++i) {
    if (!w[i].constraint) continue;
    std::vector<int32_t> ids = expected[i].generated_ids;
    if (!ids.empty() && !eos_ids().empty() && ids.back() == eos_ids()[0]) ids.pop_back();
    const std::string text = decode(ids);
    auto& g = *w[i].constraint->grammar();
    if (expected[i].finish_reason == generation::FinishReason::kEos) {
      EXPECT_TRUE(structured::grammar_matches(g, text)) << "request " << i << ": '" << text << "'";
    } else {
      EXPECT_EQ(expected[i].finish_reason, generation::FinishReason::kLength) << i;
      structured::GrammarMatcher m(w[i].constraint->grammar());
      EXPECT_TRUE(m.accept(text)) << "request " << i << " is not a prefix of its language: '" << text << "'";
    }
    if (i % 5 == 2) {
      EXPECT_TRUE(text == "blessing" || text == "curse" || text == "covenant") << text;
    }
    if (i % 5 == 1 && expected[i].finish_reason == generation::FinishReason::kEos) {
      EXPECT_TRUE(std::regex_match(text, std::regex("[A-Z][a-z]+ (of|and|the) [a-z]+\\."))) << text;
    }
  }
  run_batched(w, expected, 400, false);
  run_batched(w, expected, 400, true);
  run_batched(w, expected, 7, false, /*expect_preemption=*/true);  // 7 pages: requests preempt and recompute
}

// Masks computed on the prefetch worker while the forward runs, or on the batching
// thread when the logits arrive: the same tokens. Each run compiles its constraints
// afresh, so its masks are computed during the run (not found in a cache).
TEST(ConstrainedBatching, PrefetchedMasksGiveTheSynchronousOutput) {
  std::vector<GenerateResult> expected;
  for (const Req& r : workload()) expected.push_back(alone(r));
  for (bool prefetch : {false, true}) {
    for (bool async : {false, true}) {
      SCOPED_TRACE(std::string(prefetch ? "prefetch" : "synchronous") + (async ? ", async batching" : ""));
      structured::ConstraintRegistry fresh(bundled().registry->vocabulary());
      const auto w = workload(&fresh);
      ManagerOptions o;
      o.prefetch_masks = prefetch;
      run_batched(w, expected, 400, async, false, o);
      uint64_t prefetched = 0, computed = 0;
      for (const Req& r : w) {
        if (!r.constraint) continue;
        prefetched += r.constraint->cache_stats().prefetched;
        computed += r.constraint->cache_stats().misses + r.constraint->cache_stats().prefetched +
                    r.constraint->cache_stats().precomputed;
      }
      EXPECT_GT(computed, 0u);
      if (prefetch) EXPECT_GT(prefetched, 0u);
      else EXPECT_EQ(prefetched, 0u);
    }
  }
}

TEST(ConstrainedBatching, MaxTokensInsideAnOpenStructureEndsWithLength) {
  Req r;
  r.prompt = encode("In the beginning");
  r.constraint = constraint(ConstraintSpec::Kind::kJsonSchema,
                            R"({"type":"object","properties":{"text":{"type":"string","minLength":200}},"required":["text"]})");
  r.max_new = 5;
  GenerateResult g = alone(r);
  EXPECT_EQ(g.finish_reason, generation::FinishReason::kLength);
  EXPECT_EQ(g.generated_ids.size(), 5u);
  structured::GrammarMatcher m(r.constraint->grammar());
  const std::string text = decode(g.generated_ids);
  EXPECT_TRUE(m.accept(text)) << text;
  EXPECT_FALSE(m.accepting());
  EXPECT_EQ(text.front(), '{') << text;
}

TEST(ConstrainedBatching, ForeignVocabularyIsRefused) {
  // A constraint compiled for a larger vocabulary than the model's is refused by name.
  std::vector<std::optional<std::string>> bytes(bundled().model->vocab_size() + 10, std::string("a"));
  auto vocab = std::make_shared<structured::TokenVocabulary>(std::move(bytes));
  ConstraintSpec s;
  s.kind = ConstraintSpec::Kind::kRegex;
  s.text = "a+";
  auto c = structured::Constraint::compile(s, vocab).value();
  auto m = ContinuousBatchingManager::create(bundled().runner, GenerationConfig{}, ContinuousBatchingConfig{}).value();
  RequestOptions o;
  o.constraint = c;
  auto id = m->add_request(encode("In the beginning"), o);
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.status().message().find("vocabulary"), std::string::npos) << id.status().message();
}

}  // namespace
}  // namespace loom::batching
