#include "loom/batching/continuous_batching_config.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <type_traits>

#include "loom/core/logging.h"
#include "loom/io/json_fields.h"

namespace loom::batching {

namespace {

using json = nlohmann::json;

Status field_error(const std::string& field, const std::string& what) {
  return invalid_argument("ContinuousBatchingConfig: field '" + field + "' " + what);
}

// Reads the fields through io's one typed reader; null means unset.
class Reader {
 public:
  Reader(const json& j, const std::string& source) : f_(j, source) {}

  template <class T>
  Status get(const char* key, T* out) const {
    using V = typename unwrap<T>::type;
    std::optional<V> v;
    if constexpr (std::is_same_v<V, int64_t>) {
      LOOM_ASSIGN_OR_RETURN(v, f_.int_field(key));
    } else if constexpr (std::is_same_v<V, uint64_t>) {
      LOOM_ASSIGN_OR_RETURN(v, f_.uint64_field(key));
    } else if constexpr (std::is_same_v<V, double>) {
      LOOM_ASSIGN_OR_RETURN(v, f_.number_field(key));
    } else if constexpr (std::is_same_v<V, bool>) {
      LOOM_ASSIGN_OR_RETURN(v, f_.bool_field(key));
    } else {
      static_assert(std::is_same_v<V, std::string>);
      LOOM_ASSIGN_OR_RETURN(v, f_.string_field(key));
    }
    if (v) *out = std::move(*v);
    return Status::Ok();
  }
  Status get_object(const char* key, std::optional<json>* out) const {
    if (!f_.given(key)) return Status::Ok();
    const json& v = f_.object().at(key);
    if (!v.is_object()) return f_.wrong_type(key, "an object (a CompileConfig)");
    *out = v;
    return Status::Ok();
  }
  Status get_cuda_graph(const char* key, std::optional<std::pair<bool, bool>>* out) const {
    if (!f_.given(key)) return Status::Ok();
    const json& v = f_.object().at(key);
    if (v.is_boolean()) {
      *out = std::make_pair(v.get<bool>(), v.get<bool>());
      return Status::Ok();
    }
    if (v.is_array() && v.size() == 2 && v[0].is_boolean() && v[1].is_boolean()) {
      *out = std::make_pair(v[0].get<bool>(), v[1].get<bool>());
      return Status::Ok();
    }
    return f_.wrong_type(key, "true/false or a pair [varlen, decode] of them");
  }

