#include "cli/cb_flags.h"

#include "cli/kv_cache_flags.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "loom/core/status.h"

namespace loom::cli {

using json = nlohmann::json;

void add_cb_options(CLI::App* cmd, CbFlags* f) {
  cmd->add_option("--cb-config", f->cb_config, "ContinuousBatchingConfig as a JSON file (flags below override it)");
  cmd->add_option("--page-size", f->page_size, "Tokens per KV page per layer (default 256)");
  cmd->add_option("--num-blocks", f->num_blocks, "KV blocks (one page per layer); default: from available memory");
  cmd->add_option("--max-batch-tokens", f->max_batch_tokens,
                  "Token budget of one step (default: from memory, at most 256)");
  cmd->add_option("--max-memory-percent", f->max_memory_percent, "Share of available memory for KV when --num-blocks is unset");
  cmd->add_option("--max-requests-per-batch", f->max_requests_per_batch, "Sequences per step");
  cmd->add_option("--max-blocks-per-request", f->max_blocks_per_request, "Blocks one request may hold (0: no limit)");
  cmd->add_option("--allow-block-sharing", f->allow_block_sharing, "Prefix caching (true/false, default true)");
  cmd->add_flag("--no-block-sharing", f->no_block_sharing, "Turn prefix caching off");
  cmd->add_option("--use-async-batching", f->use_async_batching, "Plan step N+1 while step N runs (true/false)");
  cmd->add_option("--adaptive-speculation", f->adaptive_speculation,
                  "With --prompt-lookup-num-tokens: draft only in steps where the measured step cost says drafted rows "
                  "pay (true/false, default true; off once a large batch makes the step compute-bound)");
  cmd->add_option("--use-cuda-graph", f->use_cuda_graph, "GPU only: true, false or [varlen,decode]; no effect on CPU");
  cmd->add_option("--q-padding-interval-size", f->q_padding_interval_size, "GPU only; no effect on CPU");
  cmd->add_option("--kv-padding-interval-size", f->kv_padding_interval_size, "GPU only; no effect on CPU");
  cmd->add_option("--varlen-compile-config", f->varlen_compile_config, "GPU only (JSON object); no effect on CPU");
  cmd->add_option("--decode-compile-config", f->decode_compile_config, "GPU only (JSON object); no effect on CPU");
  cmd->add_option("--default-compile-level", f->default_compile_level, "GPU only (0-3); no effect on CPU");
  cmd->add_option("--scheduler-type", f->scheduler_type, "fifo (decodes first) or prefill_first");
  cmd->add_option("--safety-margin", f->safety_margin, "Admit new requests only while more of the KV pool is free");
  cmd->add_option("--return-logprobs", f->return_logprobs, "Log-probabilities of the generated tokens (true/false)");
  cmd->add_option("--auto-switch-to-flash", f->auto_switch_to_flash, "GPU only; no effect on CPU");
  cmd->add_option("--cpu-offload-space", f->cpu_offload_space, "GiB of host swap for preempted requests (0: recompute)");
  cmd->add_option("--cpu-offload-space-safety-threshold", f->cpu_offload_space_safety_threshold,
                  "Clamp --cpu-offload-space to this share of RAM (of free disk with --cpu-offload-path)");
  cmd->add_option("--cpu-offload-path", f->cpu_offload_path,
                  "Keep the swap pool in a file (a new file name, or a directory) instead of RAM");
  cmd->add_option("--kv-cache-dtype", f->kv_cache_dtype, kKvCacheDtypeHelp);
  cmd->add_option("--cache-type-k", f->cache_type_k, kCacheTypeKHelp);
  cmd->add_option("--cache-type-v", f->cache_type_v, kCacheTypeVHelp);
  cmd->add_option("--kv-cache-rotation", f->kv_cache_rotation, kKvRotationHelp);
  cmd->add_option("--max-queue-size", f->max_queue_size, "Most requests waiting for admission (0: no limit)");
  cmd->add_option("--per-request-processors", f->per_request_processors,
                  "Honour per-line sampling settings (true/false; default true for this command)");
  cmd->add_option("--drop-unsupported-processors", f->drop_unsupported_processors,
                  "Ignore per-line sampling settings when they are off, instead of failing");
  cmd->add_option("--disable-nccl-graph-mixing", f->disable_nccl_graph_mixing, "GPU/TP only; no effect on CPU");
  cmd->add_option("--cpu-group-timeout", f->cpu_group_timeout, "With --tensor-parallel: seconds a rank waits for the others inside a step before ending the job");
}

namespace {
json parse_json_flag(const std::string& flag, const std::string& text) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) throw Error(invalid_argument(flag + ": not valid JSON: " + text));
  return j;
}
}  // namespace

