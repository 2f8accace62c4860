// What the safetensors format itself says about dtypes, beyond loom's DType:
// the full list of names it defines, and the order its writer sorts them in.
#pragma once

#include <string_view>

#include "loom/core/dtype.h"

namespace loom::io {

// True for every dtype name the safetensors format defines (F64, F8_E4M3, U16 …),
// including those loom cannot load.
bool is_safetensors_dtype_name(std::string_view name);

// Rank of the dtype in safetensors' `Dtype` enum, which is declared "in
// increasing alignment order"; the Python/Rust writer lays tensors out by
// descending rank, then by name.
int safetensors_dtype_rank(DType t);

}  // namespace loom::io
