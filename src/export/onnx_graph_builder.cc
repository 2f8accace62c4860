#include "onnx_graph_builder.h"

#include <cstring>

namespace loom::exporting::onnx_ir {

void set_attr(onnx::NodeProto& n, const std::string& name, int64_t v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

void set_attr(onnx::NodeProto& n, const std::string& name, float v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}

void set_attr(onnx::NodeProto& n, const std::string& name, const std::vector<int64_t>& v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

const onnx::AttributeProto* find_attr(const onnx::NodeProto& n, const std::string& name) {
  for (const auto& a : n.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

std::string GraphBuilder::fresh(const std::string& hint) {
  std::string base = hint.empty() ? "t" : hint;
  if (base[0] != '/') base = "/" + base;
  const int k = used_[base]++;
  return k == 0 ? base : base + "_" + std::to_string(k);
}

onnx::NodeProto& GraphBuilder::node(const std::string& op, const std::vector<std::string>& inputs, int n_out,
                                    const std::string& hint) {
  onnx::NodeProto* n = g_->add_node();
  n->set_op_type(op);
  const std::string name = fresh(hint.empty() ? op : hint + "/" + op);
  n->set_name(name);
  for (const std::string& i : inputs) n->add_input(i);
  for (int k = 0; k < n_out; ++k) n->add_output(n_out == 1 ? name + "_output" : name + "_output_" + std::to_string(k));
  return *n;
}

std::string GraphBuilder::op(const std::string& op, const std::vector<std::string>& inputs, const std::string& hint) {
  return node(op, inputs, 1, hint).output(0);
}

std::string GraphBuilder::i64(const std::vector<int64_t>& v) {
  std::string key = "i64[";
  for (int64_t x : v) key += std::to_string(x) + ",";
  if (auto it = consts_.find(key); it != consts_.end()) return it->second;
  onnx::TensorProto* t = g_->add_initializer();
  const std::string name = fresh("const_i64");
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::INT64);
  t->add_dims(static_cast<int64_t>(v.size()));
  for (int64_t x : v) t->add_int64_data(x);
  return consts_[key] = name;
}

std::string GraphBuilder::i64_scalar(int64_t v) {
  const std::string key = "i64:" + std::to_string(v);
  if (auto it = consts_.find(key); it != consts_.end()) return it->second;
  onnx::TensorProto* t = g_->add_initializer();
  const std::string name = fresh("const_i64_scalar");
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::INT64);
  t->add_int64_data(v);
  return consts_[key] = name;
}

std::string GraphBuilder::f32_scalar(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  const std::string key = "f32:" + std::to_string(bits);
  if (auto it = consts_.find(key); it != consts_.end()) return it->second;
  onnx::TensorProto* t = g_->add_initializer();
  const std::string name = fresh("const_f32");
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  t->add_float_data(v);
  return consts_[key] = name;
}

std::string GraphBuilder::f32_tensor(const std::string& name, const std::vector<int64_t>& dims,
                                     const std::vector<float>& data) {
  onnx::TensorProto* t = g_->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t->add_dims(d);
  t->set_raw_data(std::string(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(float)));
  used_[name]++;
  return name;
}

int64_t numel(const onnx::TensorProto& t) {
  int64_t n = 1;
  for (int64_t d : t.dims()) n *= d;
  return n;
}

bool read_f32(const onnx::TensorProto& t, std::vector<float>* out) {
  if (t.data_type() != onnx::TensorProto::FLOAT || t.data_location() == onnx::TensorProto::EXTERNAL) return false;
  const int64_t n = numel(t);
  out->resize(static_cast<size_t>(n));
  if (t.has_raw_data()) {
    if (t.raw_data().size() != static_cast<size_t>(n) * 4) return false;
    std::memcpy(out->data(), t.raw_data().data(), t.raw_data().size());
  } else {
    if (t.float_data_size() != n) return false;
    for (int64_t i = 0; i < n; ++i) (*out)[static_cast<size_t>(i)] = t.float_data(static_cast<int>(i));
  }
  return true;
}

bool read_i64(const onnx::TensorProto& t, std::vector<int64_t>* out) {
  if (t.data_type() != onnx::TensorProto::INT64 || t.data_location() == onnx::TensorProto::EXTERNAL) return false;
  const int64_t n = numel(t);
  out->resize(static_cast<size_t>(n));
  if (t.has_raw_data()) {
    if (t.raw_data().size() != static_cast<size_t>(n) * 8) return false;
    std::memcpy(out->data(), t.raw_data().data(), t.raw_data().size());
  } else {
    if (t.int64_data_size() != n) return false;
    for (int64_t i = 0; i < n; ++i) (*out)[static_cast<size_t>(i)] = t.int64_data(static_cast<int>(i));
  }
  return true;
}

}  // namespace loom::exporting::onnx_ir
