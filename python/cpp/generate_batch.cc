// generate_batch: many prompts through a ContinuousBatchingManager, outputs in
// input order. The progress callback runs on the calling thread every tenth of
// a second: it shows the progress line (progress_bar) and turns Ctrl-C into
// KeyboardInterrupt, which unwinds generate_batch and stops its manager.
#include <unistd.h>

#include <cstdio>

#include "bindings.h"
#include "generation_config_json.h"
#include "model_handle.h"
#include "loom/batching/generate_batch.h"

namespace loom::python {

namespace {

py::list generate_batch(ModelHandle& h, std::vector<batching::BatchInput> inputs, const std::string& gc_json,
                        const std::string& cb_json, bool record_timestamps, bool progress_bar, bool persistent_manager,
                        bool warmup) {
  const GenerationConfig gc = call_generation_config(h, gc_json);
  const batching::ContinuousBatchingConfig cb = parse_cb_config(cb_json);
  batching::GenerateBatchOptions o;
  o.record_timestamps = record_timestamps;
  o.warmup = warmup;
  o.manager = h.manager_options();
  o.progress_interval = 0.1;
  if (persistent_manager) o.persistent_manager = &h.persistent_manager;
  const bool tty = isatty(STDERR_FILENO);
  // On a terminal the line is redrawn in place; otherwise one line per finished request.
  o.progress = [progress_bar, tty, shown = int64_t{-1}](const batching::BatchProgress& p) mutable {
    if (progress_bar && (tty || p.done != shown)) {
      shown = p.done;
      std::fprintf(stderr, "%s[generate_batch] %lld/%lld requests · %lld tokens · %.1f tok/s%s", tty ? "\r" : "",
                   static_cast<long long>(p.done), static_cast<long long>(p.total),
                   static_cast<long long>(p.generated_tokens), p.tokens_per_second,
                   tty && p.done < p.total ? "" : "\n");
      std::fflush(stderr);
    }
    py::gil_scoped_acquire gil;
    raise_pending_signals();
  };
  batching::BatchResult result;
  {
    py::gil_scoped_release release;
    std::shared_ptr<batching::ModelRunner> runner;
    if (!persistent_manager || !h.persistent_manager) runner = h.take_runner();
    try {
      result = unwrap(batching::generate_batch(runner, inputs, gc, cb, o));
    } catch (...) {
      // Interrupted: a kept manager would go on with the abandoned requests.
      if (persistent_manager && h.persistent_manager) {
        h.persistent_manager->destroy();
        h.persistent_manager.reset();
      }
      throw;
    }
    if (!persistent_manager) h.give_back_runner(std::move(runner));
  }
  py::list out;
  for (batching::GenerationOutput& g : result.outputs) out.append(py::cast(std::move(g)));
  return out;
}

}  // namespace

void register_generate_batch(py::module_& m) {
  py::class_<batching::BatchInput>(m, "_BatchInput")
      .def(py::init([](std::vector<int32_t> ids, batching::RequestOptions o) {
             return batching::BatchInput{std::move(ids), std::move(o)};
           }),
           py::arg("input_ids"), py::arg("options"));
  m.def("_generate_batch", &generate_batch, py::arg("model"), py::arg("inputs"), py::arg("generation_config_json"),
        py::arg("continuous_batching_config_json"), py::arg("record_timestamps") = false, py::arg("progress_bar") = false,
        py::arg("persistent_manager") = false, py::arg("warmup") = true);
  m.def("_destroy_persistent_manager", [](ModelHandle& h) {
    py::gil_scoped_release release;
    if (h.persistent_manager) h.persistent_manager->destroy();
    h.persistent_manager.reset();
  });
}

}  // namespace loom::python
