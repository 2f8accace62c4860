// Number bounds (minimum, maximum, exclusive either side) as GBNF: the decimal strings
// (no exponent, at most 16 fractional digits) whose value lies in the range, built the
// way integer_range builds integers: split by the integer part, then the fractional
// digits compared as a string padded with zeros (0.5 == 0.50), digit by digit.
#pragma once

#include <optional>
#include <string>

#include "loom/core/status.h"

namespace loom::structured {

struct NumberBound {
  double value;
  bool exclusive = false;
};

// OK when a bound can be written as these numbers are: finite, |v| ≤ 1e15, at most 16
// decimal places (else kUnsupported saying which).
Status check_number_bound(double v);

// Bounds that pass check_number_bound (else kUnsupported); an empty range is
// kInvalidArgument. Never writes "-0".
Result<std::string> number_range_gbnf(std::optional<NumberBound> lo, std::optional<NumberBound> hi);

}  // namespace loom::structured
