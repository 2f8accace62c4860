// Code point ranges → UTF-8 byte-range sequences (the split Rust's regex-syntax
// Utf8Sequences makes), so a character class becomes alternatives of byte elements.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace loom::structured {

using CodepointRange = std::pair<uint32_t, uint32_t>;  // inclusive
using ByteRangeSequence = std::vector<std::pair<uint8_t, uint8_t>>;

// Sorted, merged ranges; `negate` takes the complement over all scalar values.
std::vector<CodepointRange> normalize_ranges(std::vector<CodepointRange> ranges, bool negate);

// Every scalar value of `ranges` (surrogates skipped) as byte-range sequences: a
// string of bytes is the UTF-8 of a member iff it matches one sequence.
std::vector<ByteRangeSequence> utf8_sequences(const std::vector<CodepointRange>& ranges);

void append_utf8(std::string& out, uint32_t cp);

}  // namespace loom::structured
