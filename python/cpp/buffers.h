#pragma once

#include <vector>

#include "bindings.h"

namespace loom::python {

struct FloatBuffer {
  std::vector<float> data;
  std::vector<py::ssize_t> shape;
};

}  // namespace loom::python
