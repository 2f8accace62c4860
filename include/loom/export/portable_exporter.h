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
  bool strict = false;
};

struct PortableExportReport {
  ExportSummary capture;
  std::map<std::string, int> lowered;  // loom op → ops written
  size_t program_bytes = 0, weight_bytes = 0;
  uint64_t arena_bytes = 0, unplanned_bytes = 0, state_bytes = 0;
  std::vector<std::string> lines() const;
};

// Lowers without writing (tests and tools inspect the plan).
Result<PortableProgram> lower_portable(const models::Model& model, const PortableExportOptions& options,
                                       PortableExportReport* report = nullptr);
// Serializes with flatbuffers.
Result<std::vector<uint8_t>> serialize_portable(const PortableProgram& program);
Status export_portable(const models::Model& model, const std::string& path, const PortableExportOptions& options,
                       PortableExportReport* report = nullptr);

}  // namespace loom::exporting
