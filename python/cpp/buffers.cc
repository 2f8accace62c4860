// FloatBuffer: f32 results (logits) handed to numpy without a copy — the array
// views the buffer and keeps it alive through its base object.
#include "buffers.h"

namespace loom::python {

void register_buffers(py::module_& m) {
  py::class_<FloatBuffer, std::shared_ptr<FloatBuffer>>(m, "_FloatBuffer", py::buffer_protocol())
      .def_buffer([](FloatBuffer& b) -> py::buffer_info {
        std::vector<py::ssize_t> strides(b.shape.size());
        py::ssize_t stride = sizeof(float);
        for (size_t i = b.shape.size(); i-- > 0;) {
          strides[i] = stride;
          stride *= b.shape[i];
        }
        return py::buffer_info(b.data.data(), sizeof(float), py::format_descriptor<float>::format(),
                               static_cast<py::ssize_t>(b.shape.size()), b.shape, strides);
      })
      .def_property_readonly("shape", [](const FloatBuffer& b) { return b.shape; });
}

}  // namespace loom::python
