#include "loom/models/tensor_parallel.h"

#include <cstring>

namespace loom::models {

Result<Tensor> shard_parameter(const std::string& name, const Tensor& full, const ParameterShard& s) {
  if (!s.sharded()) return full;
  if (s.first_rank_only) return s.rank == 0 ? full : Tensor::zeros(full.dtype(), full.shape());
  if (s.dim >= full.rank())
    return internal_error(name + ": cannot cut dimension " + std::to_string(s.dim) + " of " + full.describe());
  const int64_t extent = full.dim(s.dim);
  if (extent % s.parts != 0)
    return invalid_argument("tensor parallelism: " + name + " " + full.describe() + " has " + std::to_string(extent) +
                            (s.dim == 0 ? " rows" : " columns") + ", not divisible into " + std::to_string(s.parts) +
                            " equal parts");
  const int64_t piece = extent / s.parts;
  if (s.dim == 0) return full.slice_rows(s.rank * piece, (s.rank + 1) * piece);
  const DType dt = full.dtype();
  const int64_t block = dtype_block_elements(dt);
  if (piece % block != 0)
    return invalid_argument("tensor parallelism: " + name + " " + full.describe() + " is split by columns into " +
                            std::to_string(s.parts) + " parts of " + std::to_string(piece) + ", which cuts its " +
                            std::string(dtype_name(dt)) + " blocks of " + std::to_string(block) +
                            " (use fewer ranks, or a checkpoint whose quantized blocks divide the split)");
  const int64_t rows = full.numel() / extent;
  Shape shape = full.shape();
  shape[static_cast<size_t>(s.dim)] = piece;
  Tensor out = Tensor::empty(dt, shape);
  const size_t row_bytes = dtype_bytes(dt, extent), piece_bytes = dtype_bytes(dt, piece);
  const size_t offset = dtype_bytes(dt, s.rank * piece);
  const auto* src = static_cast<const std::byte*>(full.data());
  auto* dst = static_cast<std::byte*>(out.data());
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(dst + static_cast<size_t>(r) * piece_bytes, src + static_cast<size_t>(r) * row_bytes + offset, piece_bytes);
  return out;
}

}  // namespace loom::models
