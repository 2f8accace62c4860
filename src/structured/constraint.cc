#include "loom/structured/constraint.h"

#include "loom/structured/json_schema_to_grammar.h"
#include "loom/structured/regex_to_grammar.h"
#include "structured/byte_transitions.h"

namespace loom::structured {

const char* ConstraintSpec::kind_name(Kind k) {
  switch (k) {
    case Kind::kGrammar: return "grammar";
    case Kind::kRegex: return "regex";
    case Kind::kChoice: return "choice";
    case Kind::kJsonSchema: return "json_schema";
    case Kind::kJsonObject: return "json_object";
  }
  return "?";
}

std::string ConstraintSpec::cache_key() const {
  std::string key = kind_name(kind);
  key += strict ? ":strict:" : ":lax:";
  key += text;
  for (const std::string& c : choices) {
    key += '\0';
    key += c;
  }
  return key;
}

Result<Grammar> spec_to_grammar(const ConstraintSpec& spec) {
  switch (spec.kind) {
    case ConstraintSpec::Kind::kGrammar: return parse_gbnf(spec.text);
    case ConstraintSpec::Kind::kRegex: return regex_to_grammar(spec.text);
    case ConstraintSpec::Kind::kChoice: return choices_to_grammar(spec.choices);
    case ConstraintSpec::Kind::kJsonSchema: return json_schema_to_grammar(spec.text, spec.strict);
    case ConstraintSpec::Kind::kJsonObject: return any_json_grammar();
  }
  return invalid_argument("unknown constraint kind");
}

Constraint::Constraint(std::shared_ptr<CompiledGrammar> grammar, std::shared_ptr<const TokenVocabulary> vocab)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)), transitions_(std::make_unique<ByteTransitions>(grammar_.get())) {}

Constraint::~Constraint() = default;

Result<std::shared_ptr<Constraint>> Constraint::compile(const ConstraintSpec& spec,
                                                        std::shared_ptr<const TokenVocabulary> vocab) {
  LOOM_ASSIGN_OR_RETURN(Grammar g, spec_to_grammar(spec));
  return std::make_shared<Constraint>(std::make_shared<CompiledGrammar>(std::move(g)), std::move(vocab));
}

size_t Constraint::StateHash::operator()(const AutomatonState& s) const {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ s.size();
  for (int32_t v : s) h = (h ^ static_cast<uint32_t>(v)) * 0x100000001B3ull;
  return static_cast<size_t>(h);
}

// One preorder walk of the vocabulary trie from `start_stack`. Without `dependent`,
// marks the tokens some stack survives. With it (a context stack), also collects the
// tokens a branch carries below the known frames: those are decided per real stack.
void Constraint::walk_trie(int32_t start_stack, Mask* accepted, std::vector<int32_t>* dependent) {
  accepted->assign((static_cast<size_t>(vocab_->size()) + 63) / 64, 0);
  const auto& nodes = vocab_->nodes();
  const auto& ids = vocab_->token_ids();
  ByteTransitions& t = *transitions_;
  std::vector<int32_t> at_depth(vocab_->max_depth() + 1);
  std::vector<uint8_t> left(vocab_->max_depth() + 1, 0);  // some branch left the known frames
  at_depth[0] = t.intern(AutomatonState{start_stack});
  uint64_t* bits = accepted->data();
  for (size_t i = 0; i < nodes.size();) {
    const TokenVocabulary::TrieNode& n = nodes[i];
    const int32_t here = t.next(at_depth[n.depth - 1], n.byte);
    at_depth[n.depth] = here;
    const bool gone = left[n.depth - 1] || t.needs_context(here);
    left[n.depth] = gone;
    if (t.stacks(here).empty()) {
      if (gone && dependent) {
        const uint32_t end = n.subtree_end < nodes.size() ? nodes[n.subtree_end].first_token
                                                          : static_cast<uint32_t>(ids.size());
        dependent->insert(dependent->end(), ids.begin() + n.first_token, ids.begin() + end);
      }
      i = n.subtree_end;
      continue;
    }
    for (uint32_t k = 0; k < n.token_count; ++k) {
      const int32_t id = ids[n.first_token + k];
      bits[id >> 6] |= uint64_t{1} << (id & 63);
    }
    ++i;
  }
}

const Constraint::ContextTokens& Constraint::context_tokens(const std::vector<int32_t>& frames) {
  auto it = context_.find(frames);
  if (it != context_.end()) return *it->second;
  auto ct = std::make_unique<ContextTokens>();
  walk_trie(grammar_->context_stack(frames), &ct->independent, &ct->dependent);
  return *context_.emplace(frames, std::move(ct)).first->second;
}

