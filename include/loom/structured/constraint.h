// What a request's output must match, compiled once per (spec, tokenizer) and shared:
// a Constraint owns the automaton, the vocabulary trie and the masks it computed, keyed
// by automaton state, so requests with the same schema reuse each other's masks. A
// ConstraintState is one request's position in it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <list>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "loom/core/status.h"
#include "loom/structured/compile_budget.h"
#include "loom/structured/grammar.h"
#include "loom/structured/grammar_matcher.h"
#include "loom/structured/token_vocabulary.h"

namespace loom::structured {

struct ConstraintSpec {
  enum class Kind { kGrammar, kRegex, kChoice, kJsonSchema, kJsonObject };
  Kind kind = Kind::kJsonObject;
  std::string text;                  // GBNF, regex, or the schema's JSON text
  std::vector<std::string> choices;  // kChoice
  bool strict = true;                // kJsonSchema: refuse unsupported keywords (else ignore them)

  std::string cache_key() const;
  static const char* kind_name(Kind k);
};

Result<Grammar> spec_to_grammar(const ConstraintSpec& spec);

struct MaskCacheStats {
  uint64_t hits = 0, misses = 0;
  uint64_t prefetched = 0;  // masks computed by prefetch() (off the critical path)
  uint64_t waited = 0;      // mask() calls that waited for a prefetch in progress
  uint64_t precomputed = 0;  // masks computed by the compilation (the start state's)
};

class ByteTransitions;

class Constraint {
 public:
  Constraint(std::shared_ptr<CompiledGrammar> grammar, std::shared_ptr<const TokenVocabulary> vocab);
  ~Constraint();
  static Result<std::shared_ptr<Constraint>> compile(const ConstraintSpec& spec,
                                                     std::shared_ptr<const TokenVocabulary> vocab);

  using Mask = std::vector<uint64_t>;  // bit id set: the token may come next (EOS excluded)
  // The state's mask, computed on first use and cached (bounded: the cache is
  // dropped when it holds kMaxCachedMasks).
  // When another thread is computing the same state's mask (prefetch), waits for it
  // rather than computing it twice.
  std::shared_ptr<const Mask> mask(const AutomatonState& state);
  // Computes and caches the state's mask unless it is cached or being computed: for a
  // thread that works ahead of the one that will call mask().
  void prefetch(const AutomatonState& state);
  // The same without the cache, for tests and benchmarks.
  void compute_mask(const AutomatonState& state, Mask* out);
  // Computes and caches the state's mask within the compiling thread's budget
  // (compile_budget.h), so that the decoding step finds it: a constraint's first
  // mask can be its costliest (a wide alternation) and is computed where the
  // request's compilation is, not on the step every sequence waits for.
  Status precompute_mask(const AutomatonState& state);
  // About the bytes the constraint holds: its grammar, automaton, context tokens,
  // transition tables and cached masks (they grow as requests use it).
  size_t memory_bytes() const;

  const std::shared_ptr<CompiledGrammar>& grammar() const { return grammar_; }
  const std::shared_ptr<const TokenVocabulary>& vocabulary() const { return vocab_; }
  MaskCacheStats cache_stats() const;

  // Seconds the decoding loop spent masking a row for this constraint, one entry per
  // masked token, kept while recording is on (benchmarks).
  void set_recording(bool on) const { recording_ = on; }
  bool recording() const { return recording_; }
  void record_mask_seconds(double seconds) const;
  std::vector<double> take_mask_seconds() const;

  static constexpr size_t kMaxCachedMasks = 4096;
  // Frames of a stack's top that key its context-independent tokens.
  static constexpr size_t kContextFrames = 2;
  // States with more stacks than this are masked by one walk of all of them at once
  // (context masks pay off when few stack tops recur; a wide alternation's do not).
  static constexpr size_t kWideState = 64;

