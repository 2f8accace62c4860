// Each data movement and its reverse, against expectations computed here by
// index arithmetic (not by the code under test).
#include "loom/weights/tensor_moves.h"

#include <gtest/gtest.h>

#include "loom/core/status.h"
#include "loom/weights/conversion_ops.h"
#include "weights/weights_test_util.h"

namespace loom {
namespace {

using testing::at;
using testing::iota;
using testing::same_bytes;

class MovesTest : public ::testing::TestWithParam<DType> {};

TEST_P(MovesTest, ConcatenateMiddleDimAndSplitBack) {
  const DType dt = GetParam();
  Tensor a = iota(dt, {2, 3, 4}, 0), b = iota(dt, {2, 5, 4}, 1000);
  Tensor c = concatenate({a, b}, 1);
  ASSERT_EQ(c.shape(), (Shape{2, 8, 4}));
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 8; ++j)
      for (int64_t k = 0; k < 4; ++k) {
        const int64_t want = j < 3 ? (i * 3 + j) * 4 + k : 1000 + (i * 5 + (j - 3)) * 4 + k;
        ASSERT_EQ(at(c, (i * 8 + j) * 4 + k), want) << i << "," << j << "," << k;
      }
  auto parts = split(c, {3, 5}, 1);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_TRUE(same_bytes(parts[0], a));
  EXPECT_TRUE(same_bytes(parts[1], b));
  // Negative dims count from the end.
  EXPECT_TRUE(same_bytes(concatenate({a, b}, -2), c));
}

TEST_P(MovesTest, UnevenChunkForGqaIsAViewAlongRows) {
  const DType dt = GetParam();
  // 4 query heads, 2 kv heads, head_dim 3, hidden 5: q 12 rows, k 6, v 6.
  Tensor qkv = iota(dt, {24, 5});
  auto parts = split(qkv, {12, 6, 6}, 0);
  ASSERT_EQ(parts.size(), 3u);
  const int64_t starts[] = {0, 12, 18};
  for (int p = 0; p < 3; ++p) {
    ASSERT_EQ(parts[p].shape(), (Shape{p == 0 ? 12 : 6, 5}));
    for (int64_t i = 0; i < parts[p].numel(); ++i) ASSERT_EQ(at(parts[p], i), starts[p] * 5 + i);
    // Rows are contiguous: no copy.
    EXPECT_EQ(parts[p].data(), static_cast<char*>(qkv.data()) + starts[p] * 5 * dtype_size(dt));
  }
  EXPECT_TRUE(same_bytes(concatenate(parts, 0), qkv));
}

TEST_P(MovesTest, ChunkAlongLastDimCopies) {
  const DType dt = GetParam();
  Tensor gate_up = iota(dt, {3, 10});
  auto parts = split(gate_up, {4, 6}, 1);
  for (int64_t r = 0; r < 3; ++r) {
    for (int64_t c = 0; c < 4; ++c) ASSERT_EQ(at(parts[0], r * 4 + c), r * 10 + c);
    for (int64_t c = 0; c < 6; ++c) ASSERT_EQ(at(parts[1], r * 6 + c), r * 10 + 4 + c);
  }
  EXPECT_TRUE(same_bytes(concatenate(parts, 1), gate_up));
}

TEST_P(MovesTest, StackAndUnstack) {
  const DType dt = GetParam();
  std::vector<Tensor> experts;
  for (int e = 0; e < 3; ++e) experts.push_back(iota(dt, {2, 4}, 100 * e));
  Tensor s0 = stack(experts, 0);
  ASSERT_EQ(s0.shape(), (Shape{3, 2, 4}));
  for (int64_t e = 0; e < 3; ++e)
    for (int64_t i = 0; i < 8; ++i) ASSERT_EQ(at(s0, e * 8 + i), 100 * e + i);
  Tensor s1 = stack(experts, 1);
  ASSERT_EQ(s1.shape(), (Shape{2, 3, 4}));
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t e = 0; e < 3; ++e)
      for (int64_t c = 0; c < 4; ++c) ASSERT_EQ(at(s1, (r * 3 + e) * 4 + c), 100 * e + r * 4 + c);
  for (int dim : {0, 1, 2, -1}) {
    Tensor s = stack(experts, dim);
    auto back = unstack(s, dim);
    ASSERT_EQ(back.size(), 3u) << dim;
    for (int e = 0; e < 3; ++e) EXPECT_TRUE(same_bytes(back[e], experts[e])) << "dim " << dim << " expert " << e;
  }
}

