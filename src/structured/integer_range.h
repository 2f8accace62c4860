// Integer bounds as GBNF: the decimal strings of [lo, hi] (either side open) as
// digit-class alternatives, the way regex range generators split a range by length
// and by the first digit that differs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace loom::structured {

// "[a-b]", or the quoted digit when a == b (number_range builds with it too).
std::string gbnf_digit_class(char a, char b);

// |bounds| ≤ 1e15; lo ≤ hi when both are given. JSON integers: no leading zeros, "-0" never.
std::string integer_range_gbnf(std::optional<int64_t> lo, std::optional<int64_t> hi);

}  // namespace loom::structured
