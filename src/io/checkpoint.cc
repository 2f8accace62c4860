#include "loom/io/checkpoint.h"
#include "loom/io/quoted.h"

#include <cstring>
#include <fstream>

#include <filesystem>

#include "loom/io/json_file.h"
#include "loom/core/logging.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

constexpr const char* kSingleName = "model.safetensors";
constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr size_t kListedNames = 5;  // how many names an error or warning spells out

using io::squote;

// "a, b, c, d, e and 7 more"
std::string name_list(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < kListedNames; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > kListedNames) out += " and " + std::to_string(names.size() - kListedNames) + " more";
  return out;
}

bool exists_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// Shard names come from a file we did not write: keep them inside the directory.
bool is_plain_relative(const std::string& name) {
  const fs::path p(name);
  if (name.empty() || p.is_absolute()) return false;
  for (const auto& part : p)
    if (part == "..") return false;
  return true;
}

}  // namespace

bool Checkpoint::is_gguf_file(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return in.gcount() == 4 && std::memcmp(magic, "GGUF", 4) == 0;
}

Result<Checkpoint> Checkpoint::from_gguf(std::shared_ptr<io::GgufFile> file) {
  Checkpoint ck;
  const fs::path p(file->path());
  ck.dir_ = p.has_parent_path() ? p.parent_path().string() : ".";
  ck.source_ = file->path();
  ck.gguf_infos_.reserve(file->tensors().size());
  for (const io::GgufTensorInfo& t : file->tensors()) {
    TensorInfo info;
    info.name = t.name;
    info.dtype = t.dtype;
    info.shape = t.shape;
    info.data_begin = t.offset;
    info.data_end = t.offset + t.nbytes;
    ck.gguf_infos_.push_back(std::move(info));
  }
  for (const TensorInfo& t : ck.gguf_infos_) ck.entries_.emplace(t.name, Entry{&t, nullptr});
  ck.gguf_ = std::move(file);
  return ck;
}

Result<Checkpoint> Checkpoint::open(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  if (!fs::exists(p, ec)) return not_found("checkpoint " + path + ": no such file or directory");

  Checkpoint ck;
  if (!fs::is_directory(p, ec)) {
    LOOM_ASSIGN_OR_RETURN(std::shared_ptr<SafetensorsFile> file, SafetensorsFile::open(path));
    ck.dir_ = p.has_parent_path() ? p.parent_path().string() : ".";
    ck.source_ = path;
    ck.files_.push_back(std::move(file));
  } else if (exists_file(p / kSingleName)) {
    const std::string file_path = (p / kSingleName).string();
    LOOM_ASSIGN_OR_RETURN(std::shared_ptr<SafetensorsFile> file, SafetensorsFile::open(file_path));
    ck.dir_ = path;
    ck.source_ = file_path;
    ck.files_.push_back(std::move(file));
  } else if (exists_file(p / kIndexName)) {
    ck.dir_ = path;
    ck.source_ = (p / kIndexName).string();
    ck.sharded_ = true;
  } else {
    return not_found("checkpoint " + path + ": neither " + kSingleName + " nor " + kIndexName + " found");
  }

  if (!ck.sharded_) {
    const SafetensorsFile* file = ck.files_[0].get();
    for (const TensorInfo& t : file->tensors()) ck.entries_.emplace(t.name, Entry{&t, file});
    return ck;
  }

  const std::string& index_path = ck.source_;
  LOOM_ASSIGN_OR_RETURN(nlohmann::json index, io::read_json_file(index_path));
  if (!index.is_object()) return parse_error(index_path + ": must be a JSON object");
  auto wm = index.find("weight_map");
  if (wm == index.end()) return parse_error(index_path + ": missing \"weight_map\"");
  if (!wm->is_object()) return parse_error(index_path + ": \"weight_map\" must be an object");

  // shard name → tensors the index puts there; std::map gives file-name order.
  std::map<std::string, std::vector<std::string>> by_shard;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it->is_string())
      return parse_error(index_path + ": weight_map entry for tensor " + squote(it.key()) + " must be a string");
    const std::string shard = it->get<std::string>();
    if (!is_plain_relative(shard))
      return parse_error(index_path + ": shard " + squote(shard) + " for tensor " + squote(it.key()) +
                         " is not a path inside the checkpoint directory");
    by_shard[shard].push_back(it.key());
  }

  size_t ignored = 0;
  for (const auto& [shard, names] : by_shard) {
    const fs::path shard_path = p / shard;
    if (!exists_file(shard_path))
      return not_found(index_path + ": shard " + squote(shard) + " (holding " + squote(names.front()) +
                       ") does not exist in " + path);
    LOOM_ASSIGN_OR_RETURN(std::shared_ptr<SafetensorsFile> file, SafetensorsFile::open(shard_path.string()));
    for (const std::string& name : names) {
      const TensorInfo* info = file->find(name);
      if (!info)
        return not_found(index_path + ": maps tensor " + squote(name) + " to shard " + squote(shard) +
                         ", but " + shard_path.string() + " has no such tensor");
      ck.entries_.emplace(name, Entry{info, file.get()});
    }
    ignored += file->tensors().size() - names.size();
    ck.files_.push_back(std::move(file));
  }
  if (ignored > 0)
    log_warn(index_path + ": " + std::to_string(ignored) +
             " tensors found in shards are not listed in the index and are ignored");
  return ck;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [name, e] : entries_) out.push_back(name);
  return out;
}

