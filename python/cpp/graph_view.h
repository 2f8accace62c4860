// What a Python export fix or patch sees of loom's graph while it runs: a view
// (not a copy) valid only during the call — the C++ side clears the shared slot
// when the call returns, and a view kept past it raises instead of dangling.
#pragma once

#include <memory>

#include "bindings.h"
#include "loom/graph/builder.h"
#include "loom/graph/graph.h"

namespace loom::python {

template <typename T>
struct ScopedView {
  std::shared_ptr<T*> slot;
  T& get() const {
    if (!slot || !*slot) throw Error(failed_precondition("a graph view was used after its fix or patch returned"));
    return **slot;
  }
};
using GraphView = ScopedView<graph::Graph>;
using BuilderView = ScopedView<graph::GraphBuilder>;

// Points a view at `target` for one call; clears it on exit (also on exceptions).
template <typename T>
class ViewLease {
 public:
  explicit ViewLease(T* target) : slot_(std::make_shared<T*>(target)) {}
  ~ViewLease() { *slot_ = nullptr; }
  ScopedView<T> view() const { return ScopedView<T>{slot_}; }

 private:
  std::shared_ptr<T*> slot_;
};

}  // namespace loom::python
