// The external_call op: a graph calling a registered function by key, in both
// backends; the weight it receives is f32 with the norm's offset applied; what
// is not registered, or registered differently, is an error naming the key.
#include <gtest/gtest.h>

#include <cmath>

#include "loom/graph/external_call_abi.h"
#include "loom/graph/external_functions.h"
#include "loom/runtime/executor.h"

namespace loom::runtime {
namespace {

using graph::Dim;

extern "C" void scale_by_weight(const float* x, const float* w, float* y, int64_t rows, int64_t cols, float eps) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = x[r * cols + c] * w[c] + eps;
}

extern "C" void gate_times_up(const float* gate, const float* up, float* y, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows * cols; ++i) y[i] = gate[i] * up[i];
}

std::shared_ptr<graph::Graph> norm_call(const std::string& callee, const std::string& signature) {
  auto g = std::make_shared<graph::Graph>();
  const int t = g->add_symbol("tokens");
  graph::ValueId x = g->add_input("x", DType::kF32, {Dim::sym(t), Dim::fixed(3)});
  graph::ValueId w = g->add_parameter("w", Tensor::from_f32({1.0f, 2.0f, -1.0f}, {3}).to(DType::kBF16));
  g->mark_output("y", g->add_node("external_call", {x, w},
                                  {{"callee", callee}, {"signature", signature}, {"eps", 0.5}, {"weight_offset", 1.0}})
                          .at(0));
  return g;
}

TEST(ExternalCall, CallsTheRegisteredFunctionWithAnF32WeightAndItsOffset) {
  ASSERT_TRUE(graph::register_external_function(
                  {"test:scale_by_weight", LOOM_CALL_RMS_NORM_F32_V1, reinterpret_cast<void (*)(void)>(scale_by_weight), nullptr})
                  .ok());
  auto g = norm_call("test:scale_by_weight", LOOM_CALL_RMS_NORM_F32_V1);
  for (const Backend* b : {&cpu_backend(), &reference_backend()}) {
    auto ex = Executor::create(g, *b).value();
    std::vector<Tensor> out;
    ASSERT_TRUE(ex->run({{"x", Tensor::from_f32({1, 1, 1, 2, 3, 4}, {2, 3})}}, nullptr, &out).ok());
    const std::vector<float> y = out[0].to_f32_vector();
    const std::vector<float> want = {2.5f, 3.5f, 0.5f, 4.5f, 9.5f, 0.5f};  // x·(w+1) + eps
    ASSERT_EQ(y.size(), want.size());
    for (size_t i = 0; i < y.size(); ++i) EXPECT_FLOAT_EQ(y[i], want[i]) << b->name() << " " << i;
  }
}

TEST(ExternalCall, TwoInputConventionGetsBothTensors) {
  ASSERT_TRUE(graph::register_external_function(
                  {"test:gate_times_up", LOOM_CALL_SILU_AND_MUL_F32_V1, reinterpret_cast<void (*)(void)>(gate_times_up), nullptr})
                  .ok());
  auto g = std::make_shared<graph::Graph>();
  const int t = g->add_symbol("tokens");
  graph::ValueId a = g->add_input("a", DType::kF32, {Dim::sym(t), Dim::fixed(2)});
  graph::ValueId c = g->add_input("c", DType::kF32, {Dim::sym(t), Dim::fixed(2)});
  g->mark_output("y", g->add_node("external_call", {a, c},
                                  {{"callee", std::string("test:gate_times_up")},
                                   {"signature", std::string(LOOM_CALL_SILU_AND_MUL_F32_V1)}})
                          .at(0));
  auto ex = Executor::create(g, cpu_backend()).value();
  std::vector<Tensor> out;
  ASSERT_TRUE(ex->run({{"a", Tensor::from_f32({1, 2, 3, 4}, {2, 2})}, {"c", Tensor::from_f32({5, 6, 7, 8}, {2, 2})}},
                      nullptr, &out)
                  .ok());
  EXPECT_EQ(out[0].to_f32_vector(), (std::vector<float>{5, 12, 21, 32}));
}

TEST(ExternalCall, ErrorsNameTheKeyOrTheConvention) {
  auto missing = Executor::create(norm_call("test:never_registered", LOOM_CALL_RMS_NORM_F32_V1), cpu_backend());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("test:never_registered"), std::string::npos) << missing.status().message();

  EXPECT_THROW(norm_call("test:scale_by_weight", "acme.frobnicate.v7"), Error);  // schema refuses the convention

  Status unknown = graph::register_external_function(
      {"test:odd", "acme.frobnicate.v7", reinterpret_cast<void (*)(void)>(gate_times_up), nullptr});
  EXPECT_EQ(unknown.code(), ErrorCode::kUnsupported);
  Status null_entry = graph::register_external_function({"test:null", LOOM_CALL_SILU_AND_MUL_F32_V1, nullptr, nullptr});
  EXPECT_FALSE(null_entry.ok());
  ASSERT_TRUE(graph::register_external_function(
                  {"test:scale_by_weight2", LOOM_CALL_RMS_NORM_F32_V1, reinterpret_cast<void (*)(void)>(scale_by_weight), nullptr})
                  .ok());
  Status rebound = graph::register_external_function(
      {"test:scale_by_weight2", LOOM_CALL_RMS_NORM_F32_V1, reinterpret_cast<void (*)(void)>(gate_times_up), nullptr});
  EXPECT_NE(rebound.message().find("test:scale_by_weight2"), std::string::npos) << rebound.message();
}

}  // namespace
}  // namespace loom::runtime
