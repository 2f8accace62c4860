// Emitting ONNX nodes, constants and initializers into an onnx::GraphProto with
// unique names — the small vocabulary the lowering table, the model fixes and
// the optimizer share. Internal to the export layer (protobuf stays out of the
// public headers).
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace loom::exporting::onnx_ir {

// Attribute setters for a node being built.
void set_attr(onnx::NodeProto& n, const std::string& name, int64_t v);
void set_attr(onnx::NodeProto& n, const std::string& name, float v);
void set_attr(onnx::NodeProto& n, const std::string& name, const std::vector<int64_t>& v);
const onnx::AttributeProto* find_attr(const onnx::NodeProto& n, const std::string& name);

class GraphBuilder {
 public:
  explicit GraphBuilder(onnx::GraphProto* g) : g_(g) {}
  onnx::GraphProto& graph() { return *g_; }

  // A name not used yet, derived from `hint` ("model.layers.0.self_attn/q" → "/model.layers.0.self_attn/q_3").
  std::string fresh(const std::string& hint);

  // Appends a node with `n_out` fresh outputs; returns the node so attributes can be set.
  onnx::NodeProto& node(const std::string& op, const std::vector<std::string>& inputs, int n_out,
                        const std::string& hint);
  // One-output shorthand.
  std::string op(const std::string& op, const std::vector<std::string>& inputs, const std::string& hint);

  // Small constants as initializers (deduplicated by value).
  std::string i64(const std::vector<int64_t>& v);  // 1-D
  std::string i64_scalar(int64_t v);
  std::string f32_scalar(float v);
  // A float initializer with the given dims (data copied).
  std::string f32_tensor(const std::string& name, const std::vector<int64_t>& dims, const std::vector<float>& data);

 private:
  onnx::GraphProto* g_;
  std::map<std::string, int> used_;
  std::map<std::string, std::string> consts_;
};

// The float data of an initializer (raw_data or float_data), or false when it is not a float tensor.
bool read_f32(const onnx::TensorProto& t, std::vector<float>* out);
bool read_i64(const onnx::TensorProto& t, std::vector<int64_t>* out);
int64_t numel(const onnx::TensorProto& t);

}  // namespace loom::exporting::onnx_ir
