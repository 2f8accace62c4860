#include "loom/batching/scheduler.h"

namespace loom::batching {

// Decodes first keep inter-token latency flat while long prompts stream in.
void FifoScheduler::fill(StepPlan& plan, bool speculative) {
  offer_decodes(plan, speculative);
  offer_prefills(plan, speculative);
  admit_waiting(plan, speculative);
}

}  // namespace loom::batching
