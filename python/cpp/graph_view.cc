// _Graph and _GraphBuilder: loom's IR as Python fixes and patches rewrite it —
// nodes (op, attributes, inputs, outputs, scope), values (name, dtype, shape),
// adding nodes and redirecting uses.
#include "graph_view.h"

#include "loom/core/dtype.h"

namespace loom::python {

namespace {

py::dict value_dict(const graph::Graph& g, graph::ValueId v) {
  const graph::Value& x = g.value(v);
  static const char* kinds[] = {"input", "parameter", "constant", "node"};
  py::dict d;
  d["id"] = x.id;
  d["name"] = x.name;
  d["kind"] = kinds[static_cast<int>(x.kind)];
  d["dtype"] = std::string(dtype_name(x.dtype));
  d["shape"] = g.shape_to_string(x.shape);
  d["producer"] = x.producer;
  return d;
}

const graph::Node& node_at(const graph::Graph& g, graph::NodeId n) {
  if (n < 0 || static_cast<size_t>(n) >= g.nodes().size())
    throw Error(out_of_range("node id " + std::to_string(n) + " is not in the graph (" +
                             std::to_string(g.nodes().size()) + " nodes)"));
  return g.node(n);
}

void check_value(const graph::Graph& g, graph::ValueId v) {
  if (v < 0 || static_cast<size_t>(v) >= g.values().size())
    throw Error(out_of_range("value id " + std::to_string(v) + " is not in the graph"));
}

}  // namespace

void register_graph(py::module_& m) {
  py::class_<GraphView>(m, "_Graph")
      .def_property_readonly("num_nodes", [](const GraphView& v) { return v.get().nodes().size(); })
      .def("op", [](const GraphView& v, graph::NodeId n) { return node_at(v.get(), n).op; })
      .def("scope", [](const GraphView& v, graph::NodeId n) { return node_at(v.get(), n).scope; })
      .def("inputs", [](const GraphView& v, graph::NodeId n) { return node_at(v.get(), n).inputs; })
      .def("outputs", [](const GraphView& v, graph::NodeId n) { return node_at(v.get(), n).outputs; })
      .def("attrs", [](const GraphView& v, graph::NodeId n) { return node_at(v.get(), n).attrs; })
      .def("set_attr",
           [](const GraphView& v, graph::NodeId n, const std::string& key, graph::AttrValue value) {
             node_at(v.get(), n);
             v.get().mutable_node(n).attrs[key] = std::move(value);
           })
      .def("value", [](const GraphView& v, graph::ValueId id) {
        check_value(v.get(), id);
        return value_dict(v.get(), id);
      })
      .def("add_node",
           [](const GraphView& v, const std::string& op, std::vector<graph::ValueId> inputs,
              std::map<std::string, graph::AttrValue> attrs, const std::string& scope) {
             for (graph::ValueId x : inputs)
               if (x != graph::kNoValue) check_value(v.get(), x);
             return v.get().add_node(op, std::move(inputs), std::move(attrs), scope);
           },
           py::arg("op"), py::arg("inputs"), py::arg("attrs") = std::map<std::string, graph::AttrValue>{},
           py::arg("scope") = "")
      // Every use of `old` becomes `new`, except in the node that computes `new`
      // (so a node wrapping `old` keeps reading it).
      .def("replace_uses",
           [](const GraphView& v, graph::ValueId old_value, graph::ValueId new_value) {
             graph::Graph& g = v.get();
             check_value(g, old_value);
             check_value(g, new_value);
             const graph::NodeId producer = g.value(new_value).producer;
             std::vector<graph::ValueId> kept;
             if (producer >= 0) kept = g.node(producer).inputs;
             g.replace_uses(old_value, new_value);
             if (producer >= 0) g.mutable_node(producer).inputs = kept;
           },
           py::arg("old"), py::arg("new"))
      .def("outputs_by_name", [](const GraphView& v) { return v.get().outputs(); })
      .def("to_string", [](const GraphView& v) { return v.get().to_string(); });

  py::class_<BuilderView>(m, "_GraphBuilder")
      .def("record",
           [](const BuilderView& v, const std::string& op, std::vector<graph::ValueId> inputs,
              std::map<std::string, graph::AttrValue> attrs) { return v.get().record(op, std::move(inputs), std::move(attrs)); },
           py::arg("op"), py::arg("inputs"), py::arg("attrs") = std::map<std::string, graph::AttrValue>{})
      .def("op",
           [](const BuilderView& v, const std::string& op, std::vector<graph::ValueId> inputs,
              std::map<std::string, graph::AttrValue> attrs) { return v.get().op(op, std::move(inputs), std::move(attrs)); },
           py::arg("op"), py::arg("inputs"), py::arg("attrs") = std::map<std::string, graph::AttrValue>{})
      .def("param", [](const BuilderView& v, const std::string& name) { return v.get().param(name); })
      .def_property_readonly("scope", [](const BuilderView& v) { return v.get().scope(); })
      .def_property_readonly("graph", [](const BuilderView& v) { return GraphView{std::make_shared<graph::Graph*>(&v.get().graph())}; });
}

}  // namespace loom::python
