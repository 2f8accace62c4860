// Weights made in memory at load, resident once. Quantizing at load (--quantize)
// makes a second copy of every matrix, and some conversion rules make one of a
// tensor (llama.cpp's permuted q/k rows put back, GPT-2's transposed Conv1D
// weights). Held by the model, such a copy cannot be handed back once the runtime
// has copied it into its own layout, so the weights were resident twice. Written
// once to a GGUF file in the cache directory and mapped from there, they are file
// pages like a checkpoint's: the runtime copies them into its layouts and hands the
// pages back, and later loads of the same checkpoint map the file instead of
// quantizing again. The file is looked up before the checkpoint is read, so a later
// load neither reads the tensors those weights were made from nor makes them again.
//
// The file is an entry of the cache directory (core/cache_dir.h: its naming,
// validation against the checkpoint's files, eviction and listing are the store's;
// this layer supplies the GGUF payload). LOOM_CACHE_DIR=off keeps those weights in
// memory. The entry's key is loom's version, the checkpoint's path, the size and
// modification time of its files, the recipe, the tensor-parallel rank and what the
// load makes of the checkpoint (its conversion plan and every parameter's name,
// dtype and shape), all known before a tensor is read: a changed checkpoint gets a
// new entry, and the old one is evicted as one whose source changed.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "loom/core/status.h"
#include "loom/core/tensor.h"

namespace loom {

struct CachedWeight {
  std::string name;
  DType to;  // the parameter's own dtype: kept as it is; another one: quantized to it
};

struct WeightsCacheKey {
  std::string checkpoint;  // the --model path
  std::string recipe;      // "q4_k_m", or "" without --quantize
  std::string extra;       // anything else the loaded tensors depend on (the tensor-parallel rank)
  std::string loaded;      // what the load makes of the checkpoint: its plan and parameters, as text
  bool cacheable = true;   // false: keep them in memory whatever the cache directory
};

// Whether a parameter is worth a place in the cache: made in memory (not a view of a
// file mapping) and large enough that holding it twice matters.
bool made_in_memory(const Tensor& t);

// Before the checkpoint is read: the weights an earlier load with this key cached,
// mapped from the cache file, by name; none when there is no such file (or no cache
// directory, or it does not read back: map_weights_through_cache then writes it again).
std::map<std::string, Tensor> find_cached_weights(const WeightsCacheKey& key);

// After loading (params holding every parameter, those find_cached_weights gave
// included): sets every params[w.name] to its cached version (quantized to w.to where that is
// another dtype), read from the cache file's mapping when there is a cache
// directory. A cache that cannot be read or written is a warning (the weights then
// stay in memory), never an error; a quantized tensor's source file pages are
// handed back as it is quantized.
Status map_weights_through_cache(const WeightsCacheKey& key, const std::vector<CachedWeight>& weights,
                                 std::map<std::string, Tensor>* params);

}  // namespace loom
