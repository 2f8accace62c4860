// What compiling one constraint may spend: a deadline, and a flag its requester sets
// when it no longer wants the result (the client left). The builders (schema, regex,
// choice and GBNF conversion, and the first mask) poll it at their loop heads; the
// budget is set for the compiling thread by a scope, so that parse_gbnf and the
// converters keep their signatures and cost nothing when no budget is set.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "loom/core/status.h"

namespace loom::structured {

struct CompileBudget {
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  double seconds = 0;                         // the budget the deadline came from, for the message
  const std::atomic<bool>* cancelled = nullptr;  // set: stop at the next check
  // Grammar elements the compilation may create (0: no limit). Repetition makes a
  // grammar far larger than its text (`a{10000}` is 10,000 elements).
  size_t max_elements = 0;
};

// Makes `budget` the compiling thread's for the scope's life.
class ScopedCompileBudget {
 public:
  explicit ScopedCompileBudget(const CompileBudget* budget);
  ~ScopedCompileBudget();
  ScopedCompileBudget(const ScopedCompileBudget&) = delete;
  ScopedCompileBudget& operator=(const ScopedCompileBudget&) = delete;

 private:
  const CompileBudget* previous_;
};

// Ok without a budget or within it; kTimeout naming the budget once the deadline
// has passed; kCancelled once the requester gave up. Reads the clock every 256th
// call, so loops may call it per item.
Status check_compile_budget();

// Counts `n` more grammar elements against the budget: kResourceExhausted naming the
// limit once they pass it.
Status charge_compile_elements(size_t n);

}  // namespace loom::structured
