#include "loom/weights/mxfp4_blocks.h"

#include <cstring>
#include <string>

#include "loom/core/quantize.h"
#include "loom/core/status.h"

namespace loom {
namespace {

[[noreturn]] void mxfp4_fail(const std::string& why) { throw Error(invalid_argument(why)); }

// Input k (0..31) of a checkpoint block: byte k/2, low nibble for even k.
inline uint8_t checkpoint_code(const uint8_t* bytes, int k) { return (bytes[k / 2] >> (4 * (k % 2))) & 0xF; }

}  // namespace

Tensor mxfp4_from_blocks(const Tensor& blocks, const Tensor& scales) {
  const Shape& b = blocks.shape();
  const Shape& s = scales.shape();
  if (blocks.dtype() != DType::kU8 || scales.dtype() != DType::kU8 || b.size() < 2 || b.back() != 16 ||
      Shape(b.begin(), b.end() - 1) != s)
    mxfp4_fail("MXFP4 blocks " + blocks.describe() + " and scales " + scales.describe() +
         " do not fit (blocks U8 [..., G, 16], scales U8 [..., G])");
  Shape out_shape(s.begin(), s.end() - 1);
  out_shape.push_back(s.back() * 32);
  Tensor out = Tensor::empty(DType::kMXFP4, out_shape);
  const auto* bp = static_cast<const uint8_t*>(blocks.data());
  const auto* sp = static_cast<const uint8_t*>(scales.data());
  auto* op = static_cast<BlockMXFP4*>(out.data());
  const int64_t n = scales.numel();
  for (int64_t g = 0; g < n; ++g) {
    const uint8_t* in = bp + 16 * g;
    BlockMXFP4& o = op[g];
    o.e = sp[g];
    for (int j = 0; j < 16; ++j)
      o.qs[j] = static_cast<uint8_t>(checkpoint_code(in, j) | (checkpoint_code(in, j + 16) << 4));
  }
  return out;
}

std::pair<Tensor, Tensor> mxfp4_to_blocks(const Tensor& t) {
  const Shape& sh = t.shape();
  if (t.dtype() != DType::kMXFP4 || sh.empty() || sh.back() % 32 != 0)
    mxfp4_fail("MXFP4 tensor expected for checkpoint blocks, got " + t.describe());
  Shape scales_shape(sh.begin(), sh.end() - 1);
  scales_shape.push_back(sh.back() / 32);
  Shape blocks_shape = scales_shape;
  blocks_shape.push_back(16);
  Tensor blocks = Tensor::empty(DType::kU8, blocks_shape);
  Tensor scales = Tensor::empty(DType::kU8, scales_shape);
  const auto* ip = static_cast<const BlockMXFP4*>(t.data());
  auto* bp = static_cast<uint8_t*>(blocks.data());
  auto* sp = static_cast<uint8_t*>(scales.data());
  const int64_t n = scales.numel();
  for (int64_t g = 0; g < n; ++g) {
    const BlockMXFP4& in = ip[g];
    sp[g] = in.e;
    auto code = [&in](int k) { return static_cast<uint8_t>(k < 16 ? in.qs[k] & 0xF : in.qs[k - 16] >> 4); };
    for (int i = 0; i < 16; ++i) bp[16 * g + i] = static_cast<uint8_t>(code(2 * i) | (code(2 * i + 1) << 4));
  }
  return {blocks, scales};
}

}  // namespace loom
