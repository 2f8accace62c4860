// The ops fused kernels record (silu_and_mul, split_columns) against the
// unfused ops they stand in for, on both backends, with row sizes that are not
// a multiple of any vector width.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "loom/graph/graph.h"
#include "loom/runtime/backend.h"
#include "loom/runtime/executor.h"

namespace loom::runtime {
namespace {

std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<float> to_vec(const Tensor& t) { return t.to_f32_vector(); }

// Runs `g` on `backend` with x bound to `x` and returns every output.
std::vector<Tensor> run(std::shared_ptr<graph::Graph> g, const Backend& backend, const Tensor& x) {
  auto ex = Executor::create(g, backend);
  EXPECT_TRUE(ex.ok()) << ex.status().message();
  std::vector<Tensor> out;
  Status s = ex.value()->run({{"x", x}}, nullptr, &out);
  EXPECT_TRUE(s.ok()) << s.message();
  return out;
}

class FusedOps : public ::testing::TestWithParam<int64_t> {};

TEST_P(FusedOps, SiluAndMulOfFusedGateUpEqualsSiluThenMul) {
  const int64_t rows = 3, n = GetParam();
  const Tensor x = Tensor::from_f32(random_values(static_cast<size_t>(rows * 2 * n), 7), {rows, 2 * n});
  const std::vector<float> xs = to_vec(x);
  std::vector<float> gate, up;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < 2 * n; ++i) (i < n ? gate : up).push_back(xs[static_cast<size_t>(r * 2 * n + i)]);

  // Fused: one [rows, 2n] input.
  auto fused = std::make_shared<graph::Graph>();
  const int t = fused->add_symbol("t");
  auto fx = fused->add_input("x", DType::kF32, {graph::Dim::sym(t), graph::Dim::fixed(2 * n)});
  fused->mark_output("y", fused->add_node("silu_and_mul", {fx}, {})[0]);
  // Three uneven column ranges (like GQA's q, k, v).
  auto two = std::make_shared<graph::Graph>();
  const int t2 = two->add_symbol("t");
  auto tx = two->add_input("x", DType::kF32, {graph::Dim::sym(t2), graph::Dim::fixed(2 * n)});
  auto parts = two->add_node("split_columns", {tx}, {{"sizes", std::vector<int64_t>{n, 1, n - 1}}});
  // Unfused reference: silu(gate) * up on the reference backend.
  auto plain = std::make_shared<graph::Graph>();
  auto gin = plain->add_input("x", DType::kF32, {graph::Dim::fixed(rows), graph::Dim::fixed(n)});
  auto uin = plain->add_constant("up", Tensor::from_f32(up, {rows, n}));
  plain->mark_output("y", plain->add_node("mul", {plain->add_node("silu", {gin}, {})[0], uin}, {})[0]);
  const std::vector<float> want = to_vec(run(plain, reference_backend(), Tensor::from_f32(gate, {rows, n}))[0]);

  for (const Backend* b : {&reference_backend(), &cpu_backend()}) {
    const std::vector<float> got = to_vec(run(fused, *b, x)[0]);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(got[i], want[i], 1e-6f * (1.0f + std::fabs(want[i]))) << b->name() << " at " << i;
  }
  // The reference backend's fused op is the unfused reference to the bit.
  EXPECT_EQ(to_vec(run(fused, reference_backend(), x)[0]), want);

  // Split into three column ranges: each output is its slice of x.
  for (auto p : parts) two->mark_output("p" + std::to_string(p), p);
  for (const Backend* b : {&reference_backend(), &cpu_backend()}) {
    const std::vector<Tensor> outs = run(two, *b, x);
    ASSERT_EQ(outs.size(), 3u);
    int64_t col = 0;
    for (const Tensor& o : outs) {
      const std::vector<float> v = to_vec(o);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < o.dim(1); ++i)
          ASSERT_EQ(v[static_cast<size_t>(r * o.dim(1) + i)], xs[static_cast<size_t>(r * 2 * n + col + i)]);
      col += o.dim(1);
    }
    EXPECT_EQ(col, 2 * n);
  }
}

TEST_P(FusedOps, TwoInputSiluAndMulMatchesOnBothBackends) {
  const int64_t rows = 2, n = GetParam();
  auto g = std::make_shared<graph::Graph>();
  const int t = g->add_symbol("t");
  auto x = g->add_input("x", DType::kF32, {graph::Dim::sym(t), graph::Dim::fixed(2 * n)});
  auto parts = g->add_node("split_columns", {x}, {{"sizes", std::vector<int64_t>{n, n - 1, 1}}});
  // The two-input form (gate and up as separate tensors) against silu then mul.
  g->mark_output("y", g->add_node("silu_and_mul", {parts[0], parts[0]}, {})[0]);
  g->mark_output("z", g->add_node("mul", {g->add_node("silu", {parts[0]}, {})[0], parts[0]}, {})[0]);
  const Tensor in = Tensor::from_f32(random_values(static_cast<size_t>(rows * 2 * n), 11), {rows, 2 * n});
  for (const Backend* b : {&reference_backend(), &cpu_backend()}) {
    const std::vector<Tensor> out = run(g, *b, in);
    const std::vector<float> y = to_vec(out[0]), z = to_vec(out[1]);
    for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], z[i], 1e-6f * (1.0f + std::fabs(z[i]))) << b->name();
  }
}

INSTANTIATE_TEST_SUITE_P(Widths, FusedOps, ::testing::Values<int64_t>(2, 7, 16, 33, 131));

TEST(FusedOpsSchema, BadShapesAreRejectedWithTheReason) {
  graph::Graph g;
  auto x = g.add_input("x", DType::kF32, {graph::Dim::fixed(2), graph::Dim::fixed(5)});
  try {
    g.add_node("silu_and_mul", {x}, {});
    FAIL() << "odd gate_up accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("even"), std::string::npos) << e.what();
  }
  try {
    g.add_node("split_columns", {x}, {{"sizes", std::vector<int64_t>{1, 1, 1}}});
    FAIL() << "sizes not covering the row accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sum of sizes"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace loom::runtime
