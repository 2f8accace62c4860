// The data movements behind the conversion ops: concatenate / split along a
// dimension, stack / unstack a list, swap two dimensions, and the rotary row
// permutation. They move bytes only (any dtype), in contiguous memcpy runs where
// the layout allows, split over ThreadPool::global() when a tensor is large.
// Results that are a contiguous range of the input (split or unstack along a
// dimension with no non-unit dimension before it) are views sharing the input's
// storage; everything else is a freshly allocated tensor.
//
// Shape or argument errors throw loom::Error(kInvalidArgument) naming the shapes;
// the conversion plan validates shapes before calling these, so they only throw
// for direct misuse.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/core/tensor.h"

namespace loom {

// Negative dims count from the end (-1 = last). Throws for dims out of range.
int normalize_dim(int dim, int rank);

// torch.cat(tensors, dim): same dtype and rank, equal sizes except along `dim`.
Tensor concatenate(const std::vector<Tensor>& tensors, int dim);
// torch.split(t, sizes, dim): sizes must sum to t.shape[dim].
std::vector<Tensor> split(const Tensor& t, const std::vector<int64_t>& sizes, int dim);
// torch.stack(tensors, dim): equal shapes; dim in [-(rank+1), rank].
Tensor stack(const std::vector<Tensor>& tensors, int dim);
// torch.unbind(t, dim).
std::vector<Tensor> unstack(const Tensor& t, int dim);
// torch.transpose(t, d0, d1).contiguous().
Tensor transpose(const Tensor& t, int d0, int d1);

// Rows (dimension 0, rank 1 or more) grouped in n_heads heads of head_dim rows.
// Forward is Transformers' Llama conversion permute
//   w.view(n_heads, head_dim/2, 2, rest).transpose(1, 2).reshape(rows, rest)
// (interleaved rotary pairs → half-split); inverse undoes it. Requires
// rows == n_heads * head_dim and an even head_dim.
Tensor permute_for_rope(const Tensor& t, int64_t n_heads, int64_t head_dim, bool inverse);

}  // namespace loom
