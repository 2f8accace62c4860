// Functions an `external_call` node names by key. The graph stores only the
// key (graphs are values: they print, save and compare); whoever puts such a
// node in a graph (models, recording a plugin kernel) registers the function
// here first, and whoever runs it (runtime) looks it up. A registration keeps
// the plugin library loaded for the rest of the process, since graphs and
// executors built from it may outlive the model that recorded it.
#pragma once

#include <memory>
#include <string>

#include "loom/core/status.h"

namespace loom::graph {

struct ExternalFunction {
  std::string key;        // "acme/norms:CustomRMSNorm 2.1.0 (/path/libnorm.so)"
  std::string signature;  // one of external_call_abi.h's LOOM_CALL_*
  void (*entry)(void) = nullptr;
  std::shared_ptr<void> keep_alive;
};

// Whether external_call knows this calling convention.
bool is_known_external_signature(const std::string& signature);

// Adds or confirms `fn`: the same key registered again must name the same
// entry and signature (InvalidArgument otherwise, naming the key); unknown
// signatures and null entries are refused.
Status register_external_function(ExternalFunction fn);

// The function registered under `key`; NotFound naming the key otherwise.
Result<ExternalFunction> find_external_function(const std::string& key);

}  // namespace loom::graph
