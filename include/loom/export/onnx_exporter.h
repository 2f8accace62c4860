// The ONNX exporter: captures a model's step graph with the "onnx" backend's
// patches and fixes (through export_program), lowers loom's packed, paged graph
// to a batched ONNX graph with Optimum's decoder signature, applies fixes to the
// final model, optimizes it and writes `.onnx` (+ external data).
//
// Signature (Optimum's names, so existing consumers run the file):
//   inputs  input_ids       int64 [batch_size, sequence_length]
//           attention_mask  int64 [batch_size, past_sequence_length + sequence_length]
//           position_ids    int64 [batch_size, sequence_length]
//           past_key_values.{i}.key / .value  float [batch_size, kv_heads, past_sequence_length, head_dim]
//   outputs logits          float [batch_size, sequence_length, vocab_size]
//           present.{i}.key / .value  float [batch_size, kv_heads, past_sequence_length + sequence_length, head_dim]
// Logits come for every position (loom's gather_rows is dropped by a node fix).
// A static export (dynamic = false) writes the same names with every dim fixed:
// batch_size, sequence_length and past_sequence_length become numbers.
// Causality and sliding windows follow the index in the KV sequence (as in
// Transformers); attention_mask marks padding; position_ids drive RoPE only.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "loom/core/status.h"
#include "loom/export/program_exporter.h"
#include "loom/models/model.h"

namespace loom::exporting {

inline constexpr int kOnnxDefaultOpset = 17;  // what Debian's onnx 1.12 checker accepts
inline constexpr int kOnnxMinOpset = 14;      // Reshape allowzero, Trilu-era ops, Unsqueeze axes as input
inline constexpr int kOnnxMaxOpset = 26;      // the newest ONNX Runtime 1.30 runs

struct OnnxExportOptions {
  int opset = kOnnxDefaultOpset;
  // "standard": plain ONNX ops. "ort": ONNX Runtime contrib ops where they apply
  // (com.microsoft GroupQueryAttention, RotaryEmbedding, SkipSimplifiedLayerNormalization;
  // SimplifiedLayerNormalization), plain ops elsewhere; such a file runs only in ONNX Runtime.
  std::string ops = "standard";
  // true: batch_size, sequence_length, past_sequence_length stay named symbolic dims.
  // false: fixed to these sizes (a prefill file: past_length 0; a decode file: sequence_length 1).
  bool dynamic = true;
  int64_t batch_size = 1, sequence_length = 1, past_length = 0;
  bool strict = false;           // a patch path that resolves to nothing is an error
  bool optimize = true;          // false: skip the optimizer stage (the disable list can also skip it)
  // Initializers of at least this many bytes go to "<file>.data" (external data);
  // negative: everything inline (protobuf caps a file at 2 GiB).
  int64_t external_data_threshold = 1024;
};

struct OnnxExportReport {
  ExportSummary capture;                         // stages 1-3 (patches, node fixes, program fixes)
  std::map<std::string, int> lowered;            // loom op → nodes lowered
  std::map<std::string, int> contrib_ops;        // --onnx-ops ort: ONNX Runtime contrib op → nodes written
  std::vector<std::string> contrib_fallbacks;    // --onnx-ops ort: where plain ops were written, and why
  std::string signature;                         // "dynamic" or "static B×S, past P"
  std::vector<std::string> model_fixes;          // "name: n changes"
  int folded = 0, dead_removed = 0;              // optimizer
  std::string optimizer_disabled;                // reason, when the disable list names the architecture
  int nodes = 0, initializers = 0;
  int64_t inline_bytes = 0, external_bytes = 0;
  std::string external_data_file;                // file name next to the model (empty: none)
  std::vector<std::string> lines() const;        // for the CLI's report
};

// Writes the model to `path` (and `path` + ".data" when some weights are external).
Status export_onnx(const models::Model& model, const std::string& path, const OnnxExportOptions& options,
                   OnnxExportReport* report = nullptr);

// The skip and disable lists (upstream's EXPORT_SKIPS and ONNX_DISABLE_OPTIMIZE),
// in one place: src/export/onnx_skip_lists.cc. Each entry carries its reason;
// export_onnx and the tests consult them.
//
// Export skips: key "<model_type>" (both op sets) or "<model_type>:ort" (only
// --onnx-ops ort) → why that architecture is not exported; export_onnx refuses it
// with the reason.
const std::map<std::string, std::string>& onnx_export_skips();
// The reason `model_type` is skipped for `ops` ("standard" or "ort"), or "" when it is exported.
std::string onnx_export_skip_reason(const std::string& model_type, const std::string& ops);
// Optimizer disable list: model_type → why the optimizer must not touch its graph.
const std::map<std::string, std::string>& onnx_disable_optimize();

}  // namespace loom::exporting
