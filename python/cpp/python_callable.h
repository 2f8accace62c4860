// A Python callable held by C++ code that may call or drop it on any thread
// (the batching loop): it takes the GIL for both, and during interpreter
// shutdown neither calls nor decrefs (the object is left to the dying runtime).
#pragma once

#include <memory>

#include "bindings.h"

namespace loom::python {

inline std::shared_ptr<py::object> share_callable(py::object f) {
  return std::shared_ptr<py::object>(new py::object(std::move(f)), [](py::object* p) {
    if (!python_alive()) {
      p->release();
    } else {
      py::gil_scoped_acquire gil;
      p->dec_ref();
      p->release();
    }
    delete p;
  });
}

}  // namespace loom::python
