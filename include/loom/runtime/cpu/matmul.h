// The linear layer y = x · Wᵀ + b (Hugging Face nn.Linear: W is [N, K] row-major),
// f32 activations in and out, F32 / BF16 / F16 weights packed once at load time.
//
// Numerics: every output is one f32 accumulator updated by fused multiply-adds in
// increasing k order, then the bias is added. Weights are widened exactly to f32
// (bf16 and f16 values are kept, not re-rounded), x stays f32. Because the order
// never depends on M, the row's position, strides, thread count or blocking, a row
// of y is bitwise the same whether it is computed alone or in a batch — which is
// what makes batched greedy decoding reproduce single-request decoding. The
// SCALAR, AVX2 and AVX512 paths agree bitwise. With matmul precision "medium" or
// "auto" (below) on a CPU with fast bf16 dot products, or with AVX512_BF16 forced
// (cpu_features.h), x is rounded to bf16 for bf16 weights and products of bf16
// pairs are accumulated in f32 (vdpbf16ps): results differ at bf16 precision, but
// are again the same for a row whatever M, its position or the thread count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "loom/core/dtype.h"
#include "loom/core/status.h"
#include "loom/core/tensor.h"
#include "loom/core/thread_pool.h"

namespace loom::cpu {

// How PackedLinear::pack keeps quantized rows. kAuto: the layout this CPU's
// decode kernels read fastest (Q4_0, Q4_K, Q6_K and Q8_0 of a file's mapping interleaved
// in groups of 8 rows on every CPU with AVX2, else rows as stored;
// set_auto_quant_layout below overrides it for a process). kRows: as stored,
// read in place. kInterleaved: Q4_0, Q4_K, Q6_K and Q8_0 in groups of 8 rows
// (runtime/cpu/qlayout.h), other types as stored. Every code path computes on
// either layout, bitwise the same.
enum class QuantLayout { kAuto, kRows, kInterleaved };

// What kAuto packs from now on in this process: kRows or kInterleaved on every CPU, or
// kAuto for the per-CPU choice (the default). For benchmarks comparing the layouts
// (`loom bench --quant-layout`); results are bitwise the same either way.
void set_auto_quant_layout(QuantLayout layout);
// "auto" | "rows" | "interleaved"; anything else is InvalidArgument naming the choices.
Result<QuantLayout> quant_layout_from_name(std::string_view name);

// The paths batched quantized calls (M ≥ 8) may take, in order: the row kernels, the
// AVX2 tiles, the AVX512-VNNI tiles, the AMX-INT8 tiles (runtime/cpu/qgemm.h).
enum class QuantGemm { kRows, kAvx2, kVnni, kAmx };
// The best path batched calls may take in this process (default kAmx: all allowed,
// each used where the CPU has it): tests and benchmarks run each (`loom bench
// --quant-gemm`, matmul_bench). Results are bitwise the same on every path.
void set_quantized_gemm_limit(QuantGemm limit);
// "amx" | "vnni" | "avx2" | "rows"; anything else is InvalidArgument naming the choices.
Result<QuantGemm> quant_gemm_from_name(std::string_view name);

// Weights in the kernels' layout: panels of 32 output rows, k-major inside a
// panel (F32: [K][32]; F16: [K][32]; BF16: [ceil(K/2)][32][2], the pair order
// vdpbf16ps reads), N padded to a multiple of 32 with zeros. The float layout does
// not depend on the CPU; the quantized one may (QuantLayout), and every code
// path reads both, so a PackedLinear works under every code path. Copies share
// the (immutable) packed storage.
class PackedLinear {
 public:
  static constexpr int kPanel = 32;  // output rows per panel

  PackedLinear() = default;

