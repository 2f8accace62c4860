// loom._loom: registers every binding (one source per exposed class); the
// public names live in the pure-Python package (loom/__init__.py).
#include "bindings.h"

PYBIND11_MODULE(_loom, m) {
  namespace lp = loom::python;
  m.doc() = "loom's engine: the compiled part of the `loom` package";
  m.attr("__version__") = LOOM_VERSION;
  lp::register_errors(m);
  lp::register_buffers(m);
  lp::register_tokenizer(m);
  lp::register_generation_config(m);
  lp::register_continuous_batching_config(m);
  lp::register_generation_output(m);
  lp::register_constraints(m);
  lp::register_model(m);
  lp::register_manager(m);
  lp::register_generate_batch(m);
  lp::register_kernel_config(m);
  lp::register_graph(m);
  lp::register_exporters(m);
}
