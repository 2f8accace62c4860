#include "loom/structured/constraint.h"

#include "loom/structured/compile_budget.h"
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
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)), transitions_(std::make_unique<ByteTransitions>(grammar_.get())) {
  for (const Rule& r : grammar_->grammar().rules) {
    grammar_bytes_ += sizeof(Rule) + r.name.capacity();
    for (const Alternative& a : r.alternatives) grammar_bytes_ += sizeof(Alternative) + a.elements.size() * sizeof(Element);
  }
}

Constraint::~Constraint() = default;

Result<std::shared_ptr<Constraint>> Constraint::compile(const ConstraintSpec& spec,
                                                        std::shared_ptr<const TokenVocabulary> vocab) {
  LOOM_ASSIGN_OR_RETURN(Grammar g, spec_to_grammar(spec));
  LOOM_RETURN_IF_ERROR(check_compile_budget());
  auto c = std::make_shared<Constraint>(std::make_shared<CompiledGrammar>(std::move(g)), std::move(vocab));
  // The start state's mask is every request's first, and a wide alternation's costliest.
  LOOM_RETURN_IF_ERROR(c->precompute_mask(c->grammar()->initial_state()));
  return c;
}

size_t Constraint::StateHash::operator()(const AutomatonState& s) const {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ s.size();
  for (int32_t v : s) h = (h ^ static_cast<uint32_t>(v)) * 0x100000001B3ull;
  return static_cast<size_t>(h);
}

// One preorder walk of the vocabulary trie from `start_stack`. Without `dependent`,
// marks the tokens some stack survives. With it (a context stack), also collects the
// tokens a branch carries below the known frames: those are decided per real stack.
Status Constraint::walk_trie(const AutomatonState& start, Mask* accepted, std::vector<int32_t>* dependent) {
  accepted->assign((static_cast<size_t>(vocab_->size()) + 63) / 64, 0);
  const auto& nodes = vocab_->nodes();
  const auto& ids = vocab_->token_ids();
  ByteTransitions& t = *transitions_;
  std::vector<int32_t> at_depth(vocab_->max_depth() + 1);
  std::vector<uint8_t> left(vocab_->max_depth() + 1, 0);  // some branch left the known frames
  at_depth[0] = t.intern(start);
  uint64_t* bits = accepted->data();
  for (size_t i = 0; i < nodes.size();) {
    if ((i & 63) == 0) LOOM_RETURN_IF_ERROR(check_compile_budget());
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
  return Status::Ok();
}

const Constraint::ContextTokens* Constraint::context_tokens(const std::vector<int32_t>& frames, Status* status) {
  auto it = context_.find(frames);
  if (it != context_.end()) return it->second.get();
  auto ct = std::make_unique<ContextTokens>();
  *status = walk_trie(AutomatonState{grammar_->context_stack(frames)}, &ct->independent, &ct->dependent);
  if (!status->ok()) return nullptr;  // a partial walk is not kept
  return context_.emplace(frames, std::move(ct)).first->second.get();
}

void Constraint::compute_mask(const AutomatonState& state, Mask* out) {
  // Unbudgeted (only a thread with a compile budget can fail): the result is whole.
  (void)compute_mask_within_budget(state, out);
}

Status Constraint::compute_mask_within_budget(const AutomatonState& state, Mask* out) {
  out->assign((static_cast<size_t>(vocab_->size()) + 63) / 64, 0);
  std::lock_guard<std::mutex> lock(grammar_->mutex());
  ByteTransitions& t = *transitions_;
  t.trim();
  if (state.size() > kWideState) {
    // A wide alternation (a 100k-way enum starts with 100k stacks): one walk of the
    // trie with every stack at once, instead of one walk per distinct stack top. The
    // union of the stacks' survivors is what the per-stack walks would mark, and the
    // set shrinks to the few alternatives sharing each token's prefix as it goes.
    AutomatonState stacks;
    for (int32_t stack : state)
      if (stack >= 0) stacks.push_back(stack);
    return walk_trie(stacks, out, nullptr);
  }
  uint64_t* bits = out->data();
  const size_t words = out->size();
  for (int32_t stack : state) {
    if (stack < 0) continue;
    Status status;
    const ContextTokens* ct = context_tokens(grammar_->top_frames(stack, kContextFrames), &status);
    if (!ct) return status;
    const uint64_t* independent = ct->independent.data();
    for (size_t w = 0; w < words; ++w) bits[w] |= independent[w];
    if (ct->dependent.empty()) continue;
    const int32_t whole = t.intern(AutomatonState{stack});
    for (int32_t id : ct->dependent) {
      if ((bits[id >> 6] >> (id & 63)) & 1) continue;
      int32_t cur = whole;
      for (unsigned char b : *vocab_->bytes(id)) {
        cur = t.next(cur, b);
        if (cur == ByteTransitions::kDead) break;
      }
      if (!t.stacks(cur).empty()) bits[id >> 6] |= uint64_t{1} << (id & 63);
    }
  }
  return Status::Ok();
}

Status Constraint::precompute_mask(const AutomatonState& state) {
  auto m = std::make_shared<Mask>();
  LOOM_RETURN_IF_ERROR(compute_mask_within_budget(state, m.get()));  // (takes the grammar lock)
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    bool claimed = false;
    std::shared_ptr<CachedMask> entry = claim(state, &claimed);
    if (!entry->mask) {  // (else a thread that claimed it filled it meanwhile)
      entry->mask = std::move(m);
      ++stats_.precomputed;
    }
  }
  cache_cv_.notify_all();
  return Status::Ok();
}

