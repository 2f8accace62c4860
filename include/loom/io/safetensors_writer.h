// Writing .safetensors files in exactly the bytes Python's `safetensors` library
// (safetensors.torch.save_file, i.e. the Rust `serialize_to_file`) produces:
//   - 8-byte little-endian header length N, then N bytes of compact JSON;
//   - "__metadata__" first (omitted when the map is empty, like metadata=None),
//     then one entry per tensor in data order, keys "dtype", "shape",
//     "data_offsets"; strings escaped like serde_json (", \, control characters
//     only; UTF-8 written as is);
//   - the JSON padded with spaces to a multiple of 8, so the data section is
//     8-byte aligned;
//   - tensor bytes back to back, no padding between them.
// Python always sorts tensors by descending dtype alignment (I64, F32, I32,
// BF16, F16, I8, U8, BOOL), then by name (bytewise). kLikePython does the same,
// so write_safetensors(t, m, kLikePython) is byte-identical to
// save_file(dict(t), metadata=m) for the same tensors. With several metadata
// keys Python writes them in Rust HashMap order (unspecified, varies per
// process); loom writes them sorted by key, so only files with at most one
// metadata key (the usual {"format": "pt"}) are reproducible byte for byte.
// kAsGiven keeps the caller's order, which reproduces any existing file read
// back in its file order (SafetensorsFile::tensors()). Mixing dtypes in an
// arbitrary order can leave a tensor misaligned (an I64 after 5 BF16s); readers
// then copy it instead of viewing it, so prefer kLikePython for new files.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "loom/core/status.h"
#include "loom/core/tensor.h"

namespace loom {

enum class SafetensorsOrder { kAsGiven, kLikePython };

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Writes to a temporary file next to `path`, fsyncs it and renames it over
// `path`, so a crash leaves either the old file or the complete new one.
// kInvalidArgument for an undefined tensor, a duplicate or reserved
// ("__metadata__") name, or a name/metadata string that is not valid UTF-8;
// kIoError (naming the file) when writing fails.
Status write_safetensors(const std::string& path, const NamedTensors& tensors,
                         const std::map<std::string, std::string>& metadata = {},
                         SafetensorsOrder order = SafetensorsOrder::kAsGiven);

// The same bytes, in memory.
Result<std::string> serialize_safetensors(const NamedTensors& tensors,
                                          const std::map<std::string, std::string>& metadata = {},
                                          SafetensorsOrder order = SafetensorsOrder::kAsGiven);

}  // namespace loom
