// Conversion operations: what a WeightConverter does to the tensors it collects,
// the C++ counterpart of Transformers' ConversionOps (core_model_loading.py).
//
// A converter's tensors travel as a bundle of slots. Slot i starts as the
// tensors matched by source pattern i (one tensor, or a list when the pattern
// has a `*` the targets do not use, e.g. `experts.*.w1.weight`); after the last
// op, slot j holds the tensors of target pattern j. Each op maps a bundle to a
// bundle:
//   Concatenate(dim)      n slots of one tensor → 1 slot (torch.cat)
//   Chunk(dim[, sizes])   1 slot of one tensor → n slots; without sizes the
//                         plan takes them from the targets' expected shapes, so
//                         a GQA qkv_proj splits into unequal q / k / v
//   MergeModulelist(dim)  every slot's list → one stacked tensor (torch.stack)
//   SplitModulelist(dim)  every slot's tensor → a list (torch.unbind)
//   Transpose(d0, d1[, check_dims])  every tensor; with check_dims the plan
//                         skips it for a group whose tensor already has the
//                         expected shape (decided once, at compile time)
//   PermuteForRope(n_heads, head_dim)  every tensor: Llama's interleaved →
//                         half-split rotary row order (see permute_for_rope)
//   AddScalar(value)      every (float) tensor + value, computed in f32 and
//                         stored in the tensor's dtype (llama.cpp stores Gemma's
//                         norm weights as 1 + w)
//   Mxfp4FromBlocks()     2 slots (U8 blocks [..., G, 16], U8 scales [..., G], as
//                         gpt-oss checkpoints store MXFP4) → 1 slot MXFP4 [..., 32 G]
//                         (nibbles reordered, no float; weights/mxfp4_blocks.h);
//                         its reverse splits them back
// Per-tensor ops (Transpose, PermuteForRope, AddScalar) can be limited to some slots with
// on_slots({...}), e.g. PermuteForRope(32, 128).on_slots({0}) after a Chunk to
// permute only q.
//
// Every op has a reverse (reverse()), so a chain reverses to the reversed chain
// of reverses; Concatenate's reverse needs the input sizes, which the plan
// records when it resolves a chain.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/core/dtype.h"
#include "loom/core/status.h"
#include "loom/core/tensor.h"

namespace loom {

enum class ConversionOpKind {
  kConcatenate,
  kChunk,
  kMergeModulelist,
  kSplitModulelist,
  kTranspose,
  kPermuteForRope,
  kAddScalar,
  kMxfp4FromBlocks
};

struct ConversionOp {
  ConversionOpKind kind = ConversionOpKind::kConcatenate;
  int dim = 0;                 // Transpose: dim0
  int dim1 = 1;                // Transpose only
  bool check_dims = false;     // Transpose only
  std::vector<int64_t> sizes;  // Chunk: split sizes; Concatenate: input sizes (reverse)
  int64_t n_heads = 0;         // PermuteForRope
  int64_t head_dim = 0;        // PermuteForRope
  bool inverse = false;        // PermuteForRope: half-split → interleaved; Mxfp4FromBlocks: MXFP4 → blocks
  double scalar = 0;           // AddScalar
  std::vector<int> slots;      // Transpose/PermuteForRope/AddScalar: slots it applies to (empty: all)

  ConversionOp on_slots(std::vector<int> s) const;
  bool applies_to(int slot) const;
  // The op undoing this one (for Concatenate, `sizes` must be known).
  ConversionOp reverse() const;
  // "Chunk(dim=0, sizes=[64, 16, 16])".
  std::string describe() const;
};

ConversionOp Concatenate(int dim = 0);
ConversionOp Chunk(int dim = 0, std::vector<int64_t> sizes = {});
ConversionOp MergeModulelist(int dim = 0);
ConversionOp SplitModulelist(int dim = 0);
ConversionOp Transpose(int dim0 = 0, int dim1 = 1, bool check_dims = false);
ConversionOp PermuteForRope(int64_t n_heads, int64_t head_dim);
ConversionOp AddScalar(double value);
ConversionOp Mxfp4FromBlocks();

// The reversed chain of reverses.
std::vector<ConversionOp> reverse_chain(const std::vector<ConversionOp>& ops);
std::string describe_chain(const std::vector<ConversionOp>& ops);

// Shapes travelling through a chain (compile time) and tensors (run time).
struct ShapeSlot {
  std::vector<Shape> items;
  DType dtype = DType::kF32;
};
using ShapeBundle = std::vector<ShapeSlot>;
using TensorBundle = std::vector<std::vector<Tensor>>;

// Output shapes of `op` on `in`; kInvalidArgument saying why the op does not
// apply (wrong slot/list count, dims out of range, sizes not summing, dtypes
// differing). A Chunk must have sizes here.
Result<ShapeBundle> infer_shapes(const ConversionOp& op, const ShapeBundle& in);

// Runs `op`. Adds the bytes of every tensor it allocates to *materialized
// (views of its inputs cost nothing). Inputs must satisfy infer_shapes.
TensorBundle apply_op(const ConversionOp& op, const TensorBundle& in, uint64_t* materialized);

}  // namespace loom