batching::ContinuousBatchingConfig make_cb_config(const CbFlags& f, std::optional<uint64_t> seed) {
  json j = json::object();
  if (!f.cb_config.empty()) {
    std::ifstream in(f.cb_config);
    if (!in) throw Error(not_found("--cb-config: cannot open '" + f.cb_config + "'"));
    j = json::parse(in, nullptr, false);
    if (j.is_discarded() || !j.is_object()) throw Error(parse_error(f.cb_config + ": not a JSON object"));
  }
  if (!j.contains("per_request_processors")) j["per_request_processors"] = true;
  auto set = [&](const char* key, const auto& v) {
    if (v) j[key] = *v;
  };
  set("page_size", f.page_size);
  set("num_blocks", f.num_blocks);
  set("max_batch_tokens", f.max_batch_tokens);
  set("max_memory_percent", f.max_memory_percent);
  set("max_requests_per_batch", f.max_requests_per_batch);
  set("max_blocks_per_request", f.max_blocks_per_request);
  set("allow_block_sharing", f.allow_block_sharing);
  if (f.no_block_sharing) j["allow_block_sharing"] = false;
  set("use_async_batching", f.use_async_batching);
  set("adaptive_speculation", f.adaptive_speculation);
  if (f.use_cuda_graph) j["use_cuda_graph"] = parse_json_flag("--use-cuda-graph", *f.use_cuda_graph);
  set("q_padding_interval_size", f.q_padding_interval_size);
  set("kv_padding_interval_size", f.kv_padding_interval_size);
  if (f.varlen_compile_config)
    j["varlen_compile_config"] = parse_json_flag("--varlen-compile-config", *f.varlen_compile_config);
  if (f.decode_compile_config)
    j["decode_compile_config"] = parse_json_flag("--decode-compile-config", *f.decode_compile_config);
  set("default_compile_level", f.default_compile_level);
  set("scheduler_type", f.scheduler_type);
  set("kv_cache_dtype", f.kv_cache_dtype);
  set("cache_type_k", f.cache_type_k);
  set("cache_type_v", f.cache_type_v);
  set("kv_cache_rotation", f.kv_cache_rotation);
  set("safety_margin", f.safety_margin);
  set("return_logprobs", f.return_logprobs);
  if ((!j.contains("seed") || j["seed"].is_null()) && seed) j["seed"] = *seed;
  set("auto_switch_to_flash", f.auto_switch_to_flash);
  set("cpu_offload_space", f.cpu_offload_space);
  set("cpu_offload_space_safety_threshold", f.cpu_offload_space_safety_threshold);
  set("cpu_offload_path", f.cpu_offload_path);
  set("max_queue_size", f.max_queue_size);
  set("per_request_processors", f.per_request_processors);
  set("drop_unsupported_processors", f.drop_unsupported_processors);
  set("disable_nccl_graph_mixing", f.disable_nccl_graph_mixing);
  set("cpu_group_timeout", f.cpu_group_timeout);
  return batching::ContinuousBatchingConfig::from_json(j, f.cb_config.empty() ? "flags" : f.cb_config).value();
}

}  // namespace loom::cli
