// Writing GGUF version 3 files: the metadata in the order given, general.alignment
// (default 32) honoured for the data section and every tensor, tensor infos with
// shapes reversed to GGUF's ne order (see gguf.h), quantized tensors written as
// their blocks. Readers (loom's GgufFile, llama.cpp's gguf) read it back as written.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "loom/core/status.h"
#include "loom/core/tensor.h"
#include "loom/io/gguf.h"

namespace loom::io {

using GgufMetadata = std::vector<std::pair<std::string, GgufValue>>;
using GgufTensors = std::vector<std::pair<std::string, Tensor>>;

// Writes to a temporary file beside `path` and renames it over `path`.
// kInvalidArgument for a duplicate key or tensor name, a tensor dtype GGUF cannot
// hold, a quantized tensor whose last dimension is not a multiple of its block;
// kIoError naming the file when writing fails.
Status write_gguf(const std::string& path, const GgufMetadata& metadata, const GgufTensors& tensors,
                  uint64_t alignment = 32);

// A tensor of a GGUF file written in place: its name, dtype and shape.
struct GgufTensorSpec {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
};

// A GGUF file whose tensors' bytes are written in place, into the file's shared
// mapping: weights made at load (quantized) go straight into the weights cache,
// with no copy in memory first. On a Zen 5 VM, filling 1.3 GB in memory and
// write()-ing it took 8 s, filling a mapping of the file 0.4-2.9 s. create()
// writes the header and reserves the file's blocks (the same checks and layout as
// write_gguf), data(i) is tensor i's bytes to fill, commit() makes the file appear
// at its path complete. Dropped before commit(), the path is untouched.
class GgufInPlaceWriter {
 public:
  static Result<GgufInPlaceWriter> create(const std::string& path, const GgufMetadata& metadata,
                                          const std::vector<GgufTensorSpec>& tensors, uint64_t alignment = 32);
  GgufInPlaceWriter(GgufInPlaceWriter&& other) noexcept;
  GgufInPlaceWriter& operator=(GgufInPlaceWriter&&) = delete;
  ~GgufInPlaceWriter();

  void* data(size_t i) const;
  Status commit();

 private:
  struct State;
  explicit GgufInPlaceWriter(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace loom::io
