#include "cli/kv_cache_flags.h"

#include "loom/core/status.h"

namespace loom::cli {

void add_kv_cache_options(CLI::App* cmd, KvCacheFlags* f) {
  cmd->add_option("--kv-cache-dtype", f->kv_cache_dtype, kKvCacheDtypeHelp);
  cmd->add_option("--cache-type-k", f->cache_type_k, kCacheTypeKHelp);
  cmd->add_option("--cache-type-v", f->cache_type_v, kCacheTypeVHelp);
  cmd->add_option("--kv-cache-rotation", f->rotation, kKvRotationHelp);
}

graph::KvFormat kv_format_from_flags(const KvCacheFlags& f) {
  auto check = [](const char* flag, const std::string& name) {
    if (Result<DType> t = graph::kv_dtype_from_name(name); !t.ok())
      throw Error(invalid_argument(std::string(flag) + " " + t.status().message()));
  };
  check("--kv-cache-dtype", f.kv_cache_dtype);
  if (f.cache_type_k) check("--cache-type-k", *f.cache_type_k);
  if (f.cache_type_v) check("--cache-type-v", *f.cache_type_v);
  Result<graph::KvFormat> r = graph::kv_format_from_names(f.cache_type_k.value_or(f.kv_cache_dtype),
                                                          f.cache_type_v.value_or(f.kv_cache_dtype), f.rotation);
  if (!r.ok()) throw Error(invalid_argument("--kv-cache-rotation: " + r.status().message()));
  return r.value();
}

}  // namespace loom::cli
