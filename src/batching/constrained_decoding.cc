#include "batching/constrained_decoding.h"

#include <chrono>

#include "loom/generation/sampling.h"

namespace loom::batching {

Status dead_end_error(const structured::ConstraintState& constraint) {
  if (constraint.constraint().grammar()->too_complex()) return structured::too_complex_error();
  return failed_precondition("no token of the vocabulary continues the grammar here");
}

ConstraintStep mask_for_constraint(const structured::ConstraintState& constraint, float* row, int64_t vocab,
                                   const std::vector<int32_t>& eos_token_ids) {
  const bool complete = constraint.accepting();
  if (complete && !constraint.can_continue()) return ConstraintStep::kComplete;
  const bool timed = constraint.constraint().recording();
  const auto t0 = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  const auto mask = constraint.allowed_tokens();
  static const std::vector<int32_t> kNone;
  const int64_t allowed = generation::apply_allowed_tokens(row, vocab, mask->data(), constraint.constraint().vocabulary()->size(),
                                                           complete ? eos_token_ids : kNone);
  if (timed)
    constraint.constraint().record_mask_seconds(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  if (allowed == 0) return complete ? ConstraintStep::kComplete : ConstraintStep::kDeadEnd;
  return ConstraintStep::kSample;
}

}  // namespace loom::batching
