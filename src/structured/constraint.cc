#include "loom/structured/constraint.h"

#include "loom/structured/json_schema_to_grammar.h"
#include "loom/structured/regex_to_grammar.h"

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
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)) {}

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

// One preorder walk of the vocabulary trie from `start`. Without `dependent`, marks
// the tokens some stack survives. With it (`start` from a context stack), also
// collects the tokens a branch carries below the known frames: those are decided
// per real stack.
void Constraint::walk_trie(const AutomatonState& start, Mask* accepted, std::vector<int32_t>* dependent) {
  accepted->assign((static_cast<size_t>(vocab_->size()) + 63) / 64, 0);
  const auto& nodes = vocab_->nodes();
  const auto& ids = vocab_->token_ids();
  std::vector<AutomatonState> at_depth(vocab_->max_depth() + 1);
  std::vector<uint8_t> left(vocab_->max_depth() + 1, 0);  // some branch left the known frames
  at_depth[0] = start;
  for (size_t i = 0; i < nodes.size();) {
    const TokenVocabulary::TrieNode& n = nodes[i];
    AutomatonState& here = at_depth[n.depth];
    grammar_->advance_unlocked(at_depth[n.depth - 1], n.byte, &here);
    bool gone = left[n.depth - 1];
    if (!here.empty() && here.front() == kNeedsContext) {
      here.erase(here.begin());
      gone = true;
    }
    left[n.depth] = gone;
    if (here.empty()) {
      if (gone && dependent) {
        for (uint32_t k = nodes[i].first_token; k < (n.subtree_end < nodes.size() ? nodes[n.subtree_end].first_token
                                                                                   : static_cast<uint32_t>(ids.size()));
             ++k)
          dependent->push_back(ids[k]);
      }
      i = n.subtree_end;
      continue;
    }
    for (uint32_t k = 0; k < n.token_count; ++k) {
      const int32_t id = ids[n.first_token + k];
      (*accepted)[id >> 6] |= uint64_t{1} << (id & 63);
    }
    ++i;
  }
}

const Constraint::ContextTokens& Constraint::context_tokens(const std::vector<int32_t>& frames) {
  auto it = context_.find(frames);
  if (it != context_.end()) return *it->second;
  auto ct = std::make_unique<ContextTokens>();
  const int32_t stack = grammar_->context_stack(frames);
  walk_trie(AutomatonState{stack}, &ct->independent, &ct->dependent);
  return *context_.emplace(frames, std::move(ct)).first->second;
}

void Constraint::compute_mask(const AutomatonState& state, Mask* out) {
  out->assign((static_cast<size_t>(vocab_->size()) + 63) / 64, 0);
  std::lock_guard<std::mutex> lock(grammar_->mutex());
  AutomatonState cur, next;
  for (int32_t stack : state) {
    if (stack < 0) continue;
    const ContextTokens& ct = context_tokens(grammar_->top_frames(stack, kContextFrames));
    for (size_t w = 0; w < out->size(); ++w) (*out)[w] |= ct.independent[w];
    for (int32_t id : ct.dependent) {
      if (((*out)[id >> 6] >> (id & 63)) & 1) continue;
      cur.assign(1, stack);
      for (unsigned char b : *vocab_->bytes(id)) {
        grammar_->advance_unlocked(cur, b, &next);
        cur.swap(next);
        if (cur.empty()) break;
      }
      if (!cur.empty()) (*out)[id >> 6] |= uint64_t{1} << (id & 63);
    }
  }
}

std::shared_ptr<const Constraint::Mask> Constraint::mask(const AutomatonState& state) {
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto it = cache_.find(state);
    if (it != cache_.end()) {
      ++stats_.hits;
      return it->second;
    }
    ++stats_.misses;
  }
  auto m = std::make_shared<Mask>();
  compute_mask(state, m.get());
  std::lock_guard<std::mutex> lock(cache_mu_);
  if (cache_.size() >= kMaxCachedMasks) cache_.clear();
  cache_.emplace(state, m);
  return m;
}

MaskCacheStats Constraint::cache_stats() const {
  std::lock_guard<std::mutex> lock(cache_mu_);
  return stats_;
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
