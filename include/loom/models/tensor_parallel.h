// Tensor parallelism as the module tree sees it (Megatron's split, as vLLM and
// Transformers' tp_plan apply it): q/k/v and gate/up are column-parallel (each
// rank holds a slice of the output features: whole heads, grouped by KV head),
// o_proj and down_proj are row-parallel (a slice of the input features) and end
// in an all_reduce; the LM head is vocab-parallel and ends in an all_gather
// (a tied one reads its rows of the embedding table); embeddings and norms
// are replicated. A sparse MoE block splits every expert the same way (each
// rank holds a slice of every expert's intermediate features, the router is
// replicated) and ends in one all_reduce. A module applies this to
// itself (Module::apply_tensor_parallel), declares which slice of each of its
// parameters this rank holds, and records the sharded ops: one graph, one code
// path, for every rank and for a single process.
#pragma once

#include <string>

#include "loom/core/status.h"
#include "loom/core/tensor.h"

namespace loom::models {

struct TensorParallel {
  int rank = 0;
  int size = 1;
  bool active() const { return size > 1; }
};

// Which part of a checkpoint parameter this rank holds: dimension `dim` cut into
// `parts` equal pieces, piece `rank`; -1 the whole tensor. `chunks` > 1: the
// dimension is that many tensors side by side (a MoE's stacked [gate; up]), each
// cut alike, and the rank holds its piece of every one.
// `first_rank_only`: the whole tensor on rank 0 and zeros elsewhere (a
// row-parallel linear's bias, added once to the sum of the partial products).
struct ParameterShard {
  int dim = -1;
  int rank = 0;
  int parts = 1;
  bool first_rank_only = false;
  int chunks = 1;
  bool sharded() const { return dim >= 0 || first_rank_only; }
};

// This rank's piece of `full` (the parameter as the checkpoint holds it). Rows
// are a view of `full` (pages of other ranks' rows are never read); any other
// cut is copied. A quantized tensor's columns are cut on block boundaries only:
// anything else is an error naming the parameter.
Result<Tensor> shard_parameter(const std::string& name, const Tensor& full, const ParameterShard& shard);

}  // namespace loom::models
