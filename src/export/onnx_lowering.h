// The translation table from loom ops to ONNX (stage "lowering" of
// onnx_exporter.cc). loom's activations are packed rows [tokens, features];
// the ONNX graph is batched: every such value becomes [batch_size,
// sequence_length, features], so elementwise ops, norms and linears map one to
// one, while rope (cos/sin tables gathered by position_ids, rotate-half) and
// attention (past ⧺ new K/V → present, GQA by repeating KV heads, causal +
// padding + sliding-window mask, softmax(QKᵀ·scale)V) get custom lowerings.
// With --onnx-ops ort, onnx_ort_lowering_table() (onnx_lowering_ort.cc) is
// consulted first: ONNX Runtime contrib ops where they apply, the plain
// lowering (and a note why) where they do not.
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
  OnnxLowering(onnx_ir::GraphBuilder& builder, const graph::Graph& graph, int opset_version)
      : b(builder), g(graph), opset(opset_version) {}
  onnx_ir::GraphBuilder& b;
  const graph::Graph& g;
  int opset = 17;
  bool ort = false;            // --onnx-ops ort: contrib ops allowed
  // A static export's sizes (0: dynamic), for lowerings whose op cannot take some of them.
  int64_t static_batch = 0, static_sequence = 0, static_past = 0;
  int64_t rope_positions = 0;  // rows of the cos/sin tables (max_position_embeddings)
  // Graph inputs, and per layer the past / present K and V names.
  std::string input_ids, attention_mask, position_ids;
  std::map<int64_t, std::string> past_key, past_value, present_key, present_value;

  std::map<graph::ValueId, std::string> names;  // loom value → ONNX tensor
  std::map<int64_t, std::string> masks;          // sliding window (0: none) → [B, 1, S, T] additive mask
  std::map<std::string, std::pair<std::string, std::string>> rope_cos_sin;  // rope attrs → [B, S, 1, R] cos, sin
  std::map<std::string, std::pair<std::string, std::string>> rope_tables;   // rope attrs → [positions, R/2] initializers
  std::string gqa_seqlens_k, gqa_total_length;  // GroupQueryAttention's int32 length inputs (built once)
  std::vector<std::string> fallbacks;           // --onnx-ops ort: where plain ops were written, and why

  // The ONNX tensor of a loom value; parameters and constants become float
  // initializers on first use (bf16 / f16 weights are converted to f32).
  Result<std::string> in(graph::ValueId v);
  std::string hint(const graph::Node& n) const { return n.scope.empty() ? n.op : n.scope + "/" + n.op; }
};

using OnnxLowerFn = std::function<Status(OnnxLowering&, const graph::Node&)>;

// loom op → its lowering. An op missing here cannot be exported to ONNX.
const std::map<std::string, OnnxLowerFn>& onnx_lowering_table();
// --onnx-ops ort: loom op → a lowering to ONNX Runtime contrib ops, consulted
// before onnx_lowering_table(); each falls back to the plain lowering itself
// (recording why in OnnxLowering::fallbacks) where its contrib op cannot express the node.
const std::map<std::string, OnnxLowerFn>& onnx_ort_lowering_table();

// Shared by the plain and the contrib lowerings.
// The rope node's cos/sin tables [positions, rotary_dim/2] as initializers (one pair per distinct rope).
Result<std::pair<std::string, std::string>> onnx_rope_table_initializers(OnnxLowering& L, const graph::Node& rope);
// NTK-dynamic rope: cos and sin [B, S, 1, rotary_dim] computed in the graph from
// position_ids (onnx_rope_dynamic.cc), each batch row with its own frequencies.
Result<std::pair<std::string, std::string>> onnx_dynamic_rope_cos_sin(OnnxLowering& L, const graph::Node& rope);
// The additive attention mask [B, 1, S, T]: causal by index in the KV sequence,
// attention_mask's padding, and the sliding window (0: none). Built once per window.
std::string onnx_attention_mask(OnnxLowering& L, int64_t window);
// A string naming a rope node's parameters (equal ropes share tables).
std::string onnx_rope_key(const graph::Node& rope);

}  // namespace loom::exporting