TEST_P(MovesTest, TransposeOddSizesAndThreeDims) {
  const DType dt = GetParam();
  Tensor t = iota(dt, {37, 19});
  Tensor tt = transpose(t, 0, 1);
  ASSERT_EQ(tt.shape(), (Shape{19, 37}));
  for (int64_t i = 0; i < 19; ++i)
    for (int64_t j = 0; j < 37; ++j) ASSERT_EQ(at(tt, i * 37 + j), at(t, j * 19 + i));
  EXPECT_TRUE(same_bytes(transpose(tt, 1, 0), t));

  Tensor u = iota(dt, {3, 4, 5, 2});
  Tensor ut = transpose(u, 0, 2);  // [5, 4, 3, 2]: contiguous runs of 2 elements
  ASSERT_EQ(ut.shape(), (Shape{5, 4, 3, 2}));
  for (int64_t a = 0; a < 5; ++a)
    for (int64_t b = 0; b < 4; ++b)
      for (int64_t c = 0; c < 3; ++c)
        for (int64_t d = 0; d < 2; ++d)
          ASSERT_EQ(at(ut, ((a * 4 + b) * 3 + c) * 2 + d), ((c * 4 + b) * 5 + a) * 2 + d);
  EXPECT_TRUE(same_bytes(transpose(ut, 2, 0), u));
  Tensor w = transpose(u, 1, 3);  // [3, 2, 5, 4]: single elements
  for (int64_t a = 0; a < 3; ++a)
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t c = 0; c < 5; ++c)
        for (int64_t d = 0; d < 4; ++d)
          ASSERT_EQ(at(w, ((a * 2 + b) * 5 + c) * 4 + d), ((a * 4 + d) * 5 + c) * 2 + b);
}

