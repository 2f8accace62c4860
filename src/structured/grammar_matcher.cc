#include "loom/structured/grammar_matcher.h"

#include <algorithm>

namespace loom::structured {

CompiledGrammar::CompiledGrammar(Grammar grammar) : g_(std::move(grammar)) {
  alt_base_.resize(g_.rules.size());
  for (size_t r = 0; r < g_.rules.size(); ++r) {
    for (size_t a = 0; a < g_.rules[r].alternatives.size(); ++a) {
      alt_base_[r].push_back(static_cast<int32_t>(positions_.size()));
      const int32_t len = static_cast<int32_t>(g_.rules[r].alternatives[a].elements.size());
      for (int32_t i = 0; i <= len; ++i) {
        positions_.push_back({static_cast<int32_t>(r), static_cast<int32_t>(a), i});
      }
    }
  }
}

bool CompiledGrammar::at_end(int32_t pos) const {
  const Position& p = positions_[pos];
  return p.index == static_cast<int32_t>(g_.rules[p.rule].alternatives[p.alt].elements.size());
}

int32_t CompiledGrammar::intern(int32_t position, int32_t parent) {
  const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(position)) << 32) | static_cast<uint32_t>(parent + 1);
  auto [it, inserted] = node_ids_.emplace(key, static_cast<int32_t>(nodes_.size()));
  if (inserted) nodes_.push_back({position, parent});
  return it->second;
}

// Follows `position` until every branch sits on a byte element (a stack top) or has
// emptied its stack; rule references at the end of an alternative reuse the caller's
// frame, so right recursion (repetition) does not deepen the stack. A worklist, not
// recursion: nested nullable repetitions can chain far deeper than a thread's stack,
// and a budget turns a pathologically ambiguous grammar into an error, not a hang.
void CompiledGrammar::expand(int32_t position, int32_t parent, AutomatonState* out) {
  work_.clear();
  work_.emplace_back(position, parent);
  size_t steps = 0;
  while (!work_.empty()) {
    const auto [pos, par] = work_.back();
    work_.pop_back();
    if (++steps > kMaxClosureSteps) {
      too_complex_ = true;
      return;
    }
    if (at_end(pos)) {
      if (par == kNeedsContext) {
        out->push_back(kNeedsContext);
      } else if (par < 0) {
        out->push_back(kAcceptStack);
      } else {
        const Node n = nodes_[par];
        work_.emplace_back(n.position, n.parent);
      }
      continue;
    }
    const Position p = positions_[pos];
    const Element& e = g_.rules[p.rule].alternatives[p.alt].elements[p.index];
    if (e.kind == Element::Kind::kByte) {
      out->push_back(intern(pos, par));
      continue;
    }
    const int32_t next = pos + 1;
    const int32_t frame = at_end(next) ? par : intern(next, par);
    for (size_t a = g_.rules[e.rule].alternatives.size(); a-- > 0;)
      work_.emplace_back(position_id(e.rule, static_cast<int32_t>(a), 0), frame);
  }
}

void CompiledGrammar::canonicalize(AutomatonState* s) {
  std::sort(s->begin(), s->end());
  s->erase(std::unique(s->begin(), s->end()), s->end());
}

AutomatonState CompiledGrammar::initial_state() {
  std::lock_guard<std::mutex> lock(mu_);
  AutomatonState s;
  const size_t alts = g_.rules[g_.root].alternatives.size();
  for (size_t a = 0; a < alts; ++a) expand(position_id(g_.root, static_cast<int32_t>(a), 0), -1, &s);
  canonicalize(&s);
  return s;
}

void CompiledGrammar::advance_unlocked(const AutomatonState& state, uint8_t byte, AutomatonState* out) {
  out->clear();
  for (int32_t stack : state) {
    if (stack < 0) continue;
    const Node n = nodes_[stack];
    const Position& p = positions_[n.position];
    if (!g_.rules[p.rule].alternatives[p.alt].elements[p.index].bytes.has(byte)) continue;
    expand(n.position + 1, n.parent, out);
  }
  canonicalize(out);
}

AutomatonState CompiledGrammar::advance(const AutomatonState& state, uint8_t byte) {
  std::lock_guard<std::mutex> lock(mu_);
  AutomatonState out;
  advance_unlocked(state, byte, &out);
  return out;
}

std::vector<int32_t> CompiledGrammar::top_frames(int32_t stack, size_t frames) const {
  std::vector<int32_t> out;
  while (stack >= 0 && out.size() < frames) {
    out.push_back(nodes_[stack].position);
    stack = nodes_[stack].parent;
  }
  if (stack < 0) out.push_back(-1);
  return out;
}

int32_t CompiledGrammar::context_stack(const std::vector<int32_t>& frames) {
  size_t n = frames.size();
  int32_t parent = kNeedsContext;
  if (n > 0 && frames[n - 1] == -1) {
    parent = -1;
    --n;
  }
  for (size_t i = n; i-- > 0;) parent = intern(frames[i], parent);
  return parent;
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<CompiledGrammar> grammar)
    : g_(std::move(grammar)), state_(g_->initial_state()) {}

bool GrammarMatcher::accept(std::string_view bytes) {
  std::vector<AutomatonState> steps;
  steps.reserve(bytes.size());
  AutomatonState cur = state_;
  for (unsigned char b : bytes) {
    AutomatonState next = g_->advance(cur, b);
    if (next.empty()) return false;
    steps.push_back(std::move(cur));
    cur = std::move(next);
  }
  for (auto& s : steps) history_.push_back(std::move(s));
  state_ = std::move(cur);
  return true;
}

void GrammarMatcher::rollback(size_t n) {
  n = std::min(n, history_.size());
  if (n == 0) return;
  state_ = std::move(history_[history_.size() - n]);
  history_.resize(history_.size() - n);
}

bool grammar_matches(CompiledGrammar& g, std::string_view text) {
  AutomatonState s = g.initial_state();
  for (unsigned char b : text) {
    s = g.advance(s, b);
    if (s.empty()) return false;
  }
  return CompiledGrammar::accepting(s);
}

}  // namespace loom::structured