 private:
  template <class T>
  struct unwrap {
    using type = T;
  };
  template <class T>
  struct unwrap<std::optional<T>> {
    using type = T;
  };
  io::JsonFields f_;
};

const std::set<std::string>& known_keys() {
  static const std::set<std::string> keys = {
      "page_size", "num_blocks", "max_batch_tokens", "max_memory_percent", "max_requests_per_batch",
      "max_blocks_per_request", "allow_block_sharing", "use_async_batching", "adaptive_speculation", "use_cuda_graph",
      "q_padding_interval_size", "kv_padding_interval_size", "varlen_compile_config", "decode_compile_config",
      "default_compile_level", "scheduler_type", "safety_margin", "return_logprobs", "seed", "auto_switch_to_flash",
      "cpu_offload_space", "cpu_offload_space_safety_threshold", "cpu_offload_path", "kv_cache_dtype", "cache_type_k", "cache_type_v",
      "kv_cache_rotation", "max_queue_size",
      "per_request_processors",
      "drop_unsupported_processors", "disable_nccl_graph_mixing", "cpu_group_timeout",
      "use_default_compile_configs", "max_cached_graphs", "block_size"};
  return keys;
}

}  // namespace

Result<DType> kv_cache_dtype_from_name(std::string_view name) { return graph::kv_dtype_from_name(name); }

DType ContinuousBatchingConfig::kv_dtype() const {
  const Result<DType> r = kv_cache_dtype_from_name(kv_cache_dtype);
  return r.ok() ? r.value() : DType::kF32;
}

graph::KvFormat ContinuousBatchingConfig::kv_format() const {
  const Result<graph::KvFormat> r = graph::kv_format_from_names(
      cache_type_k.value_or(kv_cache_dtype), cache_type_v.value_or(kv_cache_dtype), kv_cache_rotation);
  return r.ok() ? r.value() : graph::KvFormat{};
}

int64_t ContinuousBatchingConfig::effective_page_size() const {
  if (block_size && page_size == 256) return *block_size;
  return page_size;
}

Status ContinuousBatchingConfig::validate() const {
  if (page_size < 1 || page_size > (1 << 20)) return field_error("page_size", "must be in [1, 1048576], got " + std::to_string(page_size));
  if (block_size) {
    if (*block_size < 1 || *block_size > (1 << 20)) return field_error("block_size", "must be in [1, 1048576]");
    if (page_size != 256 && page_size != *block_size)
      return field_error("block_size", "(deprecated alias of page_size) is " + std::to_string(*block_size) +
                                           " but page_size is " + std::to_string(page_size) + ": set only page_size");
  }
  if (num_blocks && *num_blocks < 1) return field_error("num_blocks", "must be ≥ 1, got " + std::to_string(*num_blocks));
  if (max_batch_tokens && *max_batch_tokens < 1)
    return field_error("max_batch_tokens", "must be ≥ 1, got " + std::to_string(*max_batch_tokens));
  if (max_memory_percent && !(*max_memory_percent > 0.0 && *max_memory_percent <= 1.0))
    return field_error("max_memory_percent", "must be in (0, 1], got " + std::to_string(*max_memory_percent));
  if (max_requests_per_batch && *max_requests_per_batch < 1)
    return field_error("max_requests_per_batch", "must be ≥ 1, got " + std::to_string(*max_requests_per_batch));
  if (max_blocks_per_request && *max_blocks_per_request < 0)
    return field_error("max_blocks_per_request", "must be ≥ 0, got " + std::to_string(*max_blocks_per_request));
  if (q_padding_interval_size < 0) return field_error("q_padding_interval_size", "must be ≥ 0");
  if (kv_padding_interval_size < 0) return field_error("kv_padding_interval_size", "must be ≥ 0");
  if (default_compile_level < 0 || default_compile_level > 3)
    return field_error("default_compile_level", "must be in [0, 3], got " + std::to_string(default_compile_level));
  if (scheduler_type != "fifo" && scheduler_type != "prefill_first")
    return field_error("scheduler_type", "must be 'fifo' or 'prefill_first', got '" + scheduler_type + "'");
  if (Result<DType> kv = kv_cache_dtype_from_name(kv_cache_dtype); !kv.ok())
    return field_error("kv_cache_dtype", kv.status().message());
  if (cache_type_k)
    if (Result<DType> kv = kv_cache_dtype_from_name(*cache_type_k); !kv.ok())
      return field_error("cache_type_k", kv.status().message());
  if (cache_type_v)
    if (Result<DType> kv = kv_cache_dtype_from_name(*cache_type_v); !kv.ok())
      return field_error("cache_type_v", kv.status().message());
  if (kv_cache_rotation != "auto" && kv_cache_rotation != "on" && kv_cache_rotation != "off")
    return field_error("kv_cache_rotation", "must be 'auto', 'on' or 'off', got '" + kv_cache_rotation + "'");
  if (safety_margin && !(*safety_margin >= 0.0 && *safety_margin < 1.0))
    return field_error("safety_margin", "must be in [0, 1), got " + std::to_string(*safety_margin));
  if (cpu_offload_space && !(*cpu_offload_space >= 0.0 && std::isfinite(*cpu_offload_space)))
    return field_error("cpu_offload_space", "must be a finite number of GiB ≥ 0");
  if (cpu_offload_path && cpu_offload_path->empty())
    return field_error("cpu_offload_path", "is empty (unset it to keep the swap pool in RAM)");
  if (!(cpu_offload_space_safety_threshold > 0.0 && cpu_offload_space_safety_threshold <= 1.0))
    return field_error("cpu_offload_space_safety_threshold", "must be in (0, 1], got " +
                                                                 std::to_string(cpu_offload_space_safety_threshold));
  if (max_queue_size < 0) return field_error("max_queue_size", "must be ≥ 0 (0: no limit)");
  if (cpu_group_timeout && !(*cpu_group_timeout > 0.0)) return field_error("cpu_group_timeout", "must be > 0 seconds");
  if (max_cached_graphs && *max_cached_graphs < 0) return field_error("max_cached_graphs", "must be ≥ 0");
  return Status::Ok();
}

Result<ContinuousBatchingConfig> ContinuousBatchingConfig::from_json(const nlohmann::json& j, const std::string& source) {
  if (!j.is_object()) return parse_error(source + ": a continuous batching config must be a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!known_keys().count(it.key()))
      return parse_error(source + ": unknown field '" + it.key() + "' (not a ContinuousBatchingConfig field)");
  ContinuousBatchingConfig c;
  const Reader r(j, source);
  LOOM_RETURN_IF_ERROR(r.get("page_size", &c.page_size));
  LOOM_RETURN_IF_ERROR(r.get("num_blocks", &c.num_blocks));
  LOOM_RETURN_IF_ERROR(r.get("max_batch_tokens", &c.max_batch_tokens));
  LOOM_RETURN_IF_ERROR(r.get("max_memory_percent", &c.max_memory_percent));
  LOOM_RETURN_IF_ERROR(r.get("max_requests_per_batch", &c.max_requests_per_batch));
  LOOM_RETURN_IF_ERROR(r.get("max_blocks_per_request", &c.max_blocks_per_request));
  LOOM_RETURN_IF_ERROR(r.get("allow_block_sharing", &c.allow_block_sharing));
  LOOM_RETURN_IF_ERROR(r.get("use_async_batching", &c.use_async_batching));
  LOOM_RETURN_IF_ERROR(r.get("adaptive_speculation", &c.adaptive_speculation));
  LOOM_RETURN_IF_ERROR(r.get_cuda_graph("use_cuda_graph", &c.use_cuda_graph));
  LOOM_RETURN_IF_ERROR(r.get("q_padding_interval_size", &c.q_padding_interval_size));
  LOOM_RETURN_IF_ERROR(r.get("kv_padding_interval_size", &c.kv_padding_interval_size));
  LOOM_RETURN_IF_ERROR(r.get_object("varlen_compile_config", &c.varlen_compile_config));
  LOOM_RETURN_IF_ERROR(r.get_object("decode_compile_config", &c.decode_compile_config));
  LOOM_RETURN_IF_ERROR(r.get("default_compile_level", &c.default_compile_level));
  LOOM_RETURN_IF_ERROR(r.get("scheduler_type", &c.scheduler_type));
  LOOM_RETURN_IF_ERROR(r.get("kv_cache_dtype", &c.kv_cache_dtype));
  if (j.contains("cache_type_k") && j.at("cache_type_k").is_null()) c.cache_type_k.reset();
  else LOOM_RETURN_IF_ERROR(r.get("cache_type_k", &c.cache_type_k));
  if (j.contains("cache_type_v") && j.at("cache_type_v").is_null()) c.cache_type_v.reset();
  else LOOM_RETURN_IF_ERROR(r.get("cache_type_v", &c.cache_type_v));
  LOOM_RETURN_IF_ERROR(r.get("kv_cache_rotation", &c.kv_cache_rotation));
  LOOM_RETURN_IF_ERROR(r.get("safety_margin", &c.safety_margin));
  LOOM_RETURN_IF_ERROR(r.get("return_logprobs", &c.return_logprobs));
  LOOM_RETURN_IF_ERROR(r.get("seed", &c.seed));
  LOOM_RETURN_IF_ERROR(r.get("auto_switch_to_flash", &c.auto_switch_to_flash));
  if (j.contains("cpu_offload_space") && j.at("cpu_offload_space").is_null()) c.cpu_offload_space.reset();
  LOOM_RETURN_IF_ERROR(r.get("cpu_offload_space", &c.cpu_offload_space));
  LOOM_RETURN_IF_ERROR(r.get("cpu_offload_space_safety_threshold", &c.cpu_offload_space_safety_threshold));
  if (j.contains("cpu_offload_path") && j.at("cpu_offload_path").is_null()) c.cpu_offload_path.reset();
  else LOOM_RETURN_IF_ERROR(r.get("cpu_offload_path", &c.cpu_offload_path));
  LOOM_RETURN_IF_ERROR(r.get("max_queue_size", &c.max_queue_size));
  LOOM_RETURN_IF_ERROR(r.get("per_request_processors", &c.per_request_processors));
  LOOM_RETURN_IF_ERROR(r.get("drop_unsupported_processors", &c.drop_unsupported_processors));
  LOOM_RETURN_IF_ERROR(r.get("disable_nccl_graph_mixing", &c.disable_nccl_graph_mixing));
  if (j.contains("cpu_group_timeout") && j.at("cpu_group_timeout").is_null()) c.cpu_group_timeout.reset();
  LOOM_RETURN_IF_ERROR(r.get("cpu_group_timeout", &c.cpu_group_timeout));
  LOOM_RETURN_IF_ERROR(r.get("use_default_compile_configs", &c.use_default_compile_configs));
  LOOM_RETURN_IF_ERROR(r.get("max_cached_graphs", &c.max_cached_graphs));
  LOOM_RETURN_IF_ERROR(r.get("block_size", &c.block_size));
  Status s = c.validate();
  if (!s.ok()) return Status(s.code(), source + ": " + s.message());
  return c;
}

Result<ContinuousBatchingConfig> ContinuousBatchingConfig::from_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return not_found("cannot open continuous batching config '" + path + "'");
  json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return parse_error(path + ": not valid JSON");
  return from_json(j, path);
}

nlohmann::json ContinuousBatchingConfig::to_json() const {
  auto opt = [](const auto& o) -> json { return o ? json(*o) : json(nullptr); };
  json j;
  j["page_size"] = page_size;
  j["num_blocks"] = opt(num_blocks);
  j["max_batch_tokens"] = opt(max_batch_tokens);
  j["max_memory_percent"] = opt(max_memory_percent);
  j["max_requests_per_batch"] = opt(max_requests_per_batch);
  j["max_blocks_per_request"] = opt(max_blocks_per_request);
  j["allow_block_sharing"] = allow_block_sharing;
  j["use_async_batching"] = opt(use_async_batching);
  j["adaptive_speculation"] = opt(adaptive_speculation);
  j["use_cuda_graph"] = use_cuda_graph ? json::array({use_cuda_graph->first, use_cuda_graph->second}) : json(nullptr);
  j["q_padding_interval_size"] = q_padding_interval_size;
  j["kv_padding_interval_size"] = kv_padding_interval_size;
  j["varlen_compile_config"] = varlen_compile_config ? *varlen_compile_config : json(nullptr);
  j["decode_compile_config"] = decode_compile_config ? *decode_compile_config : json(nullptr);
  j["default_compile_level"] = default_compile_level;
  j["scheduler_type"] = scheduler_type;
  j["safety_margin"] = opt(safety_margin);
  j["return_logprobs"] = return_logprobs;
  j["seed"] = opt(seed);
  j["auto_switch_to_flash"] = auto_switch_to_flash;
  j["cpu_offload_space"] = opt(cpu_offload_space);
  j["cpu_offload_space_safety_threshold"] = cpu_offload_space_safety_threshold;
  j["cpu_offload_path"] = opt(cpu_offload_path);
  j["kv_cache_dtype"] = kv_cache_dtype;
  j["cache_type_k"] = opt(cache_type_k);
  j["cache_type_v"] = opt(cache_type_v);
  j["kv_cache_rotation"] = kv_cache_rotation;
  j["max_queue_size"] = max_queue_size;
  j["per_request_processors"] = per_request_processors;
  j["drop_unsupported_processors"] = drop_unsupported_processors;
  j["disable_nccl_graph_mixing"] = disable_nccl_graph_mixing;
  j["cpu_group_timeout"] = opt(cpu_group_timeout);
  j["use_default_compile_configs"] = opt(use_default_compile_configs);
  j["max_cached_graphs"] = opt(max_cached_graphs);
  j["block_size"] = opt(block_size);
  return j;
}

namespace {

// The one list of Transformers' fields that only mean something on a GPU (or with
// torch.compile / NCCL): accepted so an upstream config loads unchanged, and reported
// once, when a manager is created, if set to anything but their default.
struct CpuNoOpField {
  const char* name;
  const char* why;
  bool (*is_set)(const ContinuousBatchingConfig&);
};

constexpr CpuNoOpField kCpuNoOpFields[] = {
    {"use_cuda_graph", "no CUDA graphs",
     [](const ContinuousBatchingConfig& c) { return c.use_cuda_graph && (c.use_cuda_graph->first || c.use_cuda_graph->second); }},
    {"q_padding_interval_size", "pads only for CUDA graphs",
     [](const ContinuousBatchingConfig& c) { return c.q_padding_interval_size != 0; }},
    {"kv_padding_interval_size", "pads only for CUDA graphs",
     [](const ContinuousBatchingConfig& c) { return c.kv_padding_interval_size != 0; }},
    {"varlen_compile_config", "no torch.compile",
     [](const ContinuousBatchingConfig& c) { return c.varlen_compile_config.has_value(); }},
    {"decode_compile_config", "no torch.compile",
     [](const ContinuousBatchingConfig& c) { return c.decode_compile_config.has_value(); }},
    {"default_compile_level", "no torch.compile",
     [](const ContinuousBatchingConfig& c) { return c.default_compile_level != 0; }},
    {"auto_switch_to_flash", "paged attention is always used",
     [](const ContinuousBatchingConfig& c) { return !c.auto_switch_to_flash; }},
    {"disable_nccl_graph_mixing", "no NCCL",
     [](const ContinuousBatchingConfig& c) { return !c.disable_nccl_graph_mixing; }},
    {"use_default_compile_configs", "deprecated (default_compile_level), no torch.compile",
     [](const ContinuousBatchingConfig& c) { return c.use_default_compile_configs.has_value(); }},
    {"max_cached_graphs", "deprecated, no CUDA graphs",
     [](const ContinuousBatchingConfig& c) { return c.max_cached_graphs.has_value(); }},
    // 0 disables upstream's GPU fast decode path; on CPU it means no per-request limit.
    {"max_blocks_per_request", "0 disables the GPU fast decode path; on CPU it means no per-request limit",
     [](const ContinuousBatchingConfig& c) { return c.max_blocks_per_request && *c.max_blocks_per_request == 0; }},
    // cpu_group_timeout is not listed: it bounds tensor parallelism's in-step waits.
};

}  // namespace

std::vector<std::string> ContinuousBatchingConfig::cpu_no_op_fields() const {
  std::vector<std::string> out;
  for (const CpuNoOpField& f : kCpuNoOpFields)
    if (f.is_set(*this)) out.push_back(std::string(f.name) + ": no effect on CPU (" + f.why + ")");
  return out;
}

std::string ContinuousBatchingConfig::cpu_no_op_warning() const {
  std::string fields;
  for (const CpuNoOpField& f : kCpuNoOpFields) {
    if (!f.is_set(*this)) continue;
    fields += fields.empty() ? "" : "; ";
    fields += std::string(f.name) + " (" + f.why + ")";
  }
  return fields.empty() ? "" : "continuous batching: GPU-only settings have no effect on CPU: " + fields;
}

std::pair<size_t, size_t> host_memory() {
  std::ifstream in("/proc/meminfo");
  size_t avail = 0, total = 0;
  std::string key;
  size_t kb = 0;
  std::string unit;
  while (in >> key >> kb) {
    std::getline(in, unit);
    if (key == "MemAvailable:") avail = kb * 1024;
    if (key == "MemTotal:") total = kb * 1024;
  }
  return {avail, total};
}

size_t free_disk_bytes(const std::string& path) {
  struct statvfs st {};
  std::filesystem::path p(path);
  if (!std::filesystem::is_directory(p)) p = p.has_parent_path() ? p.parent_path() : std::filesystem::path(".");
  if (statvfs(p.c_str(), &st) != 0) return 0;
  return static_cast<size_t>(st.f_bavail) * static_cast<size_t>(st.f_frsize);
}

Result<CbResources> resolve(const ContinuousBatchingConfig& c, size_t position_bytes, int num_layers,
                            size_t available_memory, size_t total_memory, size_t activation_bytes_per_token) {
  LOOM_RETURN_IF_ERROR(c.validate());
  if (position_bytes == 0 || num_layers <= 0) return invalid_argument("resolve: the model has no KV cache");
  if (available_memory == 0 || total_memory == 0) {
    const auto [avail, total] = host_memory();
    if (available_memory == 0) available_memory = avail;
    if (total_memory == 0) total_memory = total;
  }
  CbResources r;
  r.page_size = c.effective_page_size();
  const size_t page_bytes = position_bytes * static_cast<size_t>(r.page_size);
  r.block_bytes = page_bytes * static_cast<size_t>(num_layers);
  constexpr int64_t kMaxInferredBatchTokens = 256;  // upstream's bound; CPU steps are compute-bound well before it
  constexpr double kStepShareOfPool = 0.01;          // upstream's m: one step fills at most 1% of the pool
  const double act = static_cast<double>(activation_bytes_per_token);
  const double block = static_cast<double>(r.block_bytes);
  if (c.num_blocks && c.max_batch_tokens) {
    r.num_blocks = *c.num_blocks;
    r.max_batch_tokens = *c.max_batch_tokens;
  } else {
    const double share = c.max_memory_percent.value_or(0.9);
    if (available_memory == 0)
      return failed_precondition("num_blocks or max_batch_tokens is unset and the available memory cannot be read "
                                 "from /proc/meminfo: set both");
    const double budget = share * static_cast<double>(available_memory);
    const std::string memory = " (max_memory_percent " + std::to_string(share) + " of " +
                               std::to_string(available_memory) + " available bytes)";
    r.max_batch_tokens_inferred = !c.max_batch_tokens;
    if (c.max_batch_tokens) {
      r.max_batch_tokens = *c.max_batch_tokens;
    } else if (act <= 0) {
      r.max_batch_tokens = kMaxInferredBatchTokens;
    } else if (c.num_blocks) {
      const double left = budget - static_cast<double>(*c.num_blocks) * block;
      r.max_batch_tokens = std::min<int64_t>(kMaxInferredBatchTokens, static_cast<int64_t>(left / act));
      if (r.max_batch_tokens < 1)
        return resource_exhausted("num_blocks = " + std::to_string(*c.num_blocks) +
                                  " leaves no memory for a step's activations" + memory +
                                  ": lower num_blocks or set max_batch_tokens");
    } else {
      const double positions = budget / (block / static_cast<double>(r.page_size) + kStepShareOfPool * act);
      r.max_batch_tokens = std::clamp<int64_t>(static_cast<int64_t>(kStepShareOfPool * positions), 1,
                                               kMaxInferredBatchTokens);
    }
    if (c.num_blocks) {
      r.num_blocks = *c.num_blocks;
    } else {
      r.num_blocks = static_cast<int64_t>((budget - static_cast<double>(r.max_batch_tokens) * act) / block);
      if (r.num_blocks < 1)
        return resource_exhausted("not enough memory for one KV block of " + std::to_string(r.block_bytes) +
                                  " bytes beside a step of " + std::to_string(r.max_batch_tokens) + " tokens" + memory);
    }
  }
  r.max_requests_per_batch = std::min(c.max_requests_per_batch.value_or(1024), r.max_batch_tokens);
  r.max_blocks_per_request = c.max_blocks_per_request.value_or(0);
  r.safety_margin = c.safety_margin.value_or(c.scheduler_type == "fifo" ? 0.2 : 0.0);
  double swap_bytes = c.cpu_offload_space.value_or(0.0) * 1024.0 * 1024.0 * 1024.0;
  // The swap pool lives in RAM, or in a file: then the free disk space bounds it.
  const size_t swap_room = c.cpu_offload_path ? free_disk_bytes(*c.cpu_offload_path) : total_memory;
  const char* room_name = c.cpu_offload_path ? "the free space of cpu_offload_path" : "RAM";
  if (swap_bytes > 0 && swap_room > 0) {
    const double cap = c.cpu_offload_space_safety_threshold * static_cast<double>(swap_room);
    if (swap_bytes > cap) {
      log_warn("cpu_offload_space " + std::to_string(*c.cpu_offload_space) + " GiB is more than " +
               std::to_string(c.cpu_offload_space_safety_threshold) + " of " + room_name + ": clamped to " +
               std::to_string(cap / (1024.0 * 1024.0 * 1024.0)) + " GiB");
      swap_bytes = cap;
    }
  }
  if (c.cpu_offload_path) r.swap_path = *c.cpu_offload_path;
  r.swap_pages = static_cast<int64_t>(swap_bytes / static_cast<double>(page_bytes));
  if (swap_bytes > 0 && r.swap_pages == 0)
    log_warn("cpu_offload_space is smaller than one KV page (" + std::to_string(page_bytes) + " bytes): no swapping");
  r.async_batching = c.use_async_batching.value_or(false);
  r.adaptive_speculation = c.adaptive_speculation.value_or(true);
  return r;
}

}  // namespace loom::batching
