// The one place a request's grammar constraint touches its logits, shared by
// generate() and the continuous-batching step: mask, then let the sampler pick.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/structured/constraint.h"

namespace loom::batching {

enum class ConstraintStep {
  kSample,    // the row is masked: sample from it
  kComplete,  // the output is a complete match and nothing may follow: stop
  kDeadEnd,   // no token of the vocabulary continues the grammar: fail the request
};

// Sets every id the constraint does not allow next to -inf; EOS ids are allowed
// exactly where the text so far is a complete match.
// Why a kDeadEnd happened, for the request's error.
Status dead_end_error(const structured::ConstraintState& constraint);

ConstraintStep mask_for_constraint(const structured::ConstraintState& constraint, float* row, int64_t vocab,
                                   const std::vector<int32_t>& eos_token_ids);

}  // namespace loom::batching