void Constraint::compute_mask(const AutomatonState& state, Mask* out) {
  out->assign((static_cast<size_t>(vocab_->size()) + 63) / 64, 0);
  std::lock_guard<std::mutex> lock(grammar_->mutex());
  ByteTransitions& t = *transitions_;
  t.trim();
  uint64_t* bits = out->data();
  const size_t words = out->size();
  for (int32_t stack : state) {
    if (stack < 0) continue;
    const ContextTokens& ct = context_tokens(grammar_->top_frames(stack, kContextFrames));
    const uint64_t* independent = ct.independent.data();
    for (size_t w = 0; w < words; ++w) bits[w] |= independent[w];
    if (ct.dependent.empty()) continue;
    const int32_t whole = t.intern(AutomatonState{stack});
    for (int32_t id : ct.dependent) {
      if ((bits[id >> 6] >> (id & 63)) & 1) continue;
      int32_t cur = whole;
      for (unsigned char b : *vocab_->bytes(id)) {
        cur = t.next(cur, b);
        if (cur == ByteTransitions::kDead) break;
      }
      if (!t.stacks(cur).empty()) bits[id >> 6] |= uint64_t{1} << (id & 63);
    }
  }
}

std::shared_ptr<Constraint::CachedMask> Constraint::claim(const AutomatonState& state, bool* claimed) {
  auto it = cache_.find(state);
  if (it != cache_.end()) {
    *claimed = false;
    return it->second;
  }
  if (cache_.size() >= kMaxCachedMasks) cache_.clear();  // holders of an entry keep it alive
  auto entry = std::make_shared<CachedMask>();
  cache_.emplace(state, entry);
  *claimed = true;
  return entry;
}

std::shared_ptr<const Constraint::Mask> Constraint::fill(const std::shared_ptr<CachedMask>& entry,
                                                         const AutomatonState& state) {
  auto m = std::make_shared<Mask>();
  compute_mask(state, m.get());
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    entry->mask = m;
  }
  cache_cv_.notify_all();
  return m;
}

std::shared_ptr<const Constraint::Mask> Constraint::mask(const AutomatonState& state) {
  std::shared_ptr<CachedMask> entry;
  {
    std::unique_lock<std::mutex> lock(cache_mu_);
    bool claimed = false;
    entry = claim(state, &claimed);
    if (!claimed) {
      ++stats_.hits;
      if (!entry->mask) {
        ++stats_.waited;
        cache_cv_.wait(lock, [&] { return entry->mask != nullptr; });
      }
      return entry->mask;
    }
    ++stats_.misses;
  }
  return fill(entry, state);
}

void Constraint::prefetch(const AutomatonState& state) {
  std::shared_ptr<CachedMask> entry;
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    bool claimed = false;
    entry = claim(state, &claimed);
    if (!claimed) return;
    ++stats_.prefetched;
  }
  fill(entry, state);
}

MaskCacheStats Constraint::cache_stats() const {
  std::lock_guard<std::mutex> lock(cache_mu_);
  return stats_;
}

void Constraint::record_mask_seconds(double seconds) const {
  std::lock_guard<std::mutex> lock(timing_mu_);
  if (recording_) mask_seconds_.push_back(seconds);
}

std::vector<double> Constraint::take_mask_seconds() const {
  std::lock_guard<std::mutex> lock(timing_mu_);
  std::vector<double> out;
  out.swap(mask_seconds_);
  return out;
}

Result<std::shared_ptr<Constraint>> ConstraintRegistry::get(const ConstraintSpec& spec) {
  const std::string key = spec.cache_key();
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = compiled_.find(key);
    if (it != compiled_.end()) return it->second;
  }
  LOOM_ASSIGN_OR_RETURN(std::shared_ptr<Constraint> c, Constraint::compile(spec, vocab_));
  std::lock_guard<std::mutex> lock(mu_);
  compiled_.emplace(key, c);
  return c;
}

ConstraintState::ConstraintState(std::shared_ptr<Constraint> constraint)
    : constraint_(std::move(constraint)), matcher_(constraint_->grammar()) {}

Status ConstraintState::accept_token(int32_t id) {
  const TokenVocabulary& v = *constraint_->vocabulary();
  if (id < 0 || id >= v.size() || !v.bytes(id) || v.bytes(id)->empty()) {
    return invalid_argument("token " + std::to_string(id) + " has no text and cannot appear in constrained output");
  }
  if (!matcher_.accept(*v.bytes(id))) {
    if (constraint_->grammar()->too_complex()) return too_complex_error();
    return invalid_argument("token " + std::to_string(id) + " is not allowed by the grammar here");
  }
  token_byte_counts_.push_back(static_cast<uint32_t>(v.bytes(id)->size()));
  return Status::Ok();
}

Status too_complex_error() {
  return resource_exhausted("the grammar is too ambiguous: one step of its automaton needed more than " +
                            std::to_string(CompiledGrammar::kMaxClosureSteps) + " expansions");
}

void ConstraintState::rollback_tokens(size_t n) {
  size_t bytes = 0;
  for (; n > 0 && !token_byte_counts_.empty(); --n) {
    bytes += token_byte_counts_.back();
    token_byte_counts_.pop_back();
  }
  matcher_.rollback(bytes);
}

}  // namespace loom::structured
