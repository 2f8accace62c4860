#include "loom/weights/weights_cache.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#define XXH_INLINE_ALL  // header-only: no link dependency on libxxhash
#include <xxhash.h>

#include "loom/core/cache_dir.h"
#include "loom/core/file_pages.h"
#include "loom/core/logging.h"
#include "loom/io/gguf.h"
#include "loom/io/gguf_writer.h"

namespace loom {
namespace fs = std::filesystem;
namespace {

constexpr const char* kKeyField = "loom.weights_cache.key";
constexpr const char* kFormat = "loom weights cache 2";
constexpr size_t kMinCachedBytes = size_t{64} << 10;  // above a large model's norm weights

// Size and modification time (ns) of the checkpoint file or of every file in its folder.
void stamp_files(const std::string& path, std::string* out) {
  std::error_code ec;
  std::vector<std::string> files;
  if (fs::is_directory(path, ec)) {
    for (const auto& e : fs::directory_iterator(path, ec))
      if (e.is_regular_file(ec)) files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(path);
  }
  for (const std::string& f : files) {
    struct stat st {};
    if (::stat(f.c_str(), &st) != 0) continue;
    *out += fs::path(f).filename().string() + " " + std::to_string(st.st_size) + " " +
            std::to_string(static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec) + "\n";
  }
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string absolute_path(const std::string& path) {
  std::error_code ec;
  const fs::path absolute = fs::absolute(path, ec);
  return ec ? path : absolute.lexically_normal().string();
}

std::string cache_key(const WeightsCacheKey& key) {
  std::string text = std::string(kFormat) + " loom " + LOOM_VERSION + "\n" + absolute_path(key.checkpoint) + "\n";
  stamp_files(key.checkpoint, &text);
  text += key.recipe + "\n" + key.extra + "\n" + key.loaded;
  return hex64(XXH64(text.data(), text.size(), 0));
}

std::string cache_path(const std::string& dir, const WeightsCacheKey& key, const std::string& hash) {
  const std::string what = key.recipe.empty() ? "converted" : "quantized-" + key.recipe;
  return (fs::path(dir) / (what + "-" + hash + ".gguf")).string();
}

// The cached file's tensors if it is this key's and holds every job as expected; else why not.
Result<std::shared_ptr<io::GgufFile>> open_cached(const std::string& path, const std::string& key,
                                                  const std::vector<CachedWeight>& jobs,
                                                  const std::map<std::string, Tensor>& params) {
  LOOM_ASSIGN_OR_RETURN(std::shared_ptr<io::GgufFile> file, io::GgufFile::open(path));
  const io::GgufValue* stored = file->find_value(kKeyField);
  auto stored_key = stored ? stored->as_string(kKeyField) : Result<std::string>(std::string());
  if (!stored_key.ok() || *stored_key != key) {
    return failed_precondition(path + ": written for another checkpoint or recipe");
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

std::vector<WeightsCacheFile> list_weights_cache(const std::string& dir) {
  std::vector<WeightsCacheFile> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!e.is_regular_file(ec) || (name.rfind("converted-", 0) != 0 && name.rfind("quantized-", 0) != 0)) continue;
    WeightsCacheFile f;
    f.path = e.path().string();
    f.bytes = e.file_size(ec);
    if (name.find(".gguf.tmp.") != std::string::npos) {
      f.problem = "an interrupted write";
    } else if (auto file = io::GgufFile::open(f.path); !file.ok()) {
      f.problem = file.status().message();
    } else {
      auto text = [&](const char* key) {
        const io::GgufValue* v = (*file)->find_value(key);
        auto s = v ? v->as_string(key) : Result<std::string>(std::string());
        return s.ok() ? *s : std::string();
      };
      f.checkpoint = text("loom.weights_cache.checkpoint");
      f.recipe = text("loom.weights_cache.recipe");
      f.extra = text("loom.weights_cache.extra");
      if (!(*file)->find_value(kKeyField)) f.problem = "not written by loom's weights cache";
    }
    out.push_back(std::move(f));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.path < b.path; });
  return out;
}

bool made_in_memory(const Tensor& t) { return t.nbytes() >= kMinCachedBytes && !in_file_mapping(t.data(), t.nbytes()); }

std::map<std::string, Tensor> find_cached_weights(const WeightsCacheKey& key) {
  std::map<std::string, Tensor> out;
  const std::string dir = key.cacheable ? cache_dir() : std::string();
  if (dir.empty()) return out;
  const std::string hash = cache_key(key);
  const std::string path = cache_path(dir, key, hash);
  std::error_code ec;
  if (!fs::exists(path, ec)) return out;
  auto file = io::GgufFile::open(path);
  if (!file.ok()) return out;
  const io::GgufValue* stored = (*file)->find_value(kKeyField);
  auto stored_key = stored ? stored->as_string(kKeyField) : Result<std::string>(std::string());
  if (!stored_key.ok() || *stored_key != hash) return out;
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
  const std::string what = key.recipe.empty() ? "converted" : "quantized-" + key.recipe;
  const std::string hash = cache_key(key);
  const std::string checkpoint = absolute_path(key.checkpoint);
  const std::string path = dir.empty() ? std::string() : cache_path(dir, key, hash);
  auto use = [&](const io::GgufFile& file) {
    for (const CachedWeight& j : jobs) (*params)[j.name] = file.get(j.name).value();
  };
  std::error_code ec;
  if (!path.empty() && fs::exists(path, ec)) {
    auto cached = open_cached(path, hash, jobs, *params);
    if (cached.ok()) {
      use(**cached);
      log_info(key.checkpoint + ": " + std::to_string(jobs.size()) + " weights mapped from " + path);
      return Status::Ok();
    }
    log_warn("ignoring the weights cache " + cached.status().message() + "; writing it again");
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
  if (written.ok()) {
    log_info(key.checkpoint + ": writing " + std::to_string(jobs.size()) + " weights made at load to " + path);
    fs::create_directories(dir, ec);
    if (ec) written = io_error("cannot create the cache directory " + dir + ": " + ec.message());
  }
  if (written.ok()) {
    std::vector<io::GgufTensorSpec> specs;
    for (const CachedWeight& j : jobs) specs.push_back({j.name, j.to, params->at(j.name).shape()});
    auto writer = io::GgufInPlaceWriter::create(
        path,
        {{kKeyField, io::GgufValue::string(hash)},
         {"loom.weights_cache.checkpoint", io::GgufValue::string(checkpoint)},
         {"loom.weights_cache.recipe", io::GgufValue::string(key.recipe)},
         {"loom.weights_cache.extra", io::GgufValue::string(key.extra)}},
        specs);
    written = writer.status();
    for (size_t i = 0; written.ok() && i < jobs.size(); ++i) {
      const Tensor out = Tensor::wrap(writer->data(i), jobs[i].to, specs[i].shape);
      LOOM_RETURN_IF_ERROR(make(jobs[i], out));
    }
    if (written.ok()) written = writer->commit();
    if (written.ok()) {
      log_quantized();
      auto cached = open_cached(path, hash, jobs, *params);
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
  }
  if (written.ok()) {
    // The file this one replaces (the checkpoint changed, or loom did) would only take space.
    for (const WeightsCacheFile& old : list_weights_cache(dir)) {
      // (A file without `extra` is from a loom before tensor parallelism: one rank.)
      if (old.path != path && old.problem.empty() && old.checkpoint == checkpoint && old.recipe == key.recipe &&
          (old.extra == key.extra || old.extra.empty())) {
        fs::remove(old.path, ec);
        log_info("removed " + old.path + ", replaced by " + path);
      }
    }
  }
  if (!written.ok()) {
    log_warn("weights made at load (" + what + ") stay in memory, beside the runtime's copies, and are made again " +
             "on the next load: " + written.message() + " (LOOM_CACHE_DIR chooses the cache directory)");
  }
  return Status::Ok();
}

}  // namespace loom
