// The translation table from loom ops to ONNX (stage "lowering" of
// onnx_exporter.cc). loom's activations are packed rows [tokens, features];
// the ONNX graph is batched: every such value becomes [batch_size,
// sequence_length, features], so elementwise ops, norms and linears map one to
// one, while rope (cos/sin tables gathered by position_ids, rotate-half) and
// attention (past ⧺ new K/V → present, GQA by repeating KV heads, causal +
// padding + sliding-window mask, softmax(QKᵀ·scale)V) get custom lowerings.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "loom/core/status.h"
#include "loom/graph/graph.h"
#include "onnx_graph_builder.h"

namespace loom::exporting {

struct OnnxLowering {
  onnx_ir::GraphBuilder& b;
  const graph::Graph& g;
  int opset = 17;
  int64_t rope_positions = 0;  // rows of the cos/sin tables (max_position_embeddings)
  // Graph inputs, and per layer the past / present K and V names.
  std::string input_ids, attention_mask, position_ids;
  std::map<int64_t, std::string> past_key, past_value, present_key, present_value;

  std::map<graph::ValueId, std::string> names;  // loom value → ONNX tensor
  std::map<int64_t, std::string> masks;          // sliding window (0: none) → [B, 1, S, T] additive mask
  std::map<std::string, std::pair<std::string, std::string>> rope_cos_sin;  // rope attrs → [B, S, 1, R] cos, sin

  // The ONNX tensor of a loom value; parameters and constants become float
  // initializers on first use (bf16 / f16 weights are converted to f32).
  Result<std::string> in(graph::ValueId v);
  std::string hint(const graph::Node& n) const { return n.scope.empty() ? n.op : n.scope + "/" + n.op; }
};

using OnnxLowerFn = std::function<Status(OnnxLowering&, const graph::Node&)>;

// loom op → its lowering. An op missing here cannot be exported to ONNX.
const std::map<std::string, OnnxLowerFn>& onnx_lowering_table();

}  // namespace loom::exporting