  // weight [N, K] F32|BF16|F16 with N, K ≥ 1; bias [N] (any float dtype) or null.
  // F16 weights stay F16 (widened exactly at run time); the bias is stored as F32.
  // Quantized weights (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K; K a multiple of the block)
  // keep their rows as stored, one after another (quant_row); linear() then
  // quantizes x per block to int8 and computes integer dot products per block
  // pair with f32 accumulation (runtime/cpu/qdot_kernels.h states the order),
  // again bitwise the same for a row whatever M, its position or the thread count.
  // Interleaved Q4_0 and Q4_K rows are a copy (the source's file pages are released).
  // storage, when given, receives the copy (layout_for(weight).data_bytes bytes,
  // 64-byte aligned): a cache file's mapping (runtime/packed_weights_cache.h);
  // else it is allocated.
  static Result<PackedLinear> pack(const Tensor& weight, const Tensor* bias,
                                   QuantLayout layout = QuantLayout::kAuto, std::shared_ptr<void> storage = nullptr);

  // What pack() makes of a weight: a copy of data_bytes bytes in panels (float
  // dtypes) or groups of group_rows rows (quantized), or nothing (quantized rows
  // read in place). Validates the weight as pack() does.
  struct Layout {
    int group_rows = 1;
    size_t panel_bytes = 0, row_bytes = 0;
    size_t data_bytes = 0;  // 0: read in place
    bool copied() const { return data_bytes > 0; }
  };
  static Result<Layout> layout_for(const Tensor& weight, QuantLayout layout = QuantLayout::kAuto);
  // A PackedLinear over bytes pack() laid out earlier for this weight (from the
  // packed-weights cache, runtime/packed_weights_cache.h); InvalidArgument when
  // layout is not the one pack() makes of it.
  static Result<PackedLinear> from_packed(const Tensor& weight, const Tensor* bias, const Layout& layout,
                                          std::shared_ptr<void> packed);
  // The copy pack() made (layout_for(weight).data_bytes bytes), or null when the
  // weight is read in place.
  const uint8_t* packed_copy() const { return copied_ ? static_cast<const uint8_t*>(data_.get()) : nullptr; }

  int64_t in_features() const { return k_; }
  int64_t out_features() const { return n_; }
  DType weight_dtype() const { return dtype_; }
  bool has_bias() const { return bias_ != nullptr; }
  bool empty() const { return data_ == nullptr; }
  // Bytes held by the packed weights and bias (what a loaded model costs); quantized
  // rows read in place count 0 here (their tensor holds them), interleaved ones count.
  size_t packed_bytes() const { return bytes_; }

  // The weight bytes linear() streams on every call, from streamed_weights(): the panels,
  // or the quantized rows and groups (the bias not included). `loom bench` reads them
  // with a plain loop to measure the read bound on the very bytes decode reads.
  const uint8_t* streamed_weights() const { return static_cast<const uint8_t*>(data_.get()); }
  size_t streamed_weight_bytes() const;

  // For the kernels (src/runtime/cpu/): panel p starts at panel_stride_bytes() * p.
  int64_t num_panels() const { return (n_ + kPanel - 1) / kPanel; }
  size_t panel_stride_bytes() const { return panel_bytes_; }
  const uint8_t* panel(int64_t p) const { return static_cast<const uint8_t*>(data_.get()) + panel_bytes_ * p; }
  // Quantized weights: row n's blocks at quant_row(n), quant_row_bytes() apart,
  // for rows stored as rows: every row where quant_group_rows() is 1, else the
  // rows past the last whole group. Group g of quant_group_rows() rows takes
  // the bytes its rows would, from quant_row(g * quant_group_rows()).
  int quant_group_rows() const { return group_rows_; }
  size_t quant_row_bytes() const { return row_bytes_; }
  const uint8_t* quant_row(int64_t n) const {
    return static_cast<const uint8_t*>(data_.get()) + row_bytes_ * static_cast<size_t>(n);
  }
  // num_panels() * kPanel floats, zero past N; null without bias.
  const float* bias() const { return static_cast<const float*>(bias_.get()); }

  // Weight row n (0 ≤ n < N) as f32, exactly the source row widened or dequantized:
  // a tied embedding looks its rows up here once the source pages are released.
  void weight_row(int64_t n, float* out) const;

 private:
  void adopt_layout(const Tensor& weight, const Tensor* bias, const Layout& layout);

