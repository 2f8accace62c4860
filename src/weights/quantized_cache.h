// Weights quantized at load (--quantize), resident once. Quantizing makes a second
// copy of every matrix in memory; written once to a GGUF file in the cache
// directory and mapped from there, the copies are file pages like a GGUF
// checkpoint's: the runtime can copy them into its layouts and hand the pages back,
// and later loads of the same checkpoint and recipe map the file instead of
// quantizing again.
//
// The cache directory is LOOM_CACHE_DIR, else $XDG_CACHE_HOME/loom, else
// $HOME/.cache/loom; LOOM_CACHE_DIR=off keeps the quantized weights in memory.
// A file is named by a hash of the checkpoint's path, the size and modification
// time of its files, the recipe, the tensor-parallel rank and each quantized
// tensor's name, dtypes and shape: a changed checkpoint gets a new file.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "loom/core/status.h"
#include "loom/core/tensor.h"

namespace loom {

struct QuantizeJob {
  std::string name;
  DType to;
};

struct QuantizeCacheKey {
  std::string checkpoint;  // the --model path
  std::string recipe;      // "q4_k_m"
  std::string extra;       // anything else the loaded tensors depend on (the tensor-parallel rank)
  bool cacheable = true;   // false: quantize in memory whatever the cache directory
};

// "" when caching is off.
std::string quantized_cache_dir();

// Quantizes params[job.name] to job.to for every job, through the cache file when
// there is a cache directory. A cache that cannot be read or written is a warning
// (the weights then stay in memory), never an error; the source's file pages are
// handed back as each tensor is quantized.
Status quantize_parameters(const QuantizeCacheKey& key, const std::vector<QuantizeJob>& jobs,
                           std::map<std::string, Tensor>* params);

}  // namespace loom
