// The byte-level pushdown automaton of a Grammar. A state is a set of stacks (the
// grammar is ambiguous in general, as llama.cpp's grammar stacks are); each stack's top
// is a byte element still to match, and the rest are return positions. Stacks are
// hash-consed in the CompiledGrammar's pool, so a stack is one int, pushing and popping
// are O(1), equal states are equal vectors, and a state's mask can be cached under it
// for every request that shares the grammar.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "loom/structured/grammar.h"

namespace loom::structured {

// A sorted set of stack ids; kAcceptStack (an emptied stack) marks "the text so far is
// a complete sentence".
using AutomatonState = std::vector<int32_t>;
constexpr int32_t kAcceptStack = -1;
// In a state advanced from a truncated stack (context_stack): some branch returned
// into the frames that were cut off, so what follows depends on them.
constexpr int32_t kNeedsContext = -2;

class CompiledGrammar {
 public:
  explicit CompiledGrammar(Grammar grammar);
  const Grammar& grammar() const { return g_; }

  // The start state (the root rule's alternatives expanded).
  AutomatonState initial_state();
  // The state after `byte`; empty when no stack accepts it. `state` must come from
  // this grammar. Thread-safe (one lock per call).
  AutomatonState advance(const AutomatonState& state, uint8_t byte);
  // The same without locking, for callers holding lock() across many steps.
  void advance_unlocked(const AutomatonState& state, uint8_t byte, AutomatonState* out);
  std::mutex& mutex() const { return mu_; }

  static bool accepting(const AutomatonState& s) {
    return std::find(s.begin(), s.end(), kAcceptStack) != s.end();
  }
  // Whether some stack still expects bytes.
  static bool can_continue(const AutomatonState& s) { return !s.empty() && s.back() >= 0; }
  size_t pool_size() const { return nodes_.size(); }
  // Some step needed more than kMaxClosureSteps expansions (a grammar so ambiguous
  // that its state explodes): that step's state is incomplete, and the constraint
  // reports it instead of generating from it.
  bool too_complex() const { return too_complex_; }
  static constexpr size_t kMaxClosureSteps = size_t{1} << 20;

  // For masks by context (Constraint): the top `frames` positions of a stack, top
  // first, followed by -1 when they are the whole stack. Needs lock().
  std::vector<int32_t> top_frames(int32_t stack, size_t frames) const;
  // A stack of those positions whose bottom is unknown: popping below it yields
  // kNeedsContext. Needs lock().
  int32_t context_stack(const std::vector<int32_t>& frames);

 private:
  struct Position {
    int32_t rule, alt, index;
  };
  struct Node {
    int32_t position;  // into positions_
    int32_t parent;    // node id, or -1 for the bottom
  };
  int32_t position_id(int32_t rule, int32_t alt, int32_t index) const { return alt_base_[rule][alt] + index; }
  bool at_end(int32_t pos) const;
  int32_t intern(int32_t position, int32_t parent);
  void expand(int32_t position, int32_t parent, AutomatonState* out);
  static void canonicalize(AutomatonState* s);

  Grammar g_;
  std::vector<Position> positions_;
  std::vector<std::vector<int32_t>> alt_base_;
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, int32_t> node_ids_;
  std::vector<std::pair<int32_t, int32_t>> work_;  // expand's worklist: (position, parent)
  std::atomic<bool> too_complex_{false};
  mutable std::mutex mu_;
};

// A request's walk through one CompiledGrammar: copyable, and rewindable by bytes.
class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<CompiledGrammar> grammar);

  // All or nothing: on false the matcher is unchanged.
  bool accept(std::string_view bytes);
  bool accepting() const { return CompiledGrammar::accepting(state_); }
  bool can_continue() const { return CompiledGrammar::can_continue(state_); }
  // Undoes the last `n` accepted bytes (n ≤ history_size()).
  void rollback(size_t n);
  size_t history_size() const { return history_.size(); }
  const AutomatonState& state() const { return state_; }
  const std::shared_ptr<CompiledGrammar>& grammar() const { return g_; }

 private:
  std::shared_ptr<CompiledGrammar> g_;
  AutomatonState state_;
  std::vector<AutomatonState> history_;
};

// Whether the grammar matches all of `text` (tests, CLI checks).
bool grammar_matches(CompiledGrammar& g, std::string_view text);

}  // namespace loom::structured
