// The portable exporter (ExecuTorch's counterpart): captures the model's step
// graph through the program exporter (backend "portable"), fixes its sizes
// (batch 1, at most max_tokens tokens per chunk, a KV cache of max_positions),
// lowers it to a PortableProgram (f32 weights, rotary tables, KV state layout),
// runs the backend's preparation, plans the arena and writes a .lpte file that
// loom_portable (src/portable, no dependency on loom) loads and runs.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "loom/core/status.h"
#include "loom/export/portable_program.h"
#include "loom/export/program_exporter.h"
#include "loom/models/model.h"

namespace loom::exporting {

struct PortableExportOptions {
  std::string backend = "reference";  // a registered preparation: reference, cpu_simd
  int64_t max_tokens = 32;            // tokens per chunk the arena is planned for
  int64_t max_positions = 0;          // KV cache length; 0: min(max_position_embeddings, 4096)
  // Dynamic: a chunk has 1..max_tokens rows. Static: every row count is fixed
  // to max_tokens in the file (the runtime pads a shorter chunk by repeating its
  // last token at its position, which rewrites the same K/V).
  bool dynamic = true;
  // Weights of at least this many bytes go to the sidecar <out>.weights,
  // which the runtime maps read-only; 0: every weight; negative: none (then the
  // program must fit one flatbuffer, 2 GiB).
  int64_t external_weights_threshold = int64_t{1} << 20;
  // Linear weights and embedding tables a checkpoint holds in bf16 stay bf16
  // (exact: the kernels widen each value as they read it, so the logits are
  // the same as with f32 copies, at half the bytes); false: every weight f32.
  bool keep_bf16 = true;
  bool strict = false;
};

struct PortableExportReport {
  ExportSummary capture;
  std::map<std::string, int> lowered;  // loom op → ops written
  size_t program_bytes = 0, weight_bytes = 0;
  size_t external_weights = 0, weights_file_bytes = 0;  // how many went to the sidecar, its size
  std::string weights_file;                             // its path ("" if none)
  uint64_t arena_bytes = 0, unplanned_bytes = 0, state_bytes = 0;
  std::vector<std::string> lines() const;
};

// Lowers without writing (tests and tools inspect the plan).
Result<PortableProgram> lower_portable(const models::Model& model, const PortableExportOptions& options,
                                       PortableExportReport* report = nullptr);
// Serializes with flatbuffers, every weight inline (at most 2 GiB).
Result<std::vector<uint8_t>> serialize_portable(const PortableProgram& program);
// Writes `path` and, for the weights of at least `external_weights_threshold`
// bytes (negative: none), the sidecar `path`.weights (lpte_weights_file.h).
Status write_portable(const PortableProgram& program, const std::string& path, int64_t external_weights_threshold,
                      PortableExportReport* report = nullptr);
// The skip list (portable_skip_lists.cc): model_type → why it is not exported.
std::map<std::string, std::string> portable_export_skips();
std::string portable_export_skip_reason(const std::string& model_type);  // "" when not listed

// Adds model_type → reason to the skip list while it lives (an embedder that
// must refuse an architecture; the test of the refusal path now that the list
// is empty). Restores the previous entry, or its absence, on destruction.
class ScopedPortableSkip {
 public:
  ScopedPortableSkip(std::string model_type, std::string reason);
  ~ScopedPortableSkip();
  ScopedPortableSkip(const ScopedPortableSkip&) = delete;
  ScopedPortableSkip& operator=(const ScopedPortableSkip&) = delete;

 private:
  std::string model_type_, previous_;
  bool had_previous_ = false;
};

Status export_portable(const models::Model& model, const std::string& path, const PortableExportOptions& options,
                       PortableExportReport* report = nullptr);

}  // namespace loom::exporting
