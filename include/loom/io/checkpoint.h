// A model's weights as one name → tensor table, whether they live in a single
// model.safetensors or in shards listed by model.safetensors.index.json.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "loom/core/status.h"
#include "loom/core/tensor.h"
#include "loom/io/gguf.h"
#include "loom/io/safetensors.h"

namespace loom {

class Checkpoint {
 public:
  // `path` is a checkpoint directory or a single .safetensors file. In a
  // directory, model.safetensors wins over model.safetensors.index.json when
  // both exist (as in Transformers). For an index, every shard it names must
  // exist and hold the tensors mapped to it; tensors a shard holds beyond the
  // index are ignored with a warning. Errors name the directory/index/shard.
  static Result<Checkpoint> open(const std::string& path);
  // A GGUF file's tensors under their GGUF names (blk.0.attn_q.weight, …), views
  // into its mapping; files() is empty and gguf() is the file.
  static Result<Checkpoint> from_gguf(std::shared_ptr<io::GgufFile> file);
  // Whether `path` is a file starting with GGUF's magic.
  static bool is_gguf_file(const std::string& path);
  const io::GgufFile* gguf() const { return gguf_.get(); }

  // The directory holding the checkpoint, and what was opened (index or file).
  const std::string& dir() const { return dir_; }
  const std::string& source() const { return source_; }
  bool sharded() const { return sharded_; }

  size_t size() const { return entries_.size(); }
  bool contains(std::string_view name) const { return entries_.find(name) != entries_.end(); }
  // Sorted by name.
  std::vector<std::string> names() const;
  const TensorInfo* find(std::string_view name) const;
  // The file holding `name`, or nullptr.
  const SafetensorsFile* file_of(std::string_view name) const;

  // Zero-copy view (see SafetensorsFile::view); kNotFound naming the tensor.
  Result<Tensor> get(std::string_view name) const;
  // The view if the dtype already matches, else a converted owned copy.
  Result<Tensor> get_as(std::string_view name, DType dtype) const;

  // OK if every name exists; else kNotFound listing the first few missing
  // names, how many are missing, `what` needs them ("LlamaForCausalLM") and
  // the checkpoint directory.
  Status require(const std::vector<std::string>& names, const std::string& what) const;
  // Names not in `used`, sorted.
  std::vector<std::string> unexpected(const std::set<std::string>& used) const;
  // unexpected(used), and a log_warn naming the first few (if any).
  std::vector<std::string> warn_unexpected(const std::set<std::string>& used, const std::string& what) const;

  // Shard paths in file-name order (one entry for a single file).
  std::vector<std::string> shard_files() const;
  const std::vector<std::shared_ptr<SafetensorsFile>>& files() const { return files_; }

  // For `loom inspect`: element counts and bytes over all tensors.
  int64_t parameter_count() const;
  std::map<DType, int64_t> parameters_per_dtype() const;
  std::map<DType, uint64_t> bytes_per_dtype() const;
  uint64_t total_bytes() const;

 private:
  struct Entry {
    const TensorInfo* info;
    const SafetensorsFile* file;
  };
  Checkpoint() = default;

  std::string dir_;
  std::string source_;
  bool sharded_ = false;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::shared_ptr<io::GgufFile> gguf_;
  std::vector<TensorInfo> gguf_infos_;  // entries_ point into it (never resized after from_gguf)
  std::map<std::string, Entry, std::less<>> entries_;
};

}  // namespace loom
