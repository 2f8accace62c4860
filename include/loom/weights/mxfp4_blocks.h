// MXFP4 as OpenAI's gpt-oss checkpoints store it, and as loom (and llama.cpp)
// hold it. A weight W [..., K] (K a multiple of 32, the contracted inputs) is
// two uint8 tensors in the checkpoint:
//   *_blocks [..., K/32, 16]: block g holds inputs 32g..32g+31, byte i's low
//                             nibble is input 2i and its high nibble input 2i+1
//                             (an E2M1 code: ±{0, 0.5, 1, 1.5, 2, 3, 4, 6});
//   *_scales [..., K/32]:     the block's E8M0 exponent, 2^(scale - 127).
// loom's DType::kMXFP4 (core/quantize.h BlockMXFP4, ggml's block_mxfp4) keeps the
// same codes and exponent byte per block, with byte j holding inputs j (low) and
// j + 16 (high). These functions move between the two by reordering nibbles
// only, so nothing goes through a float and both dequantize to the same values.
//
// Shape errors throw loom::Error(kInvalidArgument) naming the shapes; the
// conversion plan checks shapes first (conversion_ops.h Mxfp4Blocks).
#pragma once

#include <utility>

#include "loom/core/tensor.h"

namespace loom {

// blocks U8 [..., G, 16] + scales U8 [..., G] → MXFP4 [..., 32 G].
Tensor mxfp4_from_blocks(const Tensor& blocks, const Tensor& scales);
// MXFP4 [..., K] → (blocks U8 [..., K/32, 16], scales U8 [..., K/32]).
std::pair<Tensor, Tensor> mxfp4_to_blocks(const Tensor& t);

}  // namespace loom
