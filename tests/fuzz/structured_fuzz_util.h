// Shared by the structured fuzz targets: an accepted grammar must drive the masking
// machinery without faults, and its masks must equal a brute-force reference on a
// small vocabulary (each token's bytes run through the automaton) along a short
// walk whose choices come from the input.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "loom/structured/constraint.h"

namespace loom::fuzz {

inline std::shared_ptr<const structured::TokenVocabulary> small_vocabulary() {
  static const auto vocab = [] {
    std::vector<std::optional<std::string>> bytes;
    for (int b = 0; b < 256; ++b) bytes.emplace_back(std::string(1, static_cast<char>(b)));
    for (const char* t : {"{\"", "\":", "\",", "\"}", "}}", "[]", "true", "false", "null", "12", "-0", "1.5e",
                          "ab", "abc", "  ", "\n\n", "\\u00", "\\\"", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80",
                          "\xc3", "a1", "Z_", "::=", "()", "|", "x*"})
      bytes.emplace_back(std::string(t));
    bytes.emplace_back(std::nullopt);  // a special token: never allowed
    return std::make_shared<const structured::TokenVocabulary>(std::move(bytes));
  }();
  return vocab;
}

inline bool brute_force_allows(structured::CompiledGrammar& g, const structured::AutomatonState& state,
                               const std::string& bytes) {
  structured::AutomatonState s = state;
  for (unsigned char b : bytes) {
    s = g.advance(s, b);
    if (s.empty()) return false;
  }
  return true;
}

// Aborts (a fuzzer crash) when a mask differs from the reference.
inline void check_masks(structured::Grammar grammar, std::string_view input) {
  auto vocab = small_vocabulary();
  auto g = std::make_shared<structured::CompiledGrammar>(std::move(grammar));
  auto constraint = std::make_shared<structured::Constraint>(g, vocab);
  structured::ConstraintState state(constraint);
  uint64_t choice = 1469598103934665603ull;
  for (unsigned char c : input) choice = (choice ^ c) * 1099511628211ull;
  for (int step = 0; step < 8; ++step) {
    if (g->too_complex()) return;
    const auto mask = state.allowed_tokens();
    if (g->too_complex()) return;
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < vocab->size(); ++id) {
      const bool in_mask = ((*mask)[id >> 6] >> (id & 63)) & 1;
      const bool reference = vocab->bytes(id) && !vocab->bytes(id)->empty() && brute_force_allows(*g, state.state(), *vocab->bytes(id));
      if (g->too_complex()) return;
      if (in_mask != reference) std::abort();
      if (in_mask) allowed.push_back(id);
    }
    if (allowed.empty()) return;
    choice = choice * 6364136223846793005ull + 1442695040888963407ull;
    const int32_t pick = allowed[(choice >> 33) % allowed.size()];
    if (!state.accept_token(pick).ok()) {
      if (g->too_complex()) return;
      std::abort();  // the mask allowed it
    }
  }
}

}  // namespace loom::fuzz
