// ContinuousBatchingConfig: every field of Transformers' ContinuousBatchingConfig,
// with the same names and defaults. Fields that only mean something on a GPU
// (CUDA graphs, torch.compile, padding intervals, NCCL, flash attention) are
// accepted and validated, and reported by cpu_no_op_fields() as having no effect.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/core/dtype.h"
#include "loom/core/status.h"
#include "loom/graph/kv_format.h"

namespace loom::batching {

struct ContinuousBatchingConfig {
  // Tokens per page per layer; a block holds one page per layer.
  int64_t page_size = 256;
  // KV blocks; inferred from available memory × max_memory_percent when unset.
  std::optional<int64_t> num_blocks;
  // Token budget of one step; 256 when unset (see resolve()).
  std::optional<int64_t> max_batch_tokens;
  // Share of available memory for the KV pool when num_blocks is unset (default 0.9).
  std::optional<double> max_memory_percent;
  // Sequences in one step and running at once; 1024 when unset (capped by max_batch_tokens).
  std::optional<int64_t> max_requests_per_batch;
  // Most blocks one request may hold; a longer request fails alone. 0 or unset: no limit.
  std::optional<int64_t> max_blocks_per_request;
  // Prefix caching (full-attention models only; ignored with sliding-window layers).
  bool allow_block_sharing = true;
  // Plan step N+1 (scheduling, block allocation, prefix lookup) on a second thread
  // while step N computes. Unset: off on CPU.
  std::optional<bool> use_async_batching;
  // Speculative decoding (prompt lookup) drafts only in steps where the measured step
  // cost says the drafted rows pay for themselves (batching/step_cost.h): off once a
  // large batch makes the step compute-bound. Unset: on. False: draft whenever the
  // adaptive draft length says so (deterministic; tests).
  std::optional<bool> adaptive_speculation;
  // GPU only. A bool in JSON applies to both the varlen and the decode path.
  std::optional<std::pair<bool, bool>> use_cuda_graph;
  int64_t q_padding_interval_size = 0;   // GPU only
  int64_t kv_padding_interval_size = 0;  // GPU only
  std::optional<nlohmann::json> varlen_compile_config;  // GPU only (a CompileConfig object)
  std::optional<nlohmann::json> decode_compile_config;  // GPU only
  int64_t default_compile_level = 0;                    // GPU only, 0..3
  // "fifo" (decodes first, then prefill chunks in arrival order) or "prefill_first".
  std::string scheduler_type = "fifo";
  // New requests are admitted only while more than this share of the KV pool is
  // available. Unset: 0.2 for fifo, 0 for prefill_first.
  std::optional<double> safety_margin;
  bool return_logprobs = false;
  // Seed of requests that bring none (else each request gets a random one).
  std::optional<uint64_t> seed;
  bool auto_switch_to_flash = true;  // GPU only
  // GiB of host swap space for preempted requests' K/V; 0 or unset: recompute instead.
  std::optional<double> cpu_offload_space = 0.0;
  // cpu_offload_space is clamped to this share of total RAM (of the free disk
  // space with cpu_offload_path).
  double cpu_offload_space_safety_threshold = 0.8;
  // loom only: back the host swap pool with a file instead of RAM — a file path,
  // or a directory to create an anonymous (already unlinked) file in. Unset: RAM.
  std::optional<std::string> cpu_offload_path;
  // loom only: type of the paged K/V cache, for K and V both: "float32", "bfloat16",
  // "float16", "q8_0" or "q4_0" (llama.cpp's f32/bf16/f16 names too). bf16/f16 halve the KV
  // memory (twice the blocks for the same budget) and what each decode step reads; q8_0 (ggml's
  // blocks of 32: f16 scale + 32 int8) takes 34/128 of f32, q4_0 18/128. K and V are rounded or
  // quantized once, per head vector, when written. Scores, softmax and the weighted sum stay f32
  // (a q8_0/q4_0 K scores with int8 dot products).
  std::string kv_cache_dtype = "float32";
  // loom only: K's and V's own types (llama.cpp's --cache-type-k / -v); unset: kv_cache_dtype.
  std::optional<std::string> cache_type_k;
  std::optional<std::string> cache_type_v;
  // loom only: Hadamard rotation of K and V per head before they are stored (graph/kv_format.h):
  // "auto" (a q4_0 K or V is rotated), "on" (both, whatever their types), "off".
  std::string kv_cache_rotation = "auto";
  // Most requests waiting for admission; 0: no limit. add_request fails (or waits,
  // with a queue timeout) when the queue is full.
  int64_t max_queue_size = 0;
  // Honour per-request sampling settings (temperature, top_k, top_p, min_p,
  // repetition_penalty, do_sample). Off: they are dropped (drop_unsupported_processors)
  // or rejected.
  bool per_request_processors = false;
  bool drop_unsupported_processors = true;
  bool disable_nccl_graph_mixing = true;      // GPU/TP only
  std::optional<double> cpu_group_timeout = 300.0;  // TP only
  std::optional<bool> use_default_compile_configs;  // deprecated: default_compile_level
  std::optional<int64_t> max_cached_graphs;         // deprecated
  std::optional<int64_t> block_size;                // deprecated: page_size

