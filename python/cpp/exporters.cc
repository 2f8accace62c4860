// The exporters (program, ONNX, portable) and their registries, from Python:
// node fixes, program fixes and op-builder patches written as Python functions
// run inside loom's export pipeline (with the GIL taken for each call) and
// change what is written. Exceptions they raise abort the export unchanged.
#include "bindings.h"
#include "graph_view.h"
#include "model_handle.h"
#include "python_callable.h"
#include "loom/export/exported_program.h"
#include "loom/export/onnx_exporter.h"
#include "loom/export/portable_exporter.h"
#include "loom/export/program_exporter.h"
#include "loom/export/program_io.h"
#include "loom/export/registries.h"
#include "loom/graph/op_schema.h"
#include "loom/models/patch_points.h"

namespace loom::python {

namespace {

using graph::AttrValue;
using graph::ValueId;

struct ProgramView {
  std::shared_ptr<exporting::ExportedProgram*> slot;
  exporting::ExportedProgram& get() const {
    if (!slot || !*slot) throw Error(failed_precondition("a program view was used after its fix returned"));
    return **slot;
  }
};

std::vector<std::string> export_program(const ModelHandle& h, const std::string& out_dir, bool dynamic,
                                        const std::map<std::string, std::pair<int64_t, int64_t>>& ranges,
                                        const std::map<std::string, int64_t>& static_sizes, bool strict) {
  exporting::ProgramExportOptions o;
  o.dynamic = dynamic;
  o.strict = strict;
  for (const auto& [name, r] : ranges) o.ranges[name] = {r.first, r.second};
  o.static_sizes = static_sizes;
  exporting::ExportSummary summary;
  const exporting::ExportedProgram p = unwrap(exporting::export_program(*h.model, o, &summary));
  check(exporting::save_program(p, out_dir));
  return summary.lines();
}

std::vector<std::string> export_onnx(const ModelHandle& h, const std::string& path, int opset, const std::string& ops,
                                     bool dynamic, int64_t batch_size, int64_t sequence_length, int64_t past_length,
                                     bool strict, bool optimize, int64_t external_data_threshold) {
  exporting::OnnxExportOptions o;
  o.opset = opset;
  o.ops = ops;
  o.dynamic = dynamic;
  o.batch_size = batch_size;
  o.sequence_length = sequence_length;
  o.past_length = past_length;
  o.strict = strict;
  o.optimize = optimize;
  o.external_data_threshold = external_data_threshold;
  exporting::OnnxExportReport report;
  check(exporting::export_onnx(*h.model, path, o, &report));
  return report.lines();
}

std::vector<std::string> export_portable(const ModelHandle& h, const std::string& path, const std::string& backend,
                                         int64_t max_tokens, int64_t max_positions, bool dynamic, bool keep_bf16,
                                         bool strict) {
  exporting::PortableExportOptions o;
  o.backend = backend;
  o.max_tokens = max_tokens;
  o.max_positions = max_positions;
  o.dynamic = dynamic;
  o.keep_bf16 = keep_bf16;
  o.strict = strict;
  exporting::PortableExportReport report;
  check(exporting::export_portable(*h.model, path, o, &report));
  return report.lines();
}

void register_node_fix(const std::string& backend, const std::string& op, const std::string& name, py::object fn) {
  auto f = share_callable(std::move(fn));
  exporting::register_node_fix(backend, op, name, [f](graph::Graph& g, graph::NodeId n) -> bool {
    py::gil_scoped_acquire gil;
    ViewLease<graph::Graph> lease(&g);
    return py::cast<bool>((*f)(lease.view(), n));
  });
}

void register_program_fix(const std::string& backend, const std::string& name, py::object fn) {
  auto f = share_callable(std::move(fn));
  exporting::register_program_fix(backend, name, [f](exporting::ExportedProgram& p) -> Status {
    py::gil_scoped_acquire gil;
    auto slot = std::make_shared<exporting::ExportedProgram*>(&p);
    ViewLease<graph::Graph> graph_lease(&p.graph);
    struct Clear {
      std::shared_ptr<exporting::ExportedProgram*> s;
      ~Clear() { *s = nullptr; }
    } clear{slot};
    (*f)(ProgramView{slot}, graph_lease.view());
    return Status::Ok();
  });
}

// Patches of op builders ("ops.<op>"): factory(original) returns the
// replacement, both callables (builder, inputs, attrs) -> value id.
void register_patch(const std::string& backend, const std::string& name, std::vector<std::string> paths,
                    py::object factory) {
  for (const std::string& p : paths)
    if (p.rfind("ops.", 0) != 0)
      throw Error(invalid_argument("register_patch: '" + p + "' is not an op builder (\"ops.<op>\")"));
  auto f = share_callable(std::move(factory));
  using Fn = std::function<graph::OpBuilderSig>;
  exporting::register_patch<graph::OpBuilderSig>(backend, name, std::move(paths), [f](const Fn& original) -> Fn {
    std::shared_ptr<py::object> replacement;
    {
      py::gil_scoped_acquire gil;
      py::cpp_function original_py(
          [original](const BuilderView& b, std::vector<ValueId> inputs, std::map<std::string, AttrValue> attrs) {
            return original(b.get(), std::move(inputs), std::move(attrs));
          });
      replacement = share_callable((*f)(original_py));
    }
    return [replacement](graph::GraphBuilder& b, std::vector<ValueId> inputs, std::map<std::string, AttrValue> attrs) {
      py::gil_scoped_acquire gil;
      ViewLease<graph::GraphBuilder> lease(&b);
      return py::cast<ValueId>((*replacement)(lease.view(), std::move(inputs), std::move(attrs)));
    };
  });
}

using ModuleView = ScopedView<const models::Module>;

// Patches of module forwards ("models.<Class>.forward"): factory(original)
// returns the replacement; both are callables (module, builder, *values) ->
// value id, the values being x (and positions for attention and decoder layers).
template <typename ModuleT, typename... Values>
void register_module_patch(const std::string& backend, const std::string& name, std::vector<std::string> paths,
                           std::shared_ptr<py::object> f) {
  using Sig = ValueId(const ModuleT&, models::GraphBuilder&, Values...);
  using Fn = std::function<Sig>;
  exporting::register_patch<Sig>(backend, name, std::move(paths), [f](const Fn& original) -> Fn {
    std::shared_ptr<py::object> replacement;
    {
      py::gil_scoped_acquire gil;
      // The builder a replacement receives is the models::GraphBuilder it was called with.
      py::cpp_function original_py([original](const ModuleView& m, const BuilderView& b, Values... values) {
        return original(static_cast<const ModuleT&>(m.get()), static_cast<models::GraphBuilder&>(b.get()), values...);
      });
      replacement = share_callable((*f)(original_py));
    }
    return [replacement](const ModuleT& m, models::GraphBuilder& b, Values... values) -> ValueId {
      py::gil_scoped_acquire gil;
      ViewLease<const models::Module> module_lease(&m);
      ViewLease<graph::GraphBuilder> builder_lease(&b);
      return py::cast<ValueId>((*replacement)(module_lease.view(), builder_lease.view(), values...));
    };
  });
}

// kind: "unary" (norms, MLPs, MoE blocks: x), "attention" or "decoder_layer" (x, positions).
void register_forward_patch(const std::string& backend, const std::string& name, std::vector<std::string> paths,
                            const std::string& kind, py::object factory) {
  for (const std::string& p : paths)
    if (p.rfind("models.", 0) != 0 || p.size() < 16 || p.substr(p.size() - 8) != ".forward")
      throw Error(invalid_argument("register_patch: '" + p + "' is not a module forward (\"models.<Class>.forward\")"));
  auto f = share_callable(std::move(factory));
  if (kind == "unary") return register_module_patch<models::UnaryModule, ValueId>(backend, name, std::move(paths), f);
  if (kind == "attention")
    return register_module_patch<models::SelfAttention, ValueId, ValueId>(backend, name, std::move(paths), f);
  if (kind == "decoder_layer")
    return register_module_patch<models::DecoderLayer, ValueId, ValueId>(backend, name, std::move(paths), f);
  throw Error(invalid_argument("register_patch: signature '" + kind + "': use unary, attention or decoder_layer"));
}

}  // namespace

void register_exporters(py::module_& m) {
  py::class_<ModuleView>(m, "_Module")
      .def_property_readonly("path", [](const ModuleView& v) { return v.get().path(); })
      .def_property_readonly("class_name", [](const ModuleView& v) { return v.get().class_name(); })
      .def_property_readonly("layer_name", [](const ModuleView& v) { return v.get().layer_name(); })
      .def("__repr__", [](const ModuleView& v) { return "<module " + v.get().path() + " [" + v.get().class_name() + "]>"; });
  py::class_<ProgramView>(m, "_Program")
      .def_property_readonly("input_names", [](const ProgramView& v) { return v.get().input_names; })
      .def_property_readonly("output_names", [](const ProgramView& v) { return v.get().output_names; })
      .def("dims",
           [](const ProgramView& v) {
             std::map<std::string, std::pair<int64_t, int64_t>> out;
             for (const auto& [k, r] : v.get().dims) out[k] = {r.min, r.max};
             return out;
           })
      .def("set_dim", [](const ProgramView& v, const std::string& name, int64_t min, int64_t max) {
        v.get().dims[name] = {min, max};
      })
      .def("metadata", [](const ProgramView& v) { return v.get().metadata; })
      .def("set_metadata",
           [](const ProgramView& v, const std::string& k, const std::string& value) { v.get().metadata[k] = value; });

  m.def("_export_program", &export_program, py::arg("model"), py::arg("out_dir"), py::arg("dynamic"),
        py::arg("ranges"), py::arg("static_sizes"), py::arg("strict"), py::call_guard<py::gil_scoped_release>());
  m.def("_export_onnx", &export_onnx, py::arg("model"), py::arg("path"), py::arg("opset"), py::arg("ops"),
        py::arg("dynamic"), py::arg("batch_size"), py::arg("sequence_length"), py::arg("past_length"),
        py::arg("strict"), py::arg("optimize"), py::arg("external_data_threshold"),
        py::call_guard<py::gil_scoped_release>());
  m.def("_export_portable", &export_portable, py::arg("model"), py::arg("path"), py::arg("backend"),
        py::arg("max_tokens"), py::arg("max_positions"), py::arg("dynamic"), py::arg("keep_bf16"), py::arg("strict"),
        py::call_guard<py::gil_scoped_release>());
  m.def("_register_node_fix", &register_node_fix);
  m.def("_register_program_fix", &register_program_fix);
  m.def("_register_patch", &register_patch);
  m.def("_register_forward_patch", &register_forward_patch);
  m.def("_registered_fixes", &exporting::registered_fixes);
  m.def("_op_names", &graph::op_names);
  m.def("_onnx_default_opset", [] { return exporting::kOnnxDefaultOpset; });
}

}  // namespace loom::python
