#include "loom/batching/generate.h"

#include "batching/constrained_decoding.h"
#include "loom/batching/draft_length.h"
#include "loom/batching/prompt_lookup.h"
#include "loom/batching/token_finisher.h"
#include "loom/generation/generation_config.h"

#include <algorithm>
#include <chrono>
#include <optional>

namespace loom::batching {

Result<GenerateResult> generate(ModelRunner& runner, const std::vector<int32_t>& prompt_ids, const GenerateOptions& o,
                                TextStream* text, const std::function<void(const TokenEvent&)>& on_token) {
  using Clock = std::chrono::steady_clock;
  if (prompt_ids.empty()) return invalid_argument("the prompt is empty (at least one token is needed)");
  if (o.max_new_tokens < 0) return invalid_argument("max_new_tokens must be ≥ 0");
  LOOM_RETURN_IF_ERROR(o.sampling.validate(runner.model().vocab_size()));
  if (!o.stop_strings.empty() && !text) return invalid_argument("stop strings need a tokenizer to decode text");

  GenerateResult r;
  r.prompt_ids = prompt_ids;
  r.timings.prompt_tokens = static_cast<int64_t>(prompt_ids.size());
  if (o.max_new_tokens == 0) {
    r.finish_reason = generation::FinishReason::kLength;
    return r;
  }
  const int64_t capacity = static_cast<int64_t>(prompt_ids.size()) + o.max_new_tokens;
  std::optional<runtime::ContiguousKvCache> cache_holder;
  try {
    cache_holder.emplace(runner.kv_layout(), 1, capacity,
                         o.kv_format.value_or(graph::KvFormat{o.kv_cache_dtype, o.kv_cache_dtype, false, false}));
  } catch (const Error& e) {
    return e.status();
  }
  runtime::ContiguousKvCache& cache = *cache_holder;
  generation::Rng rng(o.seed);
  generation::SamplingScratch scratch;
  TokenFinisher finisher(o.eos_token_ids, o.stop_strings, o.max_new_tokens, text);
  std::vector<int32_t> context = prompt_ids;
  context.reserve(static_cast<size_t>(capacity));
  const int64_t vocab = runner.model().vocab_size();
  std::optional<structured::ConstraintState> constraint;
  if (o.constraint) {
    if (o.constraint->vocabulary()->size() > vocab)
      return invalid_argument("the constraint's vocabulary is larger than the model's: compiled for another tokenizer?");
    constraint.emplace(o.constraint);
  }

  if (o.prompt_lookup_num_tokens < 0 || o.prompt_lookup_num_tokens > kMaxPromptLookupTokens)
    return invalid_argument("prompt_lookup_num_tokens must be in [0, " + std::to_string(kMaxPromptLookupTokens) + "]");
  DraftLength draft_length(o.prompt_lookup_num_tokens);

  // Each step feeds `pending`: the prompt, then the last token — followed, when
  // speculating, by drafted tokens, each row sampled in turn as a plain step would
  // sample it until a sampled token differs from the drafted one fed after it.
  std::vector<int32_t> pending = prompt_ids;
  std::vector<int32_t> draft;
  int64_t past = 0;
  int64_t drafted = 0;
  auto t0 = Clock::now();
  while (true) {
    SequenceChunk chunk{pending.data(), static_cast<int64_t>(pending.size()), past};
    LOOM_ASSIGN_OR_RETURN(Tensor logits, runner.step({chunk}, cache, drafted > 0 ? LogitsRows::kAllTokens
                                                                                    : LogitsRows::kLastOfEachSequence));
    const bool first = r.generated_ids.empty();
    const size_t generated_before = r.generated_ids.size();
    float* rows = logits.data_as<float>();
    generation::FinishReason reason = generation::FinishReason::kNone;
    int64_t accepted = 0;
    for (int64_t i = 0; i <= drafted; ++i) {
      float* row = rows + i * vocab;
      if (constraint) {
        const ConstraintStep step = mask_for_constraint(*constraint, row, vocab, o.eos_token_ids);
        if (step == ConstraintStep::kComplete) {
          reason = generation::FinishReason::kEos;
          break;
        }
        if (step == ConstraintStep::kDeadEnd)
          return dead_end_error(*constraint).with_context("after " + std::to_string(r.generated_ids.size()) +
                                                          " generated tokens");
      }
      const generation::SampledToken tok =
          generation::sample_next(row, vocab, o.sampling, context, rng, o.logprobs, prompt_ids.size(), scratch);
      r.generated_ids.push_back(tok.id);
      if (o.logprobs) r.logprobs.push_back(tok.logprob);
      context.push_back(tok.id);
      const size_t shown_before = r.text.size();
      LOOM_ASSIGN_OR_RETURN(reason, finisher.accept(tok.id, static_cast<int64_t>(r.generated_ids.size()),
                                                    constraint ? &*constraint : nullptr, r.text));
      if (on_token) on_token(TokenEvent{tok.id, tok.logprob, r.text.substr(shown_before)});
      if (reason != generation::FinishReason::kNone || i == drafted || tok.id != pending[static_cast<size_t>(i + 1)]) break;
      ++accepted;
    }
    past += first ? chunk.num_tokens : 1 + accepted;  // a decode step's last token and its accepted drafts
    auto t1 = Clock::now();
    const double dt = std::chrono::duration<double>(t1 - t0).count();
    if (first) {
      r.timings.prefill_seconds = dt;
    } else {
      r.timings.decode_seconds += dt;
      r.timings.decode_steps += static_cast<int64_t>(r.generated_ids.size() - generated_before);
    }
    r.timings.drafted_tokens += drafted;
    r.timings.accepted_draft_tokens += accepted;
    draft_length.record(drafted, accepted);
    if (reason != generation::FinishReason::kNone) {
      r.finish_reason = reason;
      break;
    }
    // Drafts no further than max_new_tokens: the last token generated is never fed.
    const int64_t room = o.max_new_tokens - static_cast<int64_t>(r.generated_ids.size()) - 1;
    const int64_t want = std::min(draft_length.next(), room);
    drafted = want > 0 ? prompt_lookup_draft(context.data(), static_cast<int64_t>(context.size()), want, draft) : 0;
    if (drafted == 0) draft_length.step_without_draft();
    pending.assign(1, context.back());
    pending.insert(pending.end(), draft.begin(), draft.begin() + drafted);
    t0 = Clock::now();
  }
  const size_t shown_before = r.text.size();
  LOOM_RETURN_IF_ERROR(finisher.finish(r.finish_reason, r.text));
  if (on_token && r.text.size() > shown_before) on_token(TokenEvent{-1, 0.0f, r.text.substr(shown_before)});
  return r;
}

}  // namespace loom::batching
