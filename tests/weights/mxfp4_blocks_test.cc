// gpt-oss's MXFP4 checkpoint layout (*_blocks, *_scales) to loom's MXFP4 blocks
// and back: the values are Transformers' convert_moe_packed_tensors written out
// here (lookup of each nibble, byte i's low nibble input 2i, times 2^(scale-127)),
// loom's dequantization of the converted tensor must give exactly them, and the
// reverse gives the checkpoint's bytes back; the conversion op checks shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "loom/weights/conversion_ops.h"
#include "loom/weights/mxfp4_blocks.h"

namespace loom {
namespace {

constexpr float kFp4[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                            -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

TEST(Mxfp4Blocks, CheckpointBlocksDequantizeAsTransformersDoes) {
  const int64_t rows = 3, groups = 2;
  Tensor blocks = Tensor::empty(DType::kU8, {rows, groups, 16});
  Tensor scales = Tensor::empty(DType::kU8, {rows, groups});
  std::mt19937 rng(5);
  auto* b = static_cast<uint8_t*>(blocks.data());
  auto* s = static_cast<uint8_t*>(scales.data());
  for (int64_t i = 0; i < blocks.numel(); ++i) b[i] = static_cast<uint8_t>(rng());
  for (int64_t i = 0; i < scales.numel(); ++i) s[i] = static_cast<uint8_t>(120 + rng() % 12);
  const Tensor t = mxfp4_from_blocks(blocks, scales);
  EXPECT_EQ(t.dtype(), DType::kMXFP4);
  EXPECT_EQ(t.shape(), (Shape{rows, groups * 32}));
  const std::vector<float> got = t.to_f32_vector();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < groups; ++g)
      for (int k = 0; k < 32; ++k) {
        const uint8_t byte = b[(r * groups + g) * 16 + k / 2];
        const float want = std::ldexp(kFp4[k % 2 ? byte >> 4 : byte & 0xF], s[r * groups + g] - 127);
        EXPECT_EQ(got[static_cast<size_t>((r * groups + g) * 32 + k)], want) << r << " " << g << " " << k;
      }
  const auto [b2, s2] = mxfp4_to_blocks(t);
  ASSERT_EQ(b2.shape(), blocks.shape());
  ASSERT_EQ(s2.shape(), scales.shape());
  EXPECT_EQ(0, std::memcmp(b2.data(), blocks.data(), blocks.nbytes()));
  EXPECT_EQ(0, std::memcmp(s2.data(), scales.data(), scales.nbytes()));
}

TEST(Mxfp4Blocks, ConversionOpInfersShapesAndRefusesMisfits) {
  const ShapeBundle in = {{{{4, 8, 2, 16}}, DType::kU8}, {{{4, 8, 2}}, DType::kU8}};
  const ShapeBundle out = infer_shapes(Mxfp4FromBlocks(), in).value();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].dtype, DType::kMXFP4);
  EXPECT_EQ(out[0].items[0], (Shape{4, 8, 64}));
  const ShapeBundle back = infer_shapes(Mxfp4FromBlocks().reverse(), out).value();
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].items[0], (Shape{4, 8, 2, 16}));
  EXPECT_EQ(back[1].items[0], (Shape{4, 8, 2}));
  EXPECT_EQ(Mxfp4FromBlocks().reverse().describe(), "Mxfp4ToBlocks()");
  // Scales that do not match the blocks, or blocks that are not U8, are named.
  const auto bad_scales = infer_shapes(Mxfp4FromBlocks(), {{{{4, 8, 2, 16}}, DType::kU8}, {{{4, 8, 3}}, DType::kU8}});
  ASSERT_FALSE(bad_scales.ok());
  EXPECT_NE(bad_scales.status().message().find("Mxfp4FromBlocks"), std::string::npos);
  EXPECT_FALSE(infer_shapes(Mxfp4FromBlocks(), {{{{4, 8, 2, 16}}, DType::kBF16}, {{{4, 8, 2}}, DType::kU8}}).ok());
  EXPECT_FALSE(infer_shapes(Mxfp4FromBlocks(), {{{{4, 8, 2, 16}}, DType::kU8}}).ok());
}

}  // namespace
}  // namespace loom
