// Memoized automaton steps for trie walks. A mask walks the vocabulary trie and
// advances the automaton once per node — hundreds of thousands of nodes for a 128K
// vocabulary — but only a few distinct states occur along the way (inside a JSON
// string almost every byte leads back to the same state). States are interned to ids
// and each id's successor per byte is computed once, so a step is an array lookup.
// Not thread-safe: used under the grammar's lock.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "loom/structured/grammar_matcher.h"

namespace loom::structured {

class ByteTransitions {
 public:
  explicit ByteTransitions(CompiledGrammar* grammar);

  static constexpr int32_t kDead = 0;  // the empty state: no stack survived
  // The id of a canonical state (as advance_unlocked leaves it). A leading
  // kNeedsContext is split off into needs_context(id).
  int32_t intern(const AutomatonState& state);
  int32_t next(int32_t id, uint8_t byte);
  // Some branch of this state returned below the known frames of a context stack.
  bool needs_context(int32_t id) const { return states_[id].needs_context; }
  const AutomatonState& stacks(int32_t id) const { return states_[id].stacks; }
  // Drops everything when the table has grown past its bound; call between walks
  // (ids are invalidated).
  void trim();
  // About the bytes the states and their successor tables hold.
  size_t memory_bytes() const;

  // Successor arrays kept at once (1 KiB each); past it they are dropped and
  // recomputed on demand, so a grammar with very many states stays bounded.
  static constexpr size_t kMaxTables = 8192;

 private:
  struct State {
    AutomatonState stacks;
    bool needs_context = false;
    std::unique_ptr<int32_t[]> successor;  // 256 ids, -1 not yet computed
  };
  struct Hash {
    size_t operator()(const AutomatonState& s) const;
  };
  CompiledGrammar* grammar_;
  std::vector<State> states_;
  std::unordered_map<AutomatonState, int32_t, Hash> ids_;  // keyed with the kNeedsContext marker
  size_t tables_ = 0;
  AutomatonState scratch_;
};

}  // namespace loom::structured