  // InvalidArgument naming the field for any value out of range.
  Status validate() const;
  // Every key above; unknown keys and wrong types are errors naming the key and `source`.
  static Result<ContinuousBatchingConfig> from_json(const nlohmann::json& j, const std::string& source = "config");
  static Result<ContinuousBatchingConfig> from_file(const std::string& path);
  nlohmann::json to_json() const;

  // "use_cuda_graph: no effect on CPU (no CUDA graphs)" for each GPU-only field set to a
  // non-default value, from the one list of them (continuous_batching_config.cc).
  std::vector<std::string> cpu_no_op_fields() const;
  // All of them in one line, or "" when none is set: what ContinuousBatchingManager::create
  // logs once as a warning (the only place they are reported).
  std::string cpu_no_op_warning() const;
  // page_size, or block_size when only the deprecated name was set.
  int64_t effective_page_size() const;
  // kv_cache_dtype as a DType; call after validate().
  DType kv_dtype() const;
  // K and V types and rotation from kv_cache_dtype, cache_type_k/v and kv_cache_rotation;
  // call after validate().
  graph::KvFormat kv_format() const;
};

// A KV cache type by its kv_cache_dtype name: "float32"/"f32" → F32, "bfloat16"/"bf16" → BF16,
// "float16"/"f16" → F16, "q8_0", "q4_0"; anything else is InvalidArgument naming the accepted
// values. Shared by the config, the CLI flags and the benchmarks.
Result<DType> kv_cache_dtype_from_name(std::string_view name);

// The numbers a manager runs with, once unset fields are inferred.
struct CbResources {
  int64_t page_size = 0;
  int64_t num_blocks = 0;
  int64_t max_batch_tokens = 0;
  bool max_batch_tokens_inferred = false;  // from memory, not the config
  int64_t max_requests_per_batch = 0;
  int64_t max_blocks_per_request = 0;  // 0: no limit
  double safety_margin = 0.0;
  int64_t swap_pages = 0;  // host swap, pages of one layer
  std::string swap_path;   // file backing the swap pool; empty: RAM
  bool async_batching = false;
  bool adaptive_speculation = true;
  size_t block_bytes = 0;  // one page per layer, K and V
};

// Fills in num_blocks and max_batch_tokens from memory when unset, as
// Transformers' PagedAttentionMemoryHandler does (without its attention-mask
// term: loom has none). With B the budget (max_memory_percent of available
// memory), N blocks of `block_bytes` and a step of M tokens needing
// `activation_bytes_per_token` each:  B = N·block_bytes + M·activation_bytes_per_token.
//   both unset:            M = 1% of the positions the pool holds (N·page_size), at most 256;
//   num_blocks set:        M from what the blocks leave, at most 256;
//   max_batch_tokens set:  N from what the step leaves.
// `position_bytes`: K+V bytes of one position of one layer; a block is
// page_size positions of `num_layers` layers. `available_memory` /
// `total_memory` in bytes (0: read /proc/meminfo). activation_bytes_per_token 0:
// unknown, M = 256 when unset.
Result<CbResources> resolve(const ContinuousBatchingConfig& c, size_t position_bytes, int num_layers,
                            size_t available_memory = 0, size_t total_memory = 0,
                            size_t activation_bytes_per_token = 0);

// Free bytes on the file system holding `path` (a file or a directory; 0 when unknown).
size_t free_disk_bytes(const std::string& path);

// MemAvailable and MemTotal from /proc/meminfo, in bytes (0 when unreadable).
std::pair<size_t, size_t> host_memory();

}  // namespace loom::batching
