#include "onnx_optimizer.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include "onnx_graph_builder.h"

namespace loom::exporting {
namespace {

using onnx_ir::read_f32;

std::map<std::string, onnx::TensorProto*> initializers(onnx::GraphProto& g) {
  std::map<std::string, onnx::TensorProto*> m;
  for (onnx::TensorProto& t : *g.mutable_initializer()) m[t.name()] = &t;
  return m;
}

// The folded value of `n` when all its inputs are float initializers and the op
// is one of the trivial ones; false otherwise.
bool fold(const onnx::NodeProto& n, const std::map<std::string, onnx::TensorProto*>& init, onnx::TensorProto* out) {
  std::vector<std::vector<float>> vals;
  std::vector<const onnx::TensorProto*> ts;
  for (const std::string& i : n.input()) {
    auto it = init.find(i);
    if (it == init.end()) return false;
    std::vector<float> v;
    if (!read_f32(*it->second, &v)) return false;
    vals.push_back(std::move(v));
    ts.push_back(it->second);
  }
  if (n.op_type() == "Transpose" && ts.size() == 1 && ts[0]->dims_size() == 2) {
    const onnx::AttributeProto* perm = onnx_ir::find_attr(n, "perm");
    if (perm && !(perm->ints_size() == 2 && perm->ints(0) == 1 && perm->ints(1) == 0)) return false;
    const int64_t r = ts[0]->dims(0), c = ts[0]->dims(1);
    std::vector<float> t(static_cast<size_t>(r * c));
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < c; ++j) t[static_cast<size_t>(j * r + i)] = vals[0][static_cast<size_t>(i * c + j)];
    out->set_data_type(onnx::TensorProto::FLOAT);
    out->add_dims(c);
    out->add_dims(r);
    out->set_raw_data(std::string(reinterpret_cast<const char*>(t.data()), t.size() * 4));
    return true;
  }
  if (n.op_type() == "Add" && ts.size() == 2 && (vals[1].size() == 1 || vals[0].size() == 1)) {
    const int big = vals[1].size() == 1 ? 0 : 1;
    std::vector<float> t = vals[static_cast<size_t>(big)];
    const float s = vals[static_cast<size_t>(1 - big)][0];
    for (float& x : t) x += s;
    out->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : ts[static_cast<size_t>(big)]->dims()) out->add_dims(d);
    out->set_raw_data(std::string(reinterpret_cast<const char*>(t.data()), t.size() * 4));
    return true;
  }
  return false;
}

void rename_uses(onnx::GraphProto& g, const std::string& from, const std::string& to) {
  for (onnx::NodeProto& n : *g.mutable_node())
    for (std::string& i : *n.mutable_input())
      if (i == from) i = to;
}

}  // namespace

OnnxOptimizeStats optimize_onnx(onnx::GraphProto& g) {
  OnnxOptimizeStats s;
  // Constant folding, in node order (a folded result may feed the next fold).
  {
    auto init = initializers(g);
    std::set<int> drop;
    for (int i = 0; i < g.node_size(); ++i) {
      const onnx::NodeProto& n = g.node(i);
      if (n.output_size() != 1) continue;
      onnx::TensorProto folded;
      if (!fold(n, init, &folded)) continue;
      folded.set_name(n.output(0));
      onnx::TensorProto* t = g.add_initializer();
      *t = std::move(folded);
      init = initializers(g);  // add_initializer may not move elements, but keep the map simple and right
      drop.insert(i);
      ++s.folded;
    }
    google::protobuf::RepeatedPtrField<onnx::NodeProto> kept;
    for (int i = 0; i < g.node_size(); ++i)
      if (!drop.count(i)) *kept.Add() = std::move(*g.mutable_node(i));
    g.mutable_node()->Swap(&kept);
  }
  // Identity → graph output: the producer writes the output name directly.
  {
    std::set<std::string> outputs, inputs;
    for (const auto& o : g.output()) outputs.insert(o.name());
    for (const auto& i : g.input()) inputs.insert(i.name());
    std::map<std::string, int> producer;
    for (int i = 0; i < g.node_size(); ++i)
      for (const std::string& o : g.node(i).output()) producer[o] = i;
    for (int i = 0; i < g.node_size(); ++i) {
      onnx::NodeProto& n = *g.mutable_node(i);
      if (n.op_type() != "Identity" || !outputs.count(n.output(0))) continue;
      const std::string src = n.input(0), dst = n.output(0);
      auto p = producer.find(src);
      if (p == producer.end() || outputs.count(src) || inputs.count(src)) continue;
      for (std::string& o : *g.mutable_node(p->second)->mutable_output())
        if (o == src) o = dst;
      n.clear_input();
      n.clear_output();  // now dead: removed below
      rename_uses(g, src, dst);
    }
  }
  // Dead nodes (walking back from the graph outputs) and unused initializers.
  std::set<std::string> live;
  for (const auto& o : g.output()) live.insert(o.name());
  std::vector<bool> keep(static_cast<size_t>(g.node_size()), false);
  for (int i = g.node_size() - 1; i >= 0; --i) {
    const onnx::NodeProto& n = g.node(i);
    bool used = false;
    for (const std::string& o : n.output()) used = used || live.count(o);
    if (!used) continue;
    keep[static_cast<size_t>(i)] = true;
    for (const std::string& in : n.input()) live.insert(in);
  }
  google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
  for (int i = 0; i < g.node_size(); ++i) {
    if (keep[static_cast<size_t>(i)]) *nodes.Add() = std::move(*g.mutable_node(i));
    else ++s.dead_removed;
  }
  g.mutable_node()->Swap(&nodes);
  google::protobuf::RepeatedPtrField<onnx::TensorProto> inits;
  for (onnx::TensorProto& t : *g.mutable_initializer()) {
    if (live.count(t.name())) *inits.Add() = std::move(t);
    else ++s.dead_removed;
  }
  g.mutable_initializer()->Swap(&inits);
  return s;
}

}  // namespace loom::exporting
