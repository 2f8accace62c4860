// What the binding sources share: each exposed class has its own file with a
// register_<name>(module) function, which module.cc calls in dependency order.
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>

#include "loom/core/status.h"

namespace loom::python {

namespace py = pybind11;

void register_errors(py::module_& m);
void register_buffers(py::module_& m);
void register_tokenizer(py::module_& m);
void register_generation_config(py::module_& m);
void register_continuous_batching_config(py::module_& m);
void register_generation_output(py::module_& m);
void register_constraints(py::module_& m);
void register_model(py::module_& m);
void register_manager(py::module_& m);
void register_generate_batch(py::module_& m);
void register_kernel_config(py::module_& m);
void register_graph(py::module_& m);
void register_exporters(py::module_& m);

// A failed Result becomes a loom::Error, which the one translator (errors.cc)
// turns into the Python exception that fits its ErrorCode.
template <typename T>
T unwrap(Result<T>&& r) {
  if (!r.ok()) throw Error(r.status());
  return std::move(r).value();
}
inline void check(const Status& s) {
  if (!s.ok()) throw Error(s);
}

// Raises KeyboardInterrupt (or whatever a signal handler raised) in the calling
// thread when a signal arrived; call with the GIL held, between slices of work.
inline void raise_pending_signals() {
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

// True while Python code may still run (not during interpreter shutdown).
bool python_alive();

}  // namespace loom::python
