// What the program exporter produces (torch.export's ExportedProgram): the
// captured graph with its weights, a flat signature of named inputs and outputs,
// the dimension constraints of dynamic axes, and metadata for consumers.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "loom/graph/graph.h"

namespace loom::exporting {

struct DimRange {
  int64_t min = 1;
  int64_t max = 0;  // 0: unbounded
};

struct ExportedProgram {
  graph::Graph graph;                        // parameters carry the weights
  std::vector<std::string> input_names;      // flat signature, in order
  std::vector<std::string> output_names;
  std::map<std::string, DimRange> dims;      // dynamic dimension → its range
  std::map<std::string, std::string> metadata;  // loom version, dtypes, cache layout per layer, …
  // The model's side files by name (config.json, generation_config.json, the
  // tokenizer's files): written next to the program so that it runs like the
  // checkpoint it came from (program_io.h).
  std::map<std::string, std::string> files;
};

}  // namespace loom::exporting