  int64_t n_ = 0;
  int64_t k_ = 0;
  DType dtype_ = DType::kF32;
  size_t panel_bytes_ = 0;
  size_t row_bytes_ = 0;  // quantized weights only
  int group_rows_ = 1;    // quantized weights: 1 (rows as stored) or 8 (Q4_0, Q4_K interleaved)
  size_t bytes_ = 0;
  bool copied_ = false;  // data_ is a copy in pack()'s layout, not the weight's own bytes
  std::shared_ptr<void> data_;
  std::shared_ptr<void> bias_;
};

// y[M, N] = x[M, K] · Wᵀ + b on the active code path (cpu_features.h), N split
// across the pool's threads. x and y are f32 row-major with row strides in
// elements (x_stride ≥ K, y_stride ≥ N) and must not overlap. M = 0 does nothing.
// Throws loom::Error (InvalidArgument) for bad strides or an empty PackedLinear.
void linear(const float* x, int64_t M, int64_t x_stride, const PackedLinear& w, float* y, int64_t y_stride,
            ThreadPool& pool = ThreadPool::global());

// How linear() may compute with bf16 weights, after PyTorch's
// torch.set_float32_matmul_precision, process-wide as there:
//   highest            x stays f32, weights are widened exactly: f32 products;
//   high               the same here (loom has no TF32 / bf16x3 kernels, and "high"
//                      falls back to "highest" where those are missing);
//   medium             where the CPU has fast bf16 dot products (AVX512_BF16 at
//                      vfmadd's rate: CpuFeatures::fast_bf16_dot), x is
//                      rounded to bf16 (nearest even) and each output accumulates
//                      products of bf16 pairs in f32, as a bf16 model's matmuls run
//                      upstream; elsewhere the same as highest;
//   auto (default)     the fastest path this CPU has whose logits stay as close to
//                      f32 as PyTorch's own bf16 forward (tests/models/parity_test.cc):
//                      medium's bf16 dot products where they are fast, for every
//                      shape and M (on a Zen 4, 2 threads: as fast at M = 1, where
//                      the weights' reads bound both, 1.9x at M = 512; a rule per M
//                      would break a row's bitwise equality alone and in a batch),
//                      else highest's exact products.
// F32 and F16 weights always compute as highest. The process starts at
// LOOM_MATMUL_PRECISION (a name below) when set, else auto. Set it before starting
// work: a change while linear() runs on another thread takes effect on its next call.
enum class MatmulPrecision { kHighest, kHigh, kMedium, kAuto };
void set_matmul_precision(MatmulPrecision precision);
MatmulPrecision matmul_precision();
const char* matmul_precision_name(MatmulPrecision precision);
// "highest" | "high" | "medium" | "auto"; anything else is InvalidArgument naming the choices.
Result<MatmulPrecision> matmul_precision_from_name(std::string_view name);
// Sets the precision for a scope and restores the previous one (tests, benchmarks).
class ScopedMatmulPrecision {
 public:
  explicit ScopedMatmulPrecision(MatmulPrecision precision) : previous_(matmul_precision()) {
    set_matmul_precision(precision);
  }
  ~ScopedMatmulPrecision() { set_matmul_precision(previous_); }
  ScopedMatmulPrecision(const ScopedMatmulPrecision&) = delete;
  ScopedMatmulPrecision& operator=(const ScopedMatmulPrecision&) = delete;

 private:
  MatmulPrecision previous_;
};
// Whether linear() now rounds x to bf16 for bf16 weights (medium or auto on a CPU with
// fast bf16 dot products, or the AVX512_BF16 path forced).
bool bf16_dot_products_active();

// Scalar reference with double accumulation, straight from the [N, K] weight
// tensor (F32|BF16|F16, or a quantized type: rows dequantized, x kept f32) and optional [N] bias; x is [M, K], y is [M, N], dense.
// Throws loom::Error for shapes or dtypes that do not fit.
void linear_ref(const float* x, int64_t M, int64_t K, const Tensor& weight, const Tensor* bias, float* y);

}  // namespace loom::cpu