 private:
  struct StateHash {
    size_t operator()(const AutomatonState& s) const;
  };
  // xgrammar's split, per stack top (its kContextFrames top positions): tokens the top
  // frames accept whatever lies below them, and tokens whose fate depends on the
  // frames below (they return into them), which are checked against the whole stack.
  struct ContextTokens {
    Mask independent;
    std::vector<int32_t> dependent;
  };
  struct CachedMask {
    std::shared_ptr<const Mask> mask;  // null while a thread computes it
  };
  // Null when the compile budget ran out.
  const ContextTokens* context_tokens(const std::vector<int32_t>& frames, Status* status);  // grammar lock held
  // These return the compile budget's error (only a budgeted thread can get one).
  Status walk_trie(const AutomatonState& start, Mask* accepted, std::vector<int32_t>* dependent);  // lock held
  Status compute_mask_within_budget(const AutomatonState& state, Mask* out);
  // Claims the state (a null entry) when nobody has; returns the entry.
  std::shared_ptr<CachedMask> claim(const AutomatonState& state, bool* claimed);  // cache_mu_ held
  std::shared_ptr<const Mask> fill(const std::shared_ptr<CachedMask>& entry, const AutomatonState& state);
  std::unordered_map<std::vector<int32_t>, std::unique_ptr<ContextTokens>, StateHash> context_;  // under the grammar lock
  std::shared_ptr<CompiledGrammar> grammar_;
  size_t grammar_bytes_ = 0;
  std::shared_ptr<const TokenVocabulary> vocab_;
  std::unique_ptr<ByteTransitions> transitions_;  // under the grammar lock
  mutable std::mutex cache_mu_;
  std::condition_variable cache_cv_;  // a claimed mask was filled
  std::unordered_map<AutomatonState, std::shared_ptr<CachedMask>, StateHash> cache_;
  MaskCacheStats stats_;
  mutable std::mutex timing_mu_;
  mutable std::atomic<bool> recording_{false};
  mutable std::vector<double> mask_seconds_;
};

// Compiled constraints by spec, for one vocabulary: requests naming the same schema
// share one Constraint (and its masks). Kept least recently used first out once
// they hold more than `max_cached_bytes` (their masks grow as they are used);
// requests holding an evicted one keep it until they finish.
class ConstraintRegistry {
 public:
  static constexpr size_t kDefaultCacheBytes = size_t{256} << 20;
  explicit ConstraintRegistry(std::shared_ptr<const TokenVocabulary> vocab, size_t max_cached_bytes = kDefaultCacheBytes)
      : vocab_(std::move(vocab)), max_bytes_(max_cached_bytes) {}
  // The spec's constraint, compiled on this thread on first use: within `budget`
  // when given (compile_budget.h), its first mask included.
  Result<std::shared_ptr<Constraint>> get(const ConstraintSpec& spec, const CompileBudget* budget = nullptr);
  // Cached without compiling: null when it is not.
  std::shared_ptr<Constraint> find(const ConstraintSpec& spec);
  const std::shared_ptr<const TokenVocabulary>& vocabulary() const { return vocab_; }

  struct Stats {
    size_t entries = 0, bytes = 0;    // what the cache holds now (bytes as of the last insert)
    uint64_t compiled = 0, evicted = 0;
  };
  Stats stats() const;

 private:
  struct Entry {
    std::shared_ptr<Constraint> constraint;
    std::list<std::string>::iterator recent;  // into recent_
  };
  void touch(Entry& e);       // mu_ held
  void evict_over_budget();   // mu_ held
  std::shared_ptr<const TokenVocabulary> vocab_;
  size_t max_bytes_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry> compiled_;
  std::list<std::string> recent_;  // keys, most recently used first
  Stats stats_;
};

// The error of a constraint whose automaton exceeded its step budget.
Status too_complex_error();

class ConstraintState {
 public:
  explicit ConstraintState(std::shared_ptr<Constraint> constraint);

  // Tokens that may come next (EOS is the caller's: allowed iff accepting()).
  std::shared_ptr<const Constraint::Mask> allowed_tokens() const { return constraint_->mask(matcher_.state()); }
  // Where the request is: what allowed_tokens() will need (to prefetch it).
  const AutomatonState& state() const { return matcher_.state(); }
  const std::shared_ptr<Constraint>& shared_constraint() const { return constraint_; }
  // Fails, naming the token, when the grammar does not allow it here.
  Status accept_token(int32_t id);
  // The text so far is a complete match.
  bool accepting() const { return matcher_.accepting(); }
  // More text could follow (false with accepting(): only EOS fits).
  bool can_continue() const { return matcher_.can_continue(); }
  // Undoes the last n accepted tokens.
  void rollback_tokens(size_t n);
  const Constraint& constraint() const { return *constraint_; }

 private:
  std::shared_ptr<Constraint> constraint_;
  GrammarMatcher matcher_;
  std::vector<uint32_t> token_byte_counts_;
};

}  // namespace loom::structured