const TensorInfo* Checkpoint::find(std::string_view name) const {
  auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : it->second.info;
}

const SafetensorsFile* Checkpoint::file_of(std::string_view name) const {
  auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : it->second.file;
}

Result<Tensor> Checkpoint::get(std::string_view name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) return not_found("checkpoint " + dir_ + ": no tensor " + squote(name));
  if (gguf_) return gguf_->get(name);
  return it->second.file->view(*it->second.info);
}

Result<Tensor> Checkpoint::get_as(std::string_view name, DType dtype) const {
  LOOM_ASSIGN_OR_RETURN(Tensor t, get(name));
  if (t.dtype() == dtype) return t;
  return t.to(dtype);
}

Status Checkpoint::require(const std::vector<std::string>& names, const std::string& what) const {
  std::vector<std::string> missing;
  for (const std::string& n : names)
    if (!contains(n)) missing.push_back(n);
  if (missing.empty()) return Status::Ok();
  return not_found("checkpoint " + dir_ + " is missing " + std::to_string(missing.size()) + " of the " +
                   std::to_string(names.size()) + " tensors " + what + " needs: " + name_list(missing));
}

std::vector<std::string> Checkpoint::unexpected(const std::set<std::string>& used) const {
  std::vector<std::string> out;
  for (const auto& [name, e] : entries_)
    if (!used.count(name)) out.push_back(name);
  return out;
}

std::vector<std::string> Checkpoint::warn_unexpected(const std::set<std::string>& used,
                                                     const std::string& what) const {
  std::vector<std::string> extra = unexpected(used);
  if (!extra.empty())
    log_warn("checkpoint " + dir_ + " has " + std::to_string(extra.size()) + " tensors " + what +
             " does not use (ignored): " + name_list(extra));
  return extra;
}

std::vector<std::string> Checkpoint::shard_files() const {
  std::vector<std::string> out;
  for (const auto& f : files_) out.push_back(f->path());
  return out;
}

int64_t Checkpoint::parameter_count() const {
  int64_t n = 0;
  for (const auto& [name, e] : entries_) n += e.info->numel();
  return n;
}

std::map<DType, int64_t> Checkpoint::parameters_per_dtype() const {
  std::map<DType, int64_t> out;
  for (const auto& [name, e] : entries_) out[e.info->dtype] += e.info->numel();
  return out;
}

std::map<DType, uint64_t> Checkpoint::bytes_per_dtype() const {
  std::map<DType, uint64_t> out;
  for (const auto& [name, e] : entries_) out[e.info->dtype] += e.info->nbytes();
  return out;
}

uint64_t Checkpoint::total_bytes() const {
  uint64_t n = 0;
  for (const auto& [name, e] : entries_) n += e.info->nbytes();
  return n;
}

}  // namespace loom
