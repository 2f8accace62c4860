#include "loom/graph/graph_json.h"

namespace loom::graph {

using json = nlohmann::json;

namespace {

const char* kind_name(ValueKind k) {
  switch (k) {
    case ValueKind::kInput: return "input";
    case ValueKind::kParameter: return "parameter";
    case ValueKind::kConstant: return "constant";
    case ValueKind::kNode: return "node";
  }
  return "?";
}

json shape_to_json(const Graph& g, const SymShape& s) {
  json a = json::array();
  for (const Dim& d : s) a.push_back(d.is_static() ? json(d.value) : json(g.symbols().at(static_cast<size_t>(d.symbol))));
  return a;
}

// Attributes keep their C++ type: {"int": 3}, {"float": 0.5}, {"str": "x"},
// {"ints": [..]}, {"floats": [..]} (an empty list would be ambiguous untagged).
json attr_to_json(const AttrValue& v) {
  struct Visit {
    json operator()(int64_t x) const { return {{"int", x}}; }
    json operator()(double x) const { return {{"float", x}}; }
    json operator()(const std::string& x) const { return {{"str", x}}; }
    json operator()(const std::vector<int64_t>& x) const { return {{"ints", x}}; }
    json operator()(const std::vector<double>& x) const { return {{"floats", x}}; }
  };
  return std::visit(Visit{}, v);
}

Result<AttrValue> attr_from_json(const json& j, const std::string& where) {
  if (j.is_object() && j.size() == 1) {
    const auto& [tag, v] = *j.items().begin();
    if (tag == "int" && v.is_number_integer()) return AttrValue(v.get<int64_t>());
    if (tag == "float" && v.is_number()) return AttrValue(v.get<double>());
    if (tag == "str" && v.is_string()) return AttrValue(v.get<std::string>());
    if (tag == "ints" && v.is_array()) {
      std::vector<int64_t> out;
      for (const json& x : v) {
        if (!x.is_number_integer()) return parse_error(where + ": 'ints' holds a non-integer");
        out.push_back(x.get<int64_t>());
      }
      return AttrValue(std::move(out));
    }
    if (tag == "floats" && v.is_array()) {
      std::vector<double> out;
      for (const json& x : v) {
        if (!x.is_number()) return parse_error(where + ": 'floats' holds a non-number");
        out.push_back(x.get<double>());
      }
      return AttrValue(std::move(out));
    }
  }
  return parse_error(where + ": an attribute must be one of {\"int\"|\"float\"|\"str\"|\"ints\"|\"floats\": value}, got " +
                     j.dump());
}

}  // namespace

json graph_to_json(const Graph& g) {
  json j;
  j["symbols"] = g.symbols();
  json values = json::array();
  for (const Value& v : g.values()) {
    if (v.kind == ValueKind::kNode) continue;
    values.push_back({{"id", v.id}, {"kind", kind_name(v.kind)}, {"name", v.name},
                      {"dtype", std::string(dtype_name(v.dtype))}, {"shape", shape_to_json(g, v.shape)}});
  }
  j["values"] = std::move(values);
  json nodes = json::array();
  for (const Node& n : g.nodes()) {
    json attrs = json::object();
    for (const auto& [k, v] : n.attrs) attrs[k] = attr_to_json(v);
    json out_names = json::array();
    for (ValueId o : n.outputs) out_names.push_back(g.value(o).name);
    nodes.push_back({{"op", n.op}, {"inputs", n.inputs}, {"outputs", n.outputs}, {"output_names", out_names},
                     {"attrs", attrs}, {"scope", n.scope}});
  }
  j["nodes"] = std::move(nodes);
  json outputs = json::array();
  for (const auto& [name, v] : g.outputs()) outputs.push_back({name, v});
  j["outputs"] = std::move(outputs);
  return j;
}

Result<Graph> graph_from_json(const json& j, const std::function<Result<Tensor>(const std::string&, ValueKind)>& tensor,
                              std::map<ValueId, ValueId>* id_map_out) {
  try {
    Graph g;
    for (const json& s : j.at("symbols")) g.add_symbol(s.get<std::string>());
    std::map<ValueId, ValueId> ids;
    auto map_id = [&](ValueId old, const std::string& where) -> Result<ValueId> {
      if (old == kNoValue) return kNoValue;
      auto it = ids.find(old);
      if (it == ids.end()) return parse_error(where + ": value " + std::to_string(old) + " is used before it is defined");
      return it->second;
    };
    for (const json& v : j.at("values")) {
      const std::string kind = v.at("kind").get<std::string>();
      const std::string name = v.at("name").get<std::string>();
      const ValueId old = v.at("id").get<ValueId>();
      const std::string where = "value " + std::to_string(old) + " ('" + name + "')";
      const std::optional<DType> dt = dtype_from_name(v.at("dtype").get<std::string>());
      if (!dt) return parse_error(where + ": unknown dtype " + v.at("dtype").dump());
      SymShape shape;
      for (const json& d : v.at("shape")) {
        if (d.is_number_integer()) {
          shape.push_back(Dim::fixed(d.get<int64_t>()));
        } else {
          const int s = g.symbol(d.get<std::string>());
          if (s < 0) return parse_error(where + ": unknown dimension symbol " + d.dump());
          shape.push_back(Dim::sym(s));
        }
      }
      ValueId now = kNoValue;
      if (kind == "input") {
        now = g.add_input(name, *dt, shape);
      } else if (kind == "parameter" || kind == "constant") {
        const ValueKind k = kind == "parameter" ? ValueKind::kParameter : ValueKind::kConstant;
        LOOM_ASSIGN_OR_RETURN(Tensor t, tensor(name, k));
        if (t.dtype() != *dt) return parse_error(where + ": the stored tensor is " + std::string(dtype_name(t.dtype())));
        now = k == ValueKind::kParameter ? g.add_parameter(name, t) : g.add_constant(name, t);
        if (g.value(now).shape != shape) return parse_error(where + ": the stored tensor's shape differs from the graph's");
      } else {
        return parse_error(where + ": unknown kind '" + kind + "'");
      }
      ids[old] = now;
    }
    const json& nodes = j.at("nodes");
    for (size_t i = 0; i < nodes.size(); ++i) {
      const json& n = nodes[i];
      const std::string where = "node " + std::to_string(i) + " (" + n.at("op").get<std::string>() + ")";
      std::vector<ValueId> inputs;
      for (const json& in : n.at("inputs")) {
        LOOM_ASSIGN_OR_RETURN(ValueId v, map_id(in.get<ValueId>(), where));
        inputs.push_back(v);
      }
      std::map<std::string, AttrValue> attrs;
      for (const auto& [k, v] : n.at("attrs").items()) {
        LOOM_ASSIGN_OR_RETURN(attrs[k], attr_from_json(v, where + " attribute '" + k + "'"));
      }
      const std::vector<ValueId> outs = g.add_node(n.at("op").get<std::string>(), inputs, attrs, n.at("scope").get<std::string>());
      const json& saved = n.at("outputs");
      if (saved.size() != outs.size())
        return parse_error(where + ": " + std::to_string(saved.size()) + " outputs saved, the op makes " +
                           std::to_string(outs.size()));
      for (size_t k = 0; k < outs.size(); ++k) {
        ids[saved[k].get<ValueId>()] = outs[k];
        if (n.contains("output_names")) g.mutable_value(outs[k]).name = n.at("output_names")[k].get<std::string>();
      }
    }
    for (const json& o : j.at("outputs")) {
      LOOM_ASSIGN_OR_RETURN(ValueId v, map_id(o.at(1).get<ValueId>(), "output '" + o.at(0).get<std::string>() + "'"));
      g.mark_output(o.at(0).get<std::string>(), v);
    }
    if (id_map_out) *id_map_out = std::move(ids);
    return g;
  } catch (const Error& e) {
    return e.status();
  } catch (const json::exception& e) {
    return parse_error(std::string("graph JSON: ") + e.what());
  }
}

}  // namespace loom::graph
