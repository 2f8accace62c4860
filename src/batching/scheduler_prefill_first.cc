#include "loom/batching/scheduler.h"

namespace loom::batching {

// Prompts first: the fastest time to first token, at the cost of stalling
// running decodes while there is prefill work.
void PrefillFirstScheduler::fill(StepPlan& plan, bool speculative) {
  offer_prefills(plan, speculative);
  admit_waiting(plan, speculative);
  offer_decodes(plan, speculative);
}

}  // namespace loom::batching
