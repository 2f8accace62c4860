// Speculative decoding by prompt lookup: drafting, the adaptive draft length, and
// exactness — a speculative request produces exactly the tokens (and text) of
// plain decoding, alone and inside continuous batching next to plain requests,
// through preemption, and the KV pool ends as if the rejected drafts had never
// been written.
#include <gtest/gtest.h>

#include <iostream>
#include <map>
#include <random>

#include "batching_test_util.h"
#include "loom/batching/step_cost.h"
#include "loom/batching/draft_length.h"
#include "loom/batching/paged_kv_cache.h"
#include "loom/batching/prompt_lookup.h"
#include "loom/batching/tokenizer_text_stream.h"
#include "loom/structured/constraint.h"
#include "loom/structured/token_vocabulary.h"
#include "loom/tokenizer/tokenizer.h"

namespace loom::batching {
namespace {

using testing::load_fixture;
using testing::make_runner;
using testing::random_tokens;

TEST(PromptLookup, DraftsWhatFollowedTheMostRecentLongestMatch) {
  std::vector<int32_t> d;
  // "... 7 8 9 | 1 2" twice before: the later occurrence (followed by 5 6) wins.
  const std::vector<int32_t> t = {1, 2, 3, 4, 9, 1, 2, 5, 6, 7, 9, 1, 2};
  EXPECT_EQ(prompt_lookup_draft(t.data(), static_cast<int64_t>(t.size()), 2, d), 2);
  EXPECT_EQ(d, (std::vector<int32_t>{5, 6}));
  // The 3-gram "9 1 2" matches both; the most recent again.
  EXPECT_EQ(prompt_lookup_draft(t.data(), static_cast<int64_t>(t.size()), 1, d), 1);
  EXPECT_EQ(d, (std::vector<int32_t>{5}));
  // A longer match beats a more recent shorter one: "3 4 2" occurs once, "2" later.
  const std::vector<int32_t> u = {3, 4, 2, 8, 2, 5, 3, 4, 2};
  EXPECT_EQ(prompt_lookup_draft(u.data(), static_cast<int64_t>(u.size()), 1, d), 1);
  EXPECT_EQ(d, (std::vector<int32_t>{8}));
  // No earlier occurrence of the last token: nothing.
  const std::vector<int32_t> v = {1, 2, 3, 4};
  EXPECT_EQ(prompt_lookup_draft(v.data(), static_cast<int64_t>(v.size()), 4, d), 0);
  EXPECT_TRUE(d.empty());
  // A loop drafts its next turns: period 2.
  const std::vector<int32_t> loop = {9, 5, 6, 5, 6};
  EXPECT_EQ(prompt_lookup_draft(loop.data(), static_cast<int64_t>(loop.size()), 5, d), 5);
  EXPECT_EQ(d, (std::vector<int32_t>{5, 6, 5, 6, 5}));
  EXPECT_EQ(prompt_lookup_draft(loop.data(), static_cast<int64_t>(loop.size()), 0, d), 0);
}

TEST(DraftLength, GrowsOnAcceptanceShrinksOnRejectionAndPausesAfterMisses) {
  DraftLength off;
  EXPECT_EQ(off.next(), 0);
  DraftLength l(8);
  EXPECT_EQ(l.next(), 8);
  l.record(8, 3);
  EXPECT_EQ(l.next(), 4);  // one more than accepted
  l.record(4, 4);
  EXPECT_EQ(l.next(), 6);  // all accepted: grows
  l.record(6, 6);
  l.record(8, 8);
  EXPECT_EQ(l.next(), 8);  // never past the maximum
  l.record(8, 0);
  EXPECT_EQ(l.next(), 4);  // halves
  l.record(4, 0);
  EXPECT_EQ(l.next(), 2);
  l.record(2, 0);  // the third miss in a row: paused
  for (int64_t i = 0; i < DraftLength::kFirstPause; ++i) {
    EXPECT_EQ(l.next(), 0) << i;
    l.step_without_draft();
  }
  EXPECT_EQ(l.next(), 1);
  for (int i = 0; i < DraftLength::kMissesBeforePause; ++i) l.record(1, 0);
  int64_t paused = 0;
  for (; l.next() == 0; ++paused) l.step_without_draft();
  EXPECT_EQ(paused, 2 * DraftLength::kFirstPause);  // a pause after a pause is longer
  l.record(1, 1);
  EXPECT_EQ(l.next(), 3);
}

// Rolling back a draft gives back its pages in the reverse order ensure() took
// them, for a model with one layer group and one with two (sliding + full).
// The step cost model recovers fixed + per_row × rows from (noisy) step times, and
// drafts pay while the step is memory-bound and not once it is compute-bound.
TEST(StepCost, FitsTheLineAndDraftsOnlyWhileTheyPay) {
  StepCostModel cost;
  EXPECT_FALSE(cost.known());
  EXPECT_TRUE(draft_pays(cost, 64, 64, 4, 0.1));  // unknown cost: the draft length decides
  std::mt19937 rng(5);
  std::uniform_int_distribution<int64_t> rows(1, 64);
  std::normal_distribution<double> noise(0, 0.0005);
  const double fixed = 0.040, per_row = 0.002;  // weights read in 40 ms; 2 ms of arithmetic a row
  for (int i = 0; i < 400; ++i) {
    const int64_t r = rows(rng);
    cost.record(r, fixed + per_row * static_cast<double>(r) + noise(rng));
  }
  ASSERT_TRUE(cost.known());
  EXPECT_NEAR(cost.fixed(), fixed, 0.002);
  EXPECT_NEAR(cost.per_row(), per_row, 0.0002);
  // Batch 1 (one decode row): 4 drafted rows cost 8 ms against a 42 ms step; a 50%
  // acceptance adds ~0.94 tokens: 0.94/8 ms beats 1/42 ms.
  const double half = expected_accepted(4, 0.5);
  EXPECT_NEAR(half, 0.5 + 0.25 + 0.125 + 0.0625, 1e-12);
  EXPECT_TRUE(draft_pays(cost, 1, 1, 4, half));
  // 48 decode rows: the step (136 ms for 48 tokens) is past the bound: the same draft
  // (0.94 tokens for 8 ms) no longer pays, a near-certain one (3.9 tokens) still does.
  EXPECT_FALSE(draft_pays(cost, 48, 48, 4, half));
  EXPECT_TRUE(draft_pays(cost, 48, 48, 4, expected_accepted(4, 0.99)));
  EXPECT_FALSE(draft_pays(cost, 1, 1, 0, 0));
}

// Acceptance is estimated from recent drafts: all accepted raises it, rejections lower it.
TEST(DraftLength, AcceptanceFollowsRecentDrafts) {
  DraftLength d(8);
  EXPECT_DOUBLE_EQ(d.acceptance(), 0.5);
  for (int i = 0; i < 10; ++i) d.record(4, 4);
  EXPECT_GT(d.acceptance(), 0.9);
  for (int i = 0; i < 30; ++i) d.record(4, 0);
  EXPECT_LT(d.acceptance(), 0.2);
}

TEST(SpeculativeRollback, TrimRestoresTheFreeListExactly) {
  for (const bool hybrid : {false, true}) {
    SCOPED_TRACE(hybrid ? "sliding + full layers" : "full layers");
    KvCacheLayout layout;
    layout.num_layers = 4;
    layout.num_kv_heads = 2;
    layout.head_dim = 8;
    layout.sliding_window = hybrid ? std::vector<int64_t>{0, 64, 0, 64} : std::vector<int64_t>{0, 0, 0, 0};
    PagedKvCacheOptions o;
    o.page_size = 4;
    o.num_pages = 4 * 40;
    o.max_step_tokens = 16;
    o.salt = 7;
    PagedKvCache kv(layout, o);
    SequenceKv other, s;
    ASSERT_TRUE(kv.ensure(other, 9));
    ASSERT_TRUE(kv.ensure(s, 6));
    kv.trim(other, 5);  // something on the free list that is not on top in order
    const std::vector<int32_t> pages = kv.pool().free_page_list();
    const std::vector<BlockId> slots = kv.pool().free_slot_list();
    const int64_t used = kv.pool().used_pages(), live = kv.pool().live_blocks(), held = s.num_pages;
    ASSERT_EQ(kv.max_fit_free(s, 6, 11), 11);
    ASSERT_TRUE(kv.ensure(s, 17, /*may_evict=*/false));  // a draft of 11 after position 5
    EXPECT_GT(kv.pool().used_pages(), used);
    kv.trim(s, 7);  // one drafted token accepted
    EXPECT_EQ(s.num_pages, held);
    EXPECT_EQ(kv.pool().free_page_list(), pages);
    EXPECT_EQ(kv.pool().free_slot_list(), slots);
    EXPECT_EQ(kv.pool().used_pages(), used);
    EXPECT_EQ(kv.pool().live_blocks(), live);
  }
}

// A draft never evicts a cached prefix block: it drafts less instead.
TEST(SpeculativeRollback, DraftsTakeFreePagesOnly) {
  KvCacheLayout layout;
  layout.num_layers = 2;
  layout.num_kv_heads = 1;
  layout.head_dim = 4;
  layout.sliding_window = {0, 0};
  PagedKvCacheOptions o;
  o.page_size = 2;
  o.num_pages = 2 * 4;
  o.salt = 3;
  PagedKvCache kv(layout, o);
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5};
  SequenceKv cached, s;
  ASSERT_TRUE(kv.ensure(cached, 4));
  kv.register_blocks(cached, tokens, 4);
  kv.release(cached);  // two blocks parked in the prefix cache, two free
  ASSERT_EQ(kv.pool().free_pages(), 4);
  ASSERT_EQ(kv.available_pages(), 8);
  ASSERT_TRUE(kv.ensure(s, 1));
  EXPECT_EQ(kv.max_fit(s, 1, 7), 7);
  EXPECT_EQ(kv.max_fit_free(s, 1, 7), 3);  // its own page's second slot + one free block
  EXPECT_FALSE(kv.ensure(s, 6, /*may_evict=*/false));
  EXPECT_TRUE(kv.ensure(s, 4, /*may_evict=*/false));
  EXPECT_EQ(kv.prefix_cache()->num_parked(), 2);
}

// A prompt whose continuation is likely to repeat parts of it: a random stretch
// said twice, then its start again. Random fixture models also fall into loops.
std::vector<int32_t> repeating_prompt(std::mt19937& rng, int64_t vocab, int64_t stretch) {
  std::vector<int32_t> p = random_tokens(rng, stretch, vocab);
  const std::vector<int32_t> copy = p;
  p.insert(p.end(), copy.begin(), copy.end());
  p.insert(p.end(), copy.begin(), copy.begin() + stretch / 3);
  return p;
}

struct Case {
  std::vector<int32_t> prompt;
  int64_t max_new;
  bool sample;
  // Below 1 it favours tokens already seen: a random model that never repeats
  // itself (the mixtral fixture) then does, and its drafts get accepted.
  float repetition_penalty;
};

std::vector<Case> make_cases(int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Case> cases;
  for (int i = 0; i < 10; ++i) {
    Case c;
    c.prompt = i % 3 == 2 ? random_tokens(rng, 5 + i * 7, vocab) : repeating_prompt(rng, vocab, 6 + 3 * i);
    c.max_new = 8 + (i * 13) % 53;
    c.sample = i % 4 == 3;
    c.repetition_penalty = i % 3 == 1 ? 0.2f : 1.0f;
    cases.push_back(std::move(c));
  }
  return cases;
}

GenerateOptions options_of(const Case& c, int64_t lookup, const std::string& kv = "float32") {
  GenerateOptions o;
  const DType kv_type = kv_cache_dtype_from_name(kv).value();
  o.kv_format = graph::KvFormat{kv_type, kv_type, kv_type == DType::kQ4_0, kv_type == DType::kQ4_0};
  o.max_new_tokens = c.max_new;
  o.prompt_lookup_num_tokens = lookup;
  o.logprobs = false;
  o.sampling.repetition_penalty = c.repetition_penalty;
  if (c.sample) {
    o.sampling.do_sample = true;
    o.sampling.temperature = 0.8f;
    o.sampling.top_k = 0;
    o.seed = 99;
  }
  return o;
}

struct Totals {
  int64_t drafted = 0, accepted = 0;
};

// Which requests of the batch speculate: most, the rest decode plainly beside them.
bool speculates(size_t i) { return i % 2 == 0 || i % 3 == 1; }

// Alone (generate, contiguous cache) and in a continuous batch mixing
// speculative and plain requests over a pool small enough to preempt: every
// request's tokens equal plain decoding's.
// kv: the KV cache type of every run (kv_cache_dtype's names; rotation as "auto" gives it).
void check_exact(const std::string& fixture, Totals& totals, const std::string& kv = "float32") {
  SCOPED_TRACE(fixture + " kv " + kv);
  auto model = load_fixture(fixture);
  auto runner = make_runner(model);
  const std::vector<Case> cases = make_cases(model->vocab_size(), 4321);
  std::vector<std::vector<int32_t>> plain;
  for (const Case& c : cases) {
    plain.push_back(generate(*runner, c.prompt, options_of(c, 0, kv)).value().generated_ids);
    const GenerateResult spec = generate(*runner, c.prompt, options_of(c, 5, kv)).value();
    EXPECT_EQ(spec.generated_ids, plain.back()) << "alone, prompt of " << c.prompt.size();
    EXPECT_LE(spec.timings.accepted_draft_tokens, spec.timings.drafted_tokens);
    totals.drafted += spec.timings.drafted_tokens;
    totals.accepted += spec.timings.accepted_draft_tokens;
  }
  for (const bool tight : {false, true}) {
    SCOPED_TRACE(tight ? "tight pool (preemption)" : "roomy pool");
    ContinuousBatchingConfig cfg;
    cfg.page_size = 4;
    int64_t longest = 0;  // the tight pool holds the longest request and a little more
    for (const Case& c : cases) longest = std::max<int64_t>(longest, static_cast<int64_t>(c.prompt.size()) + c.max_new);
    cfg.num_blocks = tight ? (longest + 3) / 4 + 1 : 400;
    cfg.per_request_processors = true;
    cfg.max_batch_tokens = tight ? 16 : 64;  // a short step keeps sliding layers' rings small: the pool fills
    cfg.safety_margin = 0;
    cfg.use_async_batching = !tight;
    // The roomy run drafts as the measured step cost decides (default); the tight one
    // whenever the draft length says so, so that drafts surely meet preemption.
    cfg.adaptive_speculation = !tight;
    cfg.kv_cache_dtype = kv;
    auto m = ContinuousBatchingManager::create(runner, testing::no_eos_config(), cfg).value();
    std::map<std::string, size_t> index;
    for (size_t i = 0; i < cases.size(); ++i) {
      RequestOptions o;
      o.max_new_tokens = cases[i].max_new;
      o.request_id = "q" + std::to_string(i);
      o.prompt_lookup_num_tokens = speculates(i) ? 4 : 0;
      o.streaming = i % 5 == 0;
      if (cases[i].repetition_penalty != 1.0f) o.repetition_penalty = cases[i].repetition_penalty;
      if (cases[i].sample) {
        o.do_sample = true;
        o.temperature = 0.8f;
        o.top_k = 0;
        o.seed = 99;
      }
      index[m->add_request(cases[i].prompt, o).value()] = i;
    }
    ASSERT_TRUE(m->start().ok());
    for (size_t done = 0; done < cases.size();) {
      std::optional<GenerationOutput> out = m->get_result(std::nullopt, 120.0);
      ASSERT_TRUE(out.has_value()) << "timed out after " << done << " results";
      const size_t i = index.at(out->request_id);
      // A streaming request sees each of its tokens once, in order, drafts or not.
      EXPECT_TRUE(std::equal(out->generated_tokens.begin(), out->generated_tokens.end(), plain[i].begin()));
      if (!out->is_final()) continue;
      ++done;
      ASSERT_EQ(out->status, RequestStatus::kFinished) << out->request_id << ": " << out->error;
      EXPECT_EQ(out->generated_tokens, plain[i]) << out->request_id;
      if (!speculates(i)) EXPECT_EQ(out->drafted_tokens, 0);
    }
    ASSERT_TRUE(m->stop(true, 30.0, /*keep_for_next_session=*/true).ok());
    const ManagerStats s = m->stats();
    EXPECT_EQ(s.pages_in_use, s.cached_pages);  // nothing held but cached prefixes
    EXPECT_LE(s.peak_pages_in_use, s.pages_capacity);
    EXPECT_LE(s.accepted_draft_tokens, s.drafted_tokens);
    if (tight) EXPECT_GT(s.accepted_draft_tokens, 0);
    if (tight) EXPECT_GT(s.preempted_recompute, 0);
    totals.drafted += s.drafted_tokens;
    totals.accepted += s.accepted_draft_tokens;
    std::cout << fixture << (tight ? " tight" : " roomy") << ": drafted " << s.drafted_tokens << ", accepted "
              << s.accepted_draft_tokens << ", preemptions " << s.preempted_recompute << "\n";
    EXPECT_FALSE(m->fatal_error().has_value());
  }
}

TEST(SpeculativeExactness, Llama) {
  Totals t;
  check_exact("llama-f32", t);
  // The test means something only if drafts were both accepted and rejected.
  EXPECT_GT(t.accepted, 0);
  EXPECT_LT(t.accepted, t.drafted);
}

// Speculative rollback rewrites the positions of rejected drafts; with q8_0 / q4_0 blocks (one
// head vector's blocks per position, rotated for q4_0) the rewrite must touch nothing else,
// and preemption must restore or recompute quantized pages exactly.
TEST(SpeculativeExactness, LlamaQuantizedKvCache) {
  for (const char* kv : {"q8_0", "q4_0", "float16"}) {
    Totals t;
    check_exact("llama-f32", t, kv);
    EXPECT_GT(t.accepted, 0) << kv;
    EXPECT_LT(t.accepted, t.drafted) << kv;
  }
}

TEST(SpeculativeExactness, Qwen2) {
  Totals t;
  check_exact("qwen2-f32", t);
  EXPECT_GT(t.accepted, 0);
  EXPECT_LT(t.accepted, t.drafted);
}

TEST(SpeculativeExactness, Gemma2SlidingWindow) {
  Totals t;
  check_exact("gemma2-f32", t);
  EXPECT_GT(t.accepted, 0);
  EXPECT_LT(t.accepted, t.drafted);
}

TEST(SpeculativeExactness, MixtralMoe) {
  Totals t;
  check_exact("mixtral-f32", t);
  EXPECT_GT(t.accepted, 0);
  EXPECT_LT(t.accepted, t.drafted);
}

// The bundled model on real text that repeats, with a tokenizer: the text and
// the stop string's cut are those of plain decoding too.
TEST(SpeculativeExactness, Qwen2Moe) {
  Totals t;
  check_exact("qwen2_moe-f32", t);
  EXPECT_GT(t.accepted, 0);
  EXPECT_LT(t.accepted, t.drafted);
}

// bf16 and f16 KV caches round K/V once; on the bundled (trained) model that rounding does not
// change a greedy token of real text against the f32 cache, and q8_0 changes few if any.
TEST(KvCacheTypes, BundledModelGreedyMatchesF32Cache) {
  const std::string dir = std::string(LOOM_SOURCE_DIR) + "/models/loom-kjv-tiny";
  auto model = models::Model::load(dir).value();
  auto runner = make_runner(model);
  auto stream = open_text_stream(dir).value();
  ASSERT_TRUE(stream);
  const char* texts[] = {
      "In the beginning God created the heaven and the earth.",
      "And God said, Let there be light: and there was light. And God saw the light, that it was good:",
      "The LORD is my shepherd; I shall not want. He maketh me to lie down in green pastures:",
      "And it came to pass in those days, that there went out a decree from Caesar Augustus,"};
  int64_t q8_same = 0, total = 0;
  for (const char* t : texts) {
    const std::vector<int32_t> prompt = stream->encode(t, true).value();
    auto run = [&](DType k) {
      GenerateOptions o;
      o.max_new_tokens = 40;
      o.kv_format = graph::KvFormat{k, k, false, false};
      return generate(*runner, prompt, o).value().generated_ids;
    };
    const std::vector<int32_t> f32 = run(DType::kF32);
    ASSERT_EQ(f32.size(), 40u);
    EXPECT_EQ(run(DType::kF16), f32) << t;
    EXPECT_EQ(run(DType::kBF16), f32) << t;
    const std::vector<int32_t> q8 = run(DType::kQ8_0);
    for (size_t i = 0; i < q8.size() && q8[i] == f32[i]; ++i) ++q8_same;
    total += 40;
  }
  std::cerr << "q8_0 KV: " << q8_same << " of " << total << " greedy tokens before the first difference from f32\n";
  EXPECT_GE(q8_same, total / 2);
}

TEST(SpeculativeExactness, BundledModelTextAndStopStrings) {
  const std::string dir = std::string(LOOM_SOURCE_DIR) + "/models/loom-kjv-tiny";
  auto model = models::Model::load(dir).value();
  auto runner = make_runner(model);
  const std::string verse =
      "In the beginning God created the heaven and the earth. And the earth was without form, and void; and "
      "darkness was upon the face of the deep. ";
  auto stream = open_text_stream(dir).value();
  ASSERT_TRUE(stream);
  const std::vector<int32_t> prompt = stream->encode(verse + verse + "In the beginning", true).value();
  auto run = [&](int64_t lookup, std::vector<std::string> stops) {
    auto text = open_text_stream(dir).value();
    text->start(prompt);
    GenerateOptions o;
    o.max_new_tokens = 48;
    o.prompt_lookup_num_tokens = lookup;
    o.stop_strings = std::move(stops);
    return generate(*runner, prompt, o, text.get()).value();
  };
  const GenerateResult plain = run(0, {});
  const GenerateResult spec = run(8, {});
  EXPECT_EQ(spec.generated_ids, plain.generated_ids);
  EXPECT_EQ(spec.text, plain.text);
  EXPECT_GT(spec.timings.accepted_draft_tokens, 0) << plain.text;
  // A stop string in the middle of the text: both cut at the same place.
  ASSERT_GT(plain.text.size(), 40u);
  const std::string stop = plain.text.substr(30, 6);
  const GenerateResult plain_stop = run(0, {stop});
  const GenerateResult spec_stop = run(8, {stop});
  EXPECT_EQ(plain_stop.finish_reason, generation::FinishReason::kStopString);
  EXPECT_EQ(spec_stop.finish_reason, plain_stop.finish_reason);
  EXPECT_EQ(spec_stop.generated_ids, plain_stop.generated_ids);
  EXPECT_EQ(spec_stop.text, plain_stop.text);

  // Through the manager, with its tokenizer: speculative and plain side by side.
  ManagerOptions mo;
  std::shared_ptr<Tokenizer> tok = Tokenizer::from_dir(dir).value();
  mo.text_stream = [tok](const std::vector<int32_t>& p) -> std::unique_ptr<TextStream> {
    auto s = std::make_unique<TokenizerTextStream>(tok);
    s->start(p);
    return s;
  };
  ContinuousBatchingConfig cfg;
  cfg.page_size = 16;
  cfg.num_blocks = 64;
  cfg.adaptive_speculation = false;  // drafts whatever the step cost: some are surely accepted
  auto m = ContinuousBatchingManager::create(runner, testing::no_eos_config(), cfg, mo).value();
  ASSERT_TRUE(m->start().ok());
  for (const int64_t lookup : {int64_t{0}, int64_t{8}}) {
    for (const bool with_stop : {false, true}) {
      RequestOptions o;
      o.max_new_tokens = 48;
      o.prompt_lookup_num_tokens = lookup;
      if (with_stop) o.stop_strings = {stop};
      const std::string id = m->add_request(prompt, o).value();
      const std::optional<GenerationOutput> out = m->get_result(id, 120.0);
      ASSERT_TRUE(out.has_value());
      const GenerateResult& want = with_stop ? plain_stop : plain;
      EXPECT_EQ(out->generated_tokens, want.generated_ids) << lookup << " " << with_stop;
      EXPECT_EQ(out->text, want.text) << lookup << " " << with_stop;
      EXPECT_EQ(out->finish_reason, want.finish_reason);
      if (lookup > 0 && !with_stop) EXPECT_GT(out->accepted_draft_tokens, 0);
    }
  }
  ASSERT_TRUE(m->stop(true, 30.0).ok());
}

// Grammar-constrained requests: each row is masked by the grammar state its
// accepted tokens left, so drafting changes nothing there either.
TEST(SpeculativeExactness, ConstrainedOutputs) {
  const std::string dir = std::string(LOOM_SOURCE_DIR) + "/models/loom-kjv-tiny";
  auto model = models::Model::load(dir).value();
  auto runner = make_runner(model);
  std::shared_ptr<Tokenizer> tok = Tokenizer::from_dir(dir).value();
  structured::ConstraintRegistry registry(structured::TokenVocabulary::from_tokenizer(*tok));
  std::vector<std::shared_ptr<structured::Constraint>> constraints;
  for (const auto& [kind, text] : std::vector<std::pair<structured::ConstraintSpec::Kind, std::string>>{
           {structured::ConstraintSpec::Kind::kJsonSchema,
            R"({"type":"object","properties":{"verses":{"type":"array","items":{"type":"string","maxLength":20},"maxItems":4}},"required":["verses"]})"},
           {structured::ConstraintSpec::Kind::kRegex, "(the [a-z]+ of the [a-z]+, ){2,5}"},
           {structured::ConstraintSpec::Kind::kJsonObject, ""}}) {
    structured::ConstraintSpec spec;
    spec.kind = kind;
    spec.text = text;
    constraints.push_back(registry.get(spec).value());
  }
  const std::vector<int32_t> prompt = tok->encode("And the LORD said unto Moses, and the LORD said", true).value().ids;
  ContinuousBatchingConfig cfg;
  cfg.page_size = 16;
  cfg.num_blocks = 64;
  auto m = ContinuousBatchingManager::create(runner, testing::no_eos_config(), cfg).value();
  ASSERT_TRUE(m->start().ok());
  int64_t accepted = 0;
  for (const auto& c : constraints) {
    GenerateOptions o;
    o.max_new_tokens = 48;
    o.constraint = c;
    const GenerateResult plain = generate(*runner, prompt, o).value();
    o.prompt_lookup_num_tokens = 6;
    const GenerateResult spec = generate(*runner, prompt, o).value();
    EXPECT_EQ(spec.generated_ids, plain.generated_ids);
    EXPECT_EQ(spec.finish_reason, plain.finish_reason);
    accepted += spec.timings.accepted_draft_tokens;
    RequestOptions ro;
    ro.max_new_tokens = 48;
    ro.constraint = c;
    ro.prompt_lookup_num_tokens = 6;
    const std::string id = m->add_request(prompt, ro).value();
    const std::optional<GenerationOutput> out = m->get_result(id, 120.0);
    ASSERT_TRUE(out.has_value());
    EXPECT_EQ(out->generated_tokens, plain.generated_ids);
    EXPECT_EQ(out->finish_reason, plain.finish_reason);
    accepted += out->accepted_draft_tokens;
  }
  EXPECT_GT(accepted, 0);
  ASSERT_TRUE(m->stop(true, 30.0).ok());
}

TEST(SpeculativeOptions, BadDraftLengthsAreRejected) {
  auto model = load_fixture("llama-f32");
  auto runner = make_runner(model);
  auto m = ContinuousBatchingManager::create(runner, testing::no_eos_config(), ContinuousBatchingConfig{}).value();
  RequestOptions o;
  o.prompt_lookup_num_tokens = -1;
  const Result<std::string> r = m->add_request({5, 6, 7}, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("prompt_lookup_num_tokens"), std::string::npos);
  GenerationConfig gc;
  gc.prompt_lookup_num_tokens = 1000;
  EXPECT_FALSE(gc.validate().ok());
}

}  // namespace
}  // namespace loom::batching
