#include <algorithm>
#include <chrono>
#include <string>
#include <unordered_map>
#include <vector>

#include "baselines/matmul_baselines.h"

#if defined(LOOM_WITH_ONEDNN)
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace loom::cpu::baseline {

#if defined(LOOM_WITH_ONEDNN)

struct OnednnLinear::Impl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  int64_t n = 0, k = 0;
  bool bf16 = false;
  dnnl::memory weights;  // in the blocked layout chosen for M = kPackM
  dnnl::memory bias;     // f32 [1, N] or empty
  std::map<int64_t, dnnl::matmul> primitives;
  std::vector<uint16_t> x_bf16;

  static constexpr int64_t kPackM = 512;

  dnnl::matmul::primitive_desc make_pd(int64_t M, const dnnl::memory::desc& w_md) const {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    const dnnl::memory::desc src({M, k}, bf16 ? dt::bf16 : dt::f32, tag::ab);
    const dnnl::memory::desc dst({M, n}, dt::f32, tag::ab);
    if (bias.get(true) != nullptr) {
      const dnnl::memory::desc b_md({1, n}, dt::f32, tag::ab);
      return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, w_md, b_md, dst), engine);
    }
    return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, w_md, dst), engine);
  }
};

bool OnednnLinear::available() { return true; }

OnednnLinear::~OnednnLinear() = default;

Result<std::unique_ptr<OnednnLinear>> OnednnLinear::create(const Tensor& weight, const Tensor* bias) {
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  if (!weight.defined() || weight.rank() != 2 ||
      (weight.dtype() != DType::kF32 && weight.dtype() != DType::kBF16)) {
    return invalid_argument("OnednnLinear: weight must be an F32 or BF16 [N, K] tensor");
  }
  std::unique_ptr<OnednnLinear> out(new OnednnLinear());
  out->impl_ = std::make_unique<Impl>();
  Impl& im = *out->impl_;
  im.n = weight.dim(0);
  im.k = weight.dim(1);
  im.bf16 = weight.dtype() == DType::kBF16;
  try {
    const dt wdt = im.bf16 ? dt::bf16 : dt::f32;
    if (bias) {
      if (!bias->defined() || bias->numel() != im.n) return invalid_argument("OnednnLinear: bias must be [N]");
      im.bias = dnnl::memory({{1, im.n}, dt::f32, tag::ab}, im.engine);
      const std::vector<float> b = bias->to_f32_vector();
      std::copy(b.begin(), b.end(), static_cast<float*>(im.bias.get_data_handle()));
    }
    // W [N, K] row-major is the K×N matrix in "ba" order.
    const dnnl::memory::desc user_md({im.k, im.n}, wdt, tag::ba);
    dnnl::memory user(user_md, im.engine, weight.data());
    const dnnl::memory::desc any_md({im.k, im.n}, wdt, tag::any);
    auto pd = im.make_pd(Impl::kPackM, any_md);
    im.weights = dnnl::memory(pd.weights_desc(), im.engine);
    dnnl::reorder(user, im.weights).execute(im.stream, user, im.weights);
    im.stream.wait();
  } catch (const dnnl::error& e) {
    // oneDNN implements bf16 matmuls only from AVX-512 on (Zen 3 and older, and
    // Alder Lake, have none): say so instead of reporting a failure.
    if (e.status == dnnl_unimplemented) {
      return unsupported(std::string("OnednnLinear: this oneDNN has no ") + (im.bf16 ? "bf16" : "f32") +
                         " matmul for this CPU" + (im.bf16 ? " (it needs AVX-512)" : ""));
    }
    return internal_error(std::string("OnednnLinear: ") + e.what());
  }
  return out;
}

void OnednnLinear::run(const float* x, int64_t M, float* y) {
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  Impl& im = *impl_;
  auto it = im.primitives.find(M);
  if (it == im.primitives.end()) {
    auto pd = im.make_pd(M, im.weights.get_desc());
    it = im.primitives.emplace(M, dnnl::matmul(pd)).first;
  }
  const void* src = x;
  if (im.bf16) {
    im.x_bf16.resize(static_cast<size_t>(M * im.k));
    for (int64_t i = 0; i < M * im.k; ++i) im.x_bf16[i] = f32_to_bf16(x[i]);
    src = im.x_bf16.data();
  }
  dnnl::memory src_m({{M, im.k}, im.bf16 ? dt::bf16 : dt::f32, tag::ab}, im.engine, const_cast<void*>(src));
  dnnl::memory dst_m({{M, im.n}, dt::f32, tag::ab}, im.engine, y);
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, src_m}, {DNNL_ARG_WEIGHTS, im.weights}, {DNNL_ARG_DST, dst_m}};
  if (im.bias.get(true) != nullptr) args.emplace(DNNL_ARG_BIAS, im.bias);
  it->second.execute(im.stream, args);
  im.stream.wait();
}

#else

struct OnednnLinear::Impl {};
bool OnednnLinear::available() { return false; }
OnednnLinear::~OnednnLinear() = default;
Result<std::unique_ptr<OnednnLinear>> OnednnLinear::create(const Tensor&, const Tensor*) {
  return unsupported("OnednnLinear: loom was built without oneDNN (LOOM_WITH_ONEDNN=OFF)");
}
void OnednnLinear::run(const float*, int64_t, float*) {}

#endif

}  // namespace loom::cpu::baseline

namespace loom::cpu {

Result<double> measure_onednn_matmul_gflops(DType weight_dtype, int64_t M, int64_t N, int64_t K, int repeats) {
  using Clock = std::chrono::steady_clock;
  if (!baseline::OnednnLinear::available()) return unsupported("oneDNN matmul: loom was built without oneDNN");
  if (weight_dtype != DType::kF32 && weight_dtype != DType::kBF16)
    return invalid_argument("oneDNN matmul bound: weights must be F32 or BF16");
  if (M < 1 || N < 1 || K < 1) return invalid_argument("oneDNN matmul bound: M, N, K must be ≥ 1");
  Tensor w = Tensor::empty(weight_dtype, {N, K});
  if (weight_dtype == DType::kF32) {
    float* p = w.data_as<float>();
    for (int64_t i = 0; i < N * K; ++i) p[i] = static_cast<float>((i * 7919) % 1000) * 1e-3f - 0.5f;
  } else {
    uint16_t* p = static_cast<uint16_t*>(w.data());
    for (int64_t i = 0; i < N * K; ++i) p[i] = f32_to_bf16(static_cast<float>((i * 7919) % 1000) * 1e-3f - 0.5f);
  }
  LOOM_ASSIGN_OR_RETURN(auto lin, baseline::OnednnLinear::create(w, nullptr));
  std::vector<float> x(static_cast<size_t>(M * K), 0.25f), y(static_cast<size_t>(M * N));
  double best = 0.0;
  for (int pass = 0; pass <= repeats; ++pass) {
    const auto t0 = Clock::now();
    lin->run(x.data(), M, y.data());
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (pass > 0 && s > 0) best = std::max(best, 2.0 * static_cast<double>(M) * N * K / s / 1e9);
  }
  return best;
}

}  // namespace loom::cpu