TEST_P(MovesTest, PermuteForRopeMatchesTheViewTransposeFormula) {
  const DType dt = GetParam();
  const int64_t heads = 3, head_dim = 6, cols = 5;
  Tensor w = iota(dt, {heads * head_dim, cols});
  Tensor p = permute_for_rope(w, heads, head_dim, false);
  // w.view(heads, head_dim/2, 2, cols).transpose(1, 2): out[h][j][i] = in[h][i][j].
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t i = 0; i < head_dim / 2; ++i)
        for (int64_t c = 0; c < cols; ++c) {
          const int64_t out_row = h * head_dim + j * (head_dim / 2) + i;
          const int64_t in_row = h * head_dim + i * 2 + j;
          ASSERT_EQ(at(p, out_row * cols + c), at(w, in_row * cols + c));
        }
  EXPECT_TRUE(same_bytes(permute_for_rope(p, heads, head_dim, true), w));
  // A bias (rank 1) permutes the same way.
  Tensor bias = iota(dt, {heads * head_dim});
  Tensor pb = permute_for_rope(bias, heads, head_dim, false);
  EXPECT_EQ(at(pb, 1), 2);  // head 0: split row 1 ← interleaved row 2
  EXPECT_EQ(at(pb, 3), 1);  // split row 3 = second half, i=0 ← interleaved row 1
  EXPECT_TRUE(same_bytes(permute_for_rope(pb, heads, head_dim, true), bias));
  EXPECT_THROW(permute_for_rope(w, 4, head_dim, false), Error);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, MovesTest, ::testing::Values(DType::kF32, DType::kBF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Big enough to split over the thread pool; checked against a naive loop.
TEST(MovesLarge, ParallelTransposeAndConcatMatchNaive) {
  Tensor t = iota(DType::kF32, {700, 1031});
  Tensor tt = transpose(t, 0, 1);
  for (int64_t i = 0; i < 1031; ++i)
    for (int64_t j = 0; j < 700; ++j) ASSERT_EQ(at(tt, i * 700 + j), j * 1031 + i);
  Tensor extra = iota(DType::kF32, {700, 13}, 5000000);
  Tensor c = concatenate({t, extra}, 1);
  for (int64_t r = 0; r < 700; r += 7)
    for (int64_t k = 0; k < 1044; ++k) ASSERT_EQ(at(c, r * 1044 + k), k < 1031 ? r * 1031 + k : 5000000 + r * 13 + k - 1031);
  auto back = split(c, {1031, 13}, 1);
  EXPECT_TRUE(same_bytes(back[0], t));
  EXPECT_TRUE(same_bytes(back[1], extra));
  Tensor p = permute_for_rope(t, 7, 100, false);
  EXPECT_TRUE(same_bytes(permute_for_rope(p, 7, 100, true), t));
}

TEST(ConversionOps, EveryOpReversesAndChainsReverseInOrder) {
  const std::vector<ConversionOp> ops = {MergeModulelist(0), Concatenate(1), Transpose(1, 2),
                                         PermuteForRope(2, 4).on_slots({0})};
  const auto rev = reverse_chain(ops);
  ASSERT_EQ(rev.size(), 4u);
  EXPECT_EQ(rev[0].kind, ConversionOpKind::kPermuteForRope);
  EXPECT_TRUE(rev[0].inverse);
  EXPECT_EQ(rev[0].slots, std::vector<int>{0});
  EXPECT_EQ(rev[1].kind, ConversionOpKind::kTranspose);
  EXPECT_EQ(rev[2].kind, ConversionOpKind::kChunk);
  EXPECT_EQ(rev[3].kind, ConversionOpKind::kSplitModulelist);
  EXPECT_EQ(Chunk(0, {3, 1}).reverse().kind, ConversionOpKind::kConcatenate);
  EXPECT_EQ(SplitModulelist(1).reverse().kind, ConversionOpKind::kMergeModulelist);
  EXPECT_EQ(Chunk(0, {3, 1}).describe(), "Chunk(dim=0, sizes=[3, 1])");
}

TEST(ConversionOps, ApplyCountsOnlyMaterializedBytes) {
  Tensor qkv = iota(DType::kBF16, {8, 4});
  uint64_t bytes = 0;
  TensorBundle out = apply_op(Chunk(0, {4, 2, 2}), {{qkv}}, &bytes);
  EXPECT_EQ(bytes, 0u);  // row ranges are views
  ASSERT_EQ(out.size(), 3u);
  out = apply_op(Chunk(1, {1, 3}), {{qkv}}, &bytes);
  EXPECT_EQ(bytes, qkv.nbytes());
  bytes = 0;
  out = apply_op(MergeModulelist(0), {{qkv, qkv}, {qkv}}, &bytes);
  EXPECT_EQ(bytes, 3 * qkv.nbytes());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0][0].shape(), (Shape{2, 8, 4}));
}

TEST(ConversionOps, ShapeInferenceRejectsWhatCannotApply) {
  ShapeBundle two{{{{4, 3}}, DType::kF32}, {{{4, 5}}, DType::kF32}};
  EXPECT_FALSE(infer_shapes(Concatenate(0), two).ok());  // columns differ
  auto cat = infer_shapes(Concatenate(1), two);
  ASSERT_TRUE(cat.ok());
  EXPECT_EQ(cat->at(0).items[0], (Shape{4, 8}));
  ShapeBundle one{{{{8, 3}}, DType::kF32}};
  EXPECT_FALSE(infer_shapes(Chunk(0, {4, 3}), one).ok());  // sums to 7, not 8
  EXPECT_FALSE(infer_shapes(Chunk(0), one).ok());          // sizes unknown
  ShapeBundle mixed{{{{4, 3}}, DType::kF32}, {{{4, 3}}, DType::kBF16}};
  auto st = infer_shapes(Concatenate(0), mixed);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("Concatenate"), std::string::npos);
  EXPECT_FALSE(infer_shapes(PermuteForRope(3, 2), one).ok());  // 8 rows ≠ 3×2
  EXPECT_FALSE(infer_shapes(Transpose(0, 2), one).ok());
}

}  // namespace
}  // namespace loom