size_t Constraint::memory_bytes() const {
  size_t bytes = sizeof(Constraint) + grammar_bytes_;
  {
    std::lock_guard<std::mutex> lock(grammar_->mutex());
    bytes += grammar_->pool_size() * 48;  // a node and its hash-consing entry
    bytes += transitions_->memory_bytes();
    for (const auto& [frames, ct] : context_)
      bytes += frames.size() * sizeof(int32_t) + ct->independent.size() * 8 + ct->dependent.size() * sizeof(int32_t) + 64;
  }
  std::lock_guard<std::mutex> lock(cache_mu_);
  const size_t mask_bytes = (static_cast<size_t>(vocab_->size()) + 63) / 64 * 8;
  for (const auto& [state, entry] : cache_) bytes += state.size() * sizeof(int32_t) + mask_bytes + 96;
  return bytes;
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

Result<std::shared_ptr<Constraint>> ConstraintRegistry::get(const ConstraintSpec& spec, const CompileBudget* budget) {
  const std::string key = spec.cache_key();
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = compiled_.find(key);
    if (it != compiled_.end()) {
      touch(it->second);
      return it->second.constraint;
    }
  }
  // Two requests for a new spec may both compile it: the second keeps the first's.
  Result<std::shared_ptr<Constraint>> c = [&] {
    ScopedCompileBudget scope(budget);
    return Constraint::compile(spec, vocab_);
  }();
  if (!c.ok()) return c.status();
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, inserted] = compiled_.try_emplace(key);
  if (inserted) {
    recent_.push_front(key);
    it->second = Entry{*c, recent_.begin()};
    ++stats_.compiled;
  } else {
    touch(it->second);
  }
  std::shared_ptr<Constraint> out = it->second.constraint;
  evict_over_budget();
  return out;
}

std::shared_ptr<Constraint> ConstraintRegistry::find(const ConstraintSpec& spec) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = compiled_.find(spec.cache_key());
  if (it == compiled_.end()) return nullptr;
  touch(it->second);
  return it->second.constraint;
}

void ConstraintRegistry::touch(Entry& e) { recent_.splice(recent_.begin(), recent_, e.recent); }

// Sums every entry's bytes (their masks grew since they were added), then drops the
// least recently used until under the budget; the most recent one always stays.
void ConstraintRegistry::evict_over_budget() {
  size_t bytes = 0;
  for (const auto& [key, e] : compiled_) bytes += e.constraint->memory_bytes();
  while (bytes > max_bytes_ && recent_.size() > 1) {
    auto it = compiled_.find(recent_.back());
    bytes -= std::min(bytes, it->second.constraint->memory_bytes());
    compiled_.erase(it);
    recent_.pop_back();
    ++stats_.evicted;
  }
  stats_.bytes = bytes;
}

ConstraintRegistry::Stats ConstraintRegistry::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats s = stats_;
  s.entries = compiled_.size();
  return s;
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
