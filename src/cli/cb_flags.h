// The ContinuousBatchingConfig flags shared by `loom batch` and `loom serve`: one
// flag per config field, named after it, and --cb-config FILE.json (flags win).
#pragma once

#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "loom/batching/continuous_batching_config.h"

namespace loom::cli {

struct CbFlags {
  std::string cb_config;
  std::optional<int64_t> page_size, num_blocks, max_batch_tokens, max_requests_per_batch, max_blocks_per_request;
  std::optional<double> max_memory_percent, safety_margin, cpu_offload_space, cpu_offload_space_safety_threshold,
      cpu_group_timeout;
  std::optional<bool> allow_block_sharing, use_async_batching, adaptive_speculation, return_logprobs, auto_switch_to_flash,
      per_request_processors, drop_unsupported_processors, disable_nccl_graph_mixing;
  bool no_block_sharing = false;
  std::optional<std::string> cpu_offload_path;
  std::optional<std::string> kv_cache_dtype, cache_type_k, cache_type_v, kv_cache_rotation;
  std::optional<std::string> scheduler_type, use_cuda_graph, varlen_compile_config, decode_compile_config;
  std::optional<int64_t> q_padding_interval_size, kv_padding_interval_size, default_compile_level, max_queue_size;
};

void add_cb_options(CLI::App* cmd, CbFlags* f);
// The config from --cb-config and the flags. per_request_processors defaults to
// true (requests carry their own sampling); `seed` is used when neither sets one.
batching::ContinuousBatchingConfig make_cb_config(const CbFlags& f, std::optional<uint64_t> seed);

}  // namespace loom::cli
