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
  std::string ops = "standard";  // "standard": plain ONNX ops ("ort" contrib ops: not implemented, refused)
  bool strict = false;           // a patch path that resolves to nothing is an error
  bool optimize = true;          // false: skip the optimizer stage (the disable list can also skip it)
  // Initializers of at least this many bytes go to "<file>.data" (external data);
  // negative: everything inline (protobuf caps a file at 2 GiB).
  int64_t external_data_threshold = 1024;
};

struct OnnxExportReport {
  ExportSummary capture;                         // stages 1-3 (patches, node fixes, program fixes)
  std::map<std::string, int> lowered;            // loom op → nodes lowered
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

// The per-architecture optimizer disable list (upstream's ONNX_DISABLE_OPTIMIZE):
// model_type → why the optimizer must not touch its graph.
const std::map<std::string, std::string>& onnx_disable_optimize();

}  // namespace loom::exporting
