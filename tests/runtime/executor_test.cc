#include "loom/runtime/executor.h"

#include <gtest/gtest.h>

#include <cmath>

#include "loom/graph/builder.h"

namespace loom::runtime {
namespace {

using graph::Dim;

// x → silu → add(x) → silu → mul(x) …: a chain whose intermediates die young.
std::shared_ptr<graph::Graph> chain_graph(int length) {
  auto g = std::make_shared<graph::Graph>();
  const int t = g->add_symbol("tokens");
  graph::ValueId x = g->add_input("x", DType::kF32, {Dim::sym(t), Dim::fixed(64)});
  graph::ValueId h = x;
  for (int i = 0; i < length; ++i) {
    h = g->add_node("silu", {h}, {}).at(0);
    h = g->add_node(i % 2 ? "mul" : "add", {h, x}, {}).at(0);
  }
  g->mark_output("y", h);
  return g;
}

float silu(float v) { return v / (1.0f + std::exp(-v)); }

TEST(Executor, RunsAChainAndReusesArenaBlocks) {
  auto g = chain_graph(20);
  for (const Backend* b : {&cpu_backend(), &reference_backend()}) {
    auto ex = Executor::create(g, *b).value();
    std::vector<float> xs(3 * 64);
    for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(static_cast<float>(i)) * 0.5f;
    std::vector<Tensor> out;
    ASSERT_TRUE(ex->run({{"x", Tensor::from_f32(xs, {3, 64})}}, nullptr, &out).ok());
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].shape(), (Shape{3, 64}));
    for (size_t i = 0; i < xs.size(); ++i) {
      float h = xs[i];
      for (int k = 0; k < 20; ++k) h = k % 2 ? silu(h) * xs[i] : silu(h) + xs[i];
      ASSERT_NEAR(out[0].data_as<float>()[i], h, 1e-5f) << b->name() << " element " << i;
    }
    // 40 intermediates of 768 bytes each, but at most a few are alive at once.
    EXPECT_LE(ex->arena_bytes(), 4u * 3 * 64 * 4) << b->name();
  }
}

TEST(Executor, InputErrorsAreNamed) {
  auto ex = Executor::create(chain_graph(1), cpu_backend()).value();
  std::vector<Tensor> out;
  Status missing = ex->run({}, nullptr, &out);
  EXPECT_NE(missing.message().find("'x'"), std::string::npos) << missing.message();
  Status dtype = ex->run({{"x", Tensor::zeros(DType::kI32, {2, 64})}}, nullptr, &out);
  EXPECT_NE(dtype.message().find("F32"), std::string::npos) << dtype.message();
  Status shape = ex->run({{"x", Tensor::zeros(DType::kF32, {2, 63})}}, nullptr, &out);
  EXPECT_NE(shape.message().find("64"), std::string::npos) << shape.message();
}

TEST(Executor, AttentionWithoutKvStoreIsAnError) {
  auto g = std::make_shared<graph::Graph>();
  graph::ValueId q = g->add_input("q", DType::kF32, {Dim::fixed(2), Dim::fixed(8)});
  graph::ValueId y = g->add_node("attention", {q, q, q},
                                 {{"layer", int64_t{0}}, {"num_q_heads", int64_t{2}}, {"num_kv_heads", int64_t{2}},
                                  {"head_dim", int64_t{4}}, {"scale", 0.5}}).at(0);
  g->mark_output("y", y);
  auto ex = Executor::create(g, cpu_backend()).value();
  std::vector<Tensor> out;
  Status s = ex->run({{"q", Tensor::zeros(DType::kF32, {2, 8})}}, nullptr, &out);
  EXPECT_EQ(s.code(), ErrorCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("KV store"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace loom::runtime
