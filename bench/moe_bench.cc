// The grouped MoE kernel (runtime/cpu/moe.h) against running the same block one
// token at a time, which reads each chosen expert's weights once per token
// instead of once per step. Sizes: a Mixtral-shaped block scaled down (H 1024,
// I 2816, 8 experts, top-2, bf16 weights: 2 × 66 MB of experts).
//   build/moe_bench --benchmark_filter=Moe
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "loom/runtime/cpu/moe.h"

namespace loom::cpu {
namespace {

constexpr int64_t kH = 1024, kI = 2816, kE = 8;

Tensor random_bf16(Shape shape, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (float& f : v) f = d(rng);
  return Tensor::from_f32(v, shape).to(DType::kBF16);
}

const PackedMoe& packed() {
  static const PackedMoe p = PackedMoe::pack(random_bf16({kE, kH}, 1, 0.1f), random_bf16({kE, 2 * kI, kH}, 2, 0.03f),
                                             random_bf16({kE, kH, kI}, 3, 0.02f))
                                 .value();
  return p;
}

std::vector<float> inputs(int64_t tokens) {
  std::mt19937 rng(4);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(tokens * kH));
  for (float& f : x) f = d(rng);
  return x;
}

void BM_MoeGrouped(benchmark::State& state) {
  const int64_t t = state.range(0);
  const std::vector<float> x = inputs(t);
  std::vector<float> y(x.size());
  MoeParams p;
  const PackedMoe& w = packed();  // packed once, outside the timing
  for (auto _ : state) moe(x.data(), t, w, p, nullptr, y.data());
  state.SetItemsProcessed(state.iterations() * t);
}

void BM_MoePerToken(benchmark::State& state) {
  const int64_t t = state.range(0);
  const std::vector<float> x = inputs(t);
  std::vector<float> y(x.size());
  MoeParams p;
  const PackedMoe& w = packed();
  for (auto _ : state)
    for (int64_t i = 0; i < t; ++i) moe(x.data() + i * kH, 1, w, p, nullptr, y.data() + i * kH);
  state.SetItemsProcessed(state.iterations() * t);
}

BENCHMARK(BM_MoeGrouped)->Arg(1)->Arg(8)->Arg(32)->Arg(128)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_MoePerToken)->Arg(1)->Arg(8)->Arg(32)->Arg(128)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace loom::cpu

BENCHMARK_MAIN();
