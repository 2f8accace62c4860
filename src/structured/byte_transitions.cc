#include "structured/byte_transitions.h"

#include <algorithm>

namespace loom::structured {

ByteTransitions::ByteTransitions(CompiledGrammar* grammar) : grammar_(grammar) { intern({}); }

size_t ByteTransitions::Hash::operator()(const AutomatonState& s) const {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ s.size();
  for (int32_t v : s) h = (h ^ static_cast<uint32_t>(v)) * 0x100000001B3ull;
  return static_cast<size_t>(h ^ (h >> 29));
}

int32_t ByteTransitions::intern(const AutomatonState& state) {
  auto it = ids_.find(state);
  if (it != ids_.end()) return it->second;
  const int32_t id = static_cast<int32_t>(states_.size());
  State s;
  s.stacks = state;
  // kNeedsContext (-2) sorts first: it marks the state, the walk goes on with the rest.
  if (!s.stacks.empty() && s.stacks.front() == kNeedsContext) {
    s.stacks.erase(s.stacks.begin());
    s.needs_context = true;
  }
  states_.push_back(std::move(s));
  ids_.emplace(state, id);
  return id;
}

int32_t ByteTransitions::next(int32_t id, uint8_t byte) {
  if (id == kDead) return kDead;
  if (!states_[id].successor) {
    if (tables_ >= kMaxTables) {
      for (State& s : states_) s.successor.reset();
      tables_ = 0;
    }
    states_[id].successor.reset(new int32_t[256]);
    std::fill_n(states_[id].successor.get(), 256, -1);
    ++tables_;
  }
  int32_t& slot = states_[id].successor[byte];
  if (slot < 0) {
    grammar_->advance_unlocked(states_[id].stacks, byte, &scratch_);
    const int32_t to = intern(scratch_);
    // intern may have grown states_; the reference into successor stays valid (it is
    // a separate allocation that only trim or the table bound frees, neither of which
    // intern does).
    slot = to;
  }
  return slot;
}

void ByteTransitions::trim() {
  if (states_.size() <= kMaxTables) return;
  states_.clear();
  ids_.clear();
  tables_ = 0;
  intern({});
}

size_t ByteTransitions::memory_bytes() const {
  size_t bytes = tables_ * 256 * sizeof(int32_t);
  for (const State& s : states_) bytes += sizeof(State) + 2 * s.stacks.size() * sizeof(int32_t) + 32;  // + its key
  return bytes;
}

}  // namespace loom::structured
