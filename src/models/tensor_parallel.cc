#include "loom/models/tensor_parallel.h"

#include <algorithm>
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
  const int chunks = std::max(1, s.chunks);
  if (extent % (int64_t{chunks} * s.parts) != 0)
    return invalid_argument("tensor parallelism: " + name + " " + full.describe() + " holds " + std::to_string(chunks) +
                            " tensors of " + std::to_string(extent / chunks) + " along dimension " +
                            std::to_string(s.dim) + ", not divisible into " + std::to_string(s.parts) + " equal parts");
  const int64_t chunk = extent / chunks, piece = chunk / s.parts;
  if (s.dim == 0 && chunks == 1) return full.slice_rows(s.rank * piece, (s.rank + 1) * piece);
  const DType dt = full.dtype();
  const int64_t block = dtype_block_elements(dt);
  const bool last = s.dim == full.rank() - 1;
  if (last && (piece % block != 0 || chunk % block != 0))
    return invalid_argument("tensor parallelism: " + name + " " + full.describe() + " is split by columns into " +
                            std::to_string(s.parts) + " parts of " + std::to_string(piece) + ", which cuts its " +
                            std::string(dtype_name(dt)) + " blocks of " + std::to_string(block) +
                            " (use fewer ranks, or a checkpoint whose quantized blocks divide the split)");
  // Elements after `dim` travel together (whole rows when dim is not the last).
  int64_t inner = 1;
  for (int64_t d = s.dim + 1; d < full.rank(); ++d) inner *= full.dim(d);
  const int64_t outer = full.numel() / (extent * inner);
  Shape shape = full.shape();
  shape[static_cast<size_t>(s.dim)] = piece * chunks;
  Tensor out = Tensor::empty(dt, shape);
  const size_t piece_bytes = dtype_bytes(dt, piece * inner);
  const auto* src = static_cast<const std::byte*>(full.data());
  auto* dst = static_cast<std::byte*>(out.data());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t c = 0; c < chunks; ++c) {
      const size_t from = dtype_bytes(dt, (o * extent + c * chunk + s.rank * piece) * inner);
      std::memcpy(dst, src + from, piece_bytes);
      dst += piece_bytes;
    }
  return out;
}

}  // namespace loom::models
