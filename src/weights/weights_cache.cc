#include "loom/weights/weights_cache.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "loom/core/cache_dir.h"
#include "loom/core/file_pages.h"
#include "loom/core/logging.h"
#include "loom/io/gguf.h"
#include "loom/io/gguf_writer.h"

namespace loom {
namespace fs = std::filesystem;
namespace {

// The entry the file was written as: a payload renamed or copied under another
// entry's name does not pass for it.
constexpr const char* kEntryField = "loom.cache.entry";
constexpr size_t kMinCachedBytes = size_t{64} << 10;  // above a large model's norm weights

std::string absolute_path(const std::string& path) {
  std::error_code ec;
  const fs::path absolute = fs::absolute(path, ec);
  return ec ? path : absolute.lexically_normal().string();
}

CacheEntryKey entry_key(const WeightsCacheKey& key) {
  CacheEntryKey e;
  e.kind = "weights";
  e.what = key.recipe.empty() ? "converted at load" : "quantized to " + key.recipe;
  e.source = absolute_path(key.checkpoint);
  e.stamp = source_stamp(key.checkpoint);
  e.key = key.recipe + "\n" + key.extra + "\n" + key.loaded;
  return e;
}

std::string entry_name(const std::string& payload) { return fs::path(payload).stem().string(); }

// The cached file's tensors if it is this entry's and holds every job as expected; else why not.
Result<std::shared_ptr<io::GgufFile>> open_cached(const std::string& path, const std::vector<CachedWeight>& jobs,
                                                  const std::map<std::string, Tensor>& params) {
  LOOM_ASSIGN_OR_RETURN(std::shared_ptr<io::GgufFile> file, io::GgufFile::open(path));
  const io::GgufValue* stored = file->find_value(kEntryField);
  auto stored_name = stored ? stored->as_string(kEntryField) : Result<std::string>(std::string());
  if (!stored_name.ok() || *stored_name != entry_name(path)) {
    return failed_precondition(path + ": written as another cache entry");
  }
  for (const CachedWeight& j : jobs) {
    const io::GgufTensorInfo* info = file->find(j.name);
    const Tensor& source = params.at(j.name);
    if (!info) return failed_precondition(path + ": no tensor '" + j.name + "'");
    LOOM_ASSIGN_OR_RETURN(Tensor t, file->get(j.name));
    if (t.dtype() != j.to || t.shape() != source.shape())
      return failed_precondition(path + ": '" + j.name + "' is " + t.describe() + ", expected " +
                                 std::string(dtype_name(j.to)) + shape_to_string(source.shape()));
  }
  return file;
}

}  // namespace

bool made_in_memory(const Tensor& t) { return t.nbytes() >= kMinCachedBytes && !in_file_mapping(t.data(), t.nbytes()); }

std::map<std::string, Tensor> find_cached_weights(const WeightsCacheKey& key) {
  std::map<std::string, Tensor> out;
  const std::string dir = key.cacheable ? cache_dir() : std::string();
  if (dir.empty()) return out;
  const CacheEntryKey entry = entry_key(key);
  if (!find_cache_entry(dir, entry).ok()) return out;
  const std::string path = cache_entry_base(dir, entry) + ".gguf";
  auto file = io::GgufFile::open(path);
  if (!file.ok()) return out;
  const io::GgufValue* stored = (*file)->find_value(kEntryField);
  auto stored_name = stored ? stored->as_string(kEntryField) : Result<std::string>(std::string());
  if (!stored_name.ok() || *stored_name != entry_name(path)) return out;
  for (const io::GgufTensorInfo& info : (*file)->tensors()) {
    auto t = (*file)->get(info.name);
    if (!t.ok()) return {};
    out.emplace(info.name, std::move(t).value());
  }
  return out;
}

Status map_weights_through_cache(const WeightsCacheKey& key, const std::vector<CachedWeight>& jobs,
                                 std::map<std::string, Tensor>* params) {
  const std::string dir = key.cacheable ? cache_dir() : std::string();
  size_t to_quantize = 0;
  for (const CachedWeight& j : jobs) to_quantize += params->at(j.name).dtype() != j.to ? 1 : 0;
  if (jobs.empty() || (dir.empty() && to_quantize == 0)) return Status::Ok();
  const CacheEntryKey entry = entry_key(key);
  const std::string path = dir.empty() ? std::string() : cache_entry_base(dir, entry) + ".gguf";
  auto use = [&](const io::GgufFile& file) {
    for (const CachedWeight& j : jobs) (*params)[j.name] = file.get(j.name).value();
  };
  std::error_code ec;
  if (!path.empty()) {
    const Status found = find_cache_entry(dir, entry);
    if (found.ok() || fs::exists(path, ec)) {
      auto cached = found.ok() ? open_cached(path, jobs, *params) : Result<std::shared_ptr<io::GgufFile>>(found);
      if (cached.ok()) {
        use(**cached);
        log_info(key.checkpoint + ": " + std::to_string(jobs.size()) + " weights mapped from " + path);
        return Status::Ok();
      }
      log_warn("ignoring the weights cache entry " + path + ": " + cached.status().message() + "; writing it again");
    }
  }

  // Quantizes (or copies) job j's weight into out, a tensor of j.to; its source is read
  // once, so its file pages need not stay beside the quantized copy.
  auto make = [&](const CachedWeight& j, const Tensor& out) -> Status {
    const Tensor& t = params->at(j.name);
    try {
      t.convert_into(out);
    } catch (const Error& e) {
      return e.status().with_context("quantizing '" + j.name + "' to " + std::string(dtype_name(j.to)));
    }
    if (t.dtype() != j.to) release_file_pages(t.data(), t.nbytes());
    return Status::Ok();
  };
  const auto start = std::chrono::steady_clock::now();
  auto log_quantized = [&] {
    if (to_quantize == 0) return;
    log_info(key.checkpoint + ": quantized in " +
             std::to_string(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()) + " s");
  };
  if (to_quantize > 0)
    log_info(key.checkpoint + ": quantizing " + std::to_string(to_quantize) + " weights to " + key.recipe);

  // Each weight made straight into the cache file's mapping (io::GgufInPlaceWriter says
  // why), else, without a usable cache, in memory.
  Status written = path.empty() ? failed_precondition("no cache directory") : Status::Ok();
  std::vector<io::GgufTensorSpec> specs;
  uint64_t bytes = 0;
  for (const CachedWeight& j : jobs) {
    specs.push_back({j.name, j.to, params->at(j.name).shape()});
    bytes += dtype_bytes(j.to, params->at(j.name).numel());
  }
  if (written.ok()) {
    log_info(key.checkpoint + ": writing " + std::to_string(jobs.size()) + " weights made at load to " + path);
    fs::create_directories(dir, ec);
    if (ec) written = io_error("cannot create the cache directory " + dir + ": " + ec.message());
  }
  if (written.ok()) written = make_room_in_cache(dir, bytes, true);
  if (written.ok()) {
    auto writer =
        io::GgufInPlaceWriter::create(path, {{kEntryField, io::GgufValue::string(entry_name(path))}}, specs);
    written = writer.status();
    for (size_t i = 0; written.ok() && i < jobs.size(); ++i) {
      const Tensor out = Tensor::wrap(writer->data(i), jobs[i].to, specs[i].shape);
      LOOM_RETURN_IF_ERROR(make(jobs[i], out));
    }
    if (written.ok()) written = writer->commit();
    if (written.ok()) written = commit_cache_entry(dir, entry);
    if (written.ok()) {
      log_quantized();
      auto cached = open_cached(path, jobs, *params);
      written = cached.ok() ? Status::Ok() : cached.status();
      if (cached.ok()) use(**cached);  // the sources go with their last reference
    }
  }
  if (!written.ok()) {
    // No cache file: the weights are made in memory.
    for (const CachedWeight& j : jobs) {
      Tensor& t = params->at(j.name);
      if (t.dtype() == j.to) continue;
      Tensor q = Tensor::empty(j.to, t.shape());
      LOOM_RETURN_IF_ERROR(make(j, q));
      t = q;
    }
    log_quantized();
    if (path.empty()) return Status::Ok();
    log_warn("weights made at load (" + entry.what + ") stay in memory, beside the runtime's copies, and are made " +
             "again on the next load: " + written.message() + " (LOOM_CACHE_DIR chooses the cache directory)");
  }
  return Status::Ok();
}

}  // namespace loom
