#include "loom/structured/compile_budget.h"

#include <cstdio>
#include <string>

namespace loom::structured {
namespace {

thread_local const CompileBudget* t_budget = nullptr;
thread_local uint32_t t_calls = 0;
thread_local size_t t_elements = 0;

}  // namespace

ScopedCompileBudget::ScopedCompileBudget(const CompileBudget* budget) : previous_(t_budget) {
  t_budget = budget;
  t_calls = 0;
  t_elements = 0;
}

ScopedCompileBudget::~ScopedCompileBudget() { t_budget = previous_; }

Status check_compile_budget() {
  const CompileBudget* b = t_budget;
  if (!b) return Status::Ok();
  if (b->cancelled && b->cancelled->load(std::memory_order_relaxed))
    return {ErrorCode::kCancelled, "the constraint's compilation was cancelled: its request went away"};
  if ((t_calls++ & 255) != 0) return Status::Ok();
  if (std::chrono::steady_clock::now() < b->deadline) return Status::Ok();
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%g", b->seconds);
  return {ErrorCode::kTimeout, std::string("compiling the constraint took longer than its budget of ") + seconds +
                                   " s: simplify the schema, grammar or pattern"};
}

Status charge_compile_elements(size_t n) {
  const CompileBudget* b = t_budget;
  if (!b || b->max_elements == 0) return Status::Ok();
  t_elements += n;
  if (t_elements <= b->max_elements) return Status::Ok();
  return resource_exhausted("the constraint's grammar needs more than " + std::to_string(b->max_elements) +
                            " elements (repetitions count each copy): simplify the schema, grammar or pattern");
}

}  // namespace loom::structured
