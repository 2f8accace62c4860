// Dequantization with llama.cpp's arithmetic (dequantize_row_*), and quantizers
// following its reference ones (quantize_row_*_ref: make_qkx2_quants for the
// scale/min types, make_qx_quants for Q6_K), written here from their semantics.
#include "loom/core/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "loom/core/status.h"
#include "loom/core/thread_pool.h"

namespace loom {
namespace {

float h2f(uint16_t h) { return f16_to_f32(h); }
uint16_t f2h(float f) { return f32_to_f16(f); }
// Round half to even, as llama.cpp's nearest_int (a float-bits trick) does.
int nearest_int(float v) { return static_cast<int>(std::nearbyint(v)); }

void check_blocks(DType type, int64_t n, const char* what) {
  if (!dtype_is_quantized(type))
    throw Error(invalid_argument(std::string(what) + ": " + std::string(dtype_name(type)) + " is not a quantized type"));
  if (n % dtype_block_elements(type) != 0)
    throw Error(invalid_argument(std::string(what) + ": " + std::to_string(n) + " elements are not whole " +
                                 std::string(dtype_name(type)) + " blocks of " +
                                 std::to_string(dtype_block_elements(type))));
}

// ── dequantization ──

void dequant_q8_0(const BlockQ8_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = h2f(b[i].d);
    for (int j = 0; j < kQK8_0; ++j) y[i * kQK8_0 + j] = static_cast<float>(b[i].qs[j]) * d;
  }
}

void dequant_q4_0(const BlockQ4_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = h2f(b[i].d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      y[i * kQK4_0 + j] = static_cast<float>((b[i].qs[j] & 0x0F) - 8) * d;
      y[i * kQK4_0 + j + 16] = static_cast<float>((b[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void dequant_q4_k(const BlockQ4_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = h2f(b[i].d), min = h2f(b[i].dmin);
    const uint8_t* q = b[i].qs;
    int is = 0;
    for (int j = 0; j < kQK_K; j += 64) {
      uint8_t sc, m;
      k_scale_min(is, b[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = min * m;
      k_scale_min(is + 1, b[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = min * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
      q += 32;
      is += 2;
    }
  }
}

void dequant_q5_k(const BlockQ5_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = h2f(b[i].d), min = h2f(b[i].dmin);
    const uint8_t* ql = b[i].qs;
    const uint8_t* qh = b[i].qh;
    int is = 0;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0; j < kQK_K; j += 64) {
      uint8_t sc, m;
      k_scale_min(is, b[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = min * m;
      k_scale_min(is + 1, b[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = min * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
      ql += 32;
      is += 2;
      u1 = static_cast<uint8_t>(u1 << 2);
      u2 = static_cast<uint8_t>(u2 << 2);
    }
  }
}

void dequant_q6_k(const BlockQ6_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = h2f(b[i].d);
    const uint8_t* ql = b[i].ql;
    const uint8_t* qh = b[i].qh;
    const int8_t* sc = b[i].scales;
    for (int n = 0; n < kQK_K; n += 128) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * sc[is] * static_cast<float>(q1);
        y[l + 32] = d * sc[is + 2] * static_cast<float>(q2);
        y[l + 64] = d * sc[is + 4] * static_cast<float>(q3);
        y[l + 96] = d * sc[is + 6] * static_cast<float>(q4);
      }
      y += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
  }
}

// ── quantization ──

void quant_q8_0(const float* x, BlockQ8_0* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK8_0) {
    float amax = 0;
    for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
    b[i].d = f2h(d);
    for (int j = 0; j < kQK8_0; ++j) b[i].qs[j] = static_cast<int8_t>(std::round(x[j] * id));
  }
}

void quant_q4_0(const float* x, BlockQ4_0* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK4_0) {
    float amax = 0, max = 0;
    for (int j = 0; j < kQK4_0; ++j)
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    const float d = max / -8.0f, id = d != 0 ? 1.0f / d : 0.0f;
    b[i].d = f2h(d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      const int x0 = std::min(15, static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f)));
      const int x1 = std::min(15, static_cast<int>(static_cast<int8_t>(x[j + 16] * id + 8.5f)));
      b[i].qs[j] = static_cast<uint8_t>(x0 | (x1 << 4));
    }
  }
}

// Scale and min for n values on [0, nmax] levels, minimising the weighted squared
// error over a sweep of candidate scales, each refined by least squares.
float make_qkx2_quants(int n, int nmax, const float* x, const float* w, uint8_t* L, float* the_min, uint8_t* Laux,
                       float rmin, float rdelta, int nstep) {
  float min = x[0], max = x[0], sum_w = w[0], sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    min = std::min(min, x[i]);
    max = std::max(max, x[i]);
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    std::fill(L, L + n, 0);
    *the_min = -min;
    return 0;
  }
  float iscale = nmax / (max - min), scale = 1 / iscale, best = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::clamp(nearest_int(iscale * (x[i] - min)), 0, nmax);
    L[i] = static_cast<uint8_t>(l);
    const float diff = scale * l + min - x[i];
    best += w[i] * diff * diff;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest_int(iscale * (x[i] - min)), 0, nmax);
      Laux[i] = static_cast<uint8_t>(l);
      sum_l += w[i] * l;
      sum_l2 += w[i] * l * l;
      sum_xl += w[i] * l * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D <= 0) continue;
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
    if (this_min > 0) {
      this_min = 0;
      this_scale = sum_xl / sum_l2;
    }
    float err = 0;
    for (int i = 0; i < n; ++i) {
      const float diff = this_scale * Laux[i] + this_min - x[i];
      err += w[i] * diff * diff;
    }
    if (err < best) {
      std::copy(Laux, Laux + n, L);
      best = err;
      scale = this_scale;
      min = this_min;
    }
  }
  *the_min = -min;
  return scale;
}

// Q4_K / Q5_K: eight sub-blocks of 32 with 6-bit scales and mins under two f16
// super-scales; nmax 15 or 31.
template <typename Block>
void quant_k_scale_min(const float* x, Block& b, int nmax, float rmin, float rdelta, int nstep, uint8_t* L) {
  float mins[8], scales[8], weights[32];
  uint8_t Laux[32];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xs[l]);
    scales[j] = make_qkx2_quants(32, nmax, xs, weights, L + 32 * j, &mins[j], Laux, rmin, rdelta, nstep);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  std::memset(b.scales, 0, sizeof(b.scales));
  for (int j = 0; j < 8; ++j) {
    const uint8_t ls = static_cast<uint8_t>(std::min(63, nearest_int(inv_scale * scales[j])));
    const uint8_t lm = static_cast<uint8_t>(std::min(63, nearest_int(inv_min * mins[j])));
    if (j < 4) {
      b.scales[j] = ls;
      b.scales[j + 4] = lm;
    } else {
      b.scales[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      b.scales[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      b.scales[j] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
  b.d = f2h(max_scale / 63.0f);
  b.dmin = f2h(max_min / 63.0f);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    k_scale_min(j, b.scales, &sc, &m);
    const float d = h2f(b.d) * sc;
    if (d == 0) continue;
    const float dm = h2f(b.dmin) * m;
    for (int ii = 0; ii < 32; ++ii)
      L[32 * j + ii] = static_cast<uint8_t>(std::clamp(nearest_int((x[32 * j + ii] + dm) / d), 0, nmax));
  }
}

void quant_q4_k(const float* x, BlockQ4_K* b, int64_t nb) {
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    quant_k_scale_min(x, b[i], 15, -1.0f, 0.1f, 20, L);
    uint8_t* q = b[i].qs;
    for (int j = 0; j < kQK_K; j += 64) {
      for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
      q += 32;
    }
  }
}

void quant_q5_k(const float* x, BlockQ5_K* b, int64_t nb) {
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    quant_k_scale_min(x, b[i], 31, -0.5f, 0.1f, 15, L);
    uint8_t* ql = b[i].qs;
    std::memset(b[i].qh, 0, sizeof(b[i].qh));
    uint8_t m1 = 1, m2 = 2;
    for (int n = 0; n < kQK_K; n += 64) {
      for (int j = 0; j < 32; ++j) {
        int l1 = L[n + j], l2 = L[n + j + 32];
        if (l1 > 15) { l1 -= 16; b[i].qh[j] |= m1; }
        if (l2 > 15) { l2 -= 16; b[i].qh[j] |= m2; }
        ql[j] = static_cast<uint8_t>(l1 | (l2 << 4));
      }
      m1 = static_cast<uint8_t>(m1 << 2);
      m2 = static_cast<uint8_t>(m2 << 2);
      ql += 32;
    }
  }
}

// A signed scale for n values on [-nmax, nmax - 1] levels, weighted by x², with a
// sweep of nearby scales (llama.cpp's make_qx_quants, rmse_type 1).
float make_qx_quants(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  if (amax < 1e-15f) {
    std::fill(L, L + n, 0);
    return 0;
  }
  float iscale = -nmax / max, sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  float scale = suml2 > 0 ? sumlx / suml2 : 0.0f, best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(nmax + 0.1f * is) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
      const float w = x[i] * x[i];
      sumlx += w * x[i] * l;
      suml2 += w * l * l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(nmax + std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1));
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

void quant_q6_k(const float* x, BlockQ6_K* b, int64_t nb) {
  int8_t L[kQK_K];
  float scales[kQK_K / 16];
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    float max_scale = 0, max_abs = 0;
    for (int ib = 0; ib < kQK_K / 16; ++ib) {
      scales[ib] = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
      if (std::fabs(scales[ib]) > max_abs) {
        max_abs = std::fabs(scales[ib]);
        max_scale = scales[ib];
      }
    }
    if (max_abs < 1e-15f) {
      std::memset(&b[i], 0, sizeof(BlockQ6_K));
      continue;
    }
    const float iscale = -128.0f / max_scale;
    b[i].d = f2h(1 / iscale);
    for (int ib = 0; ib < kQK_K / 16; ++ib)
      b[i].scales[ib] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[ib])));
    for (int j = 0; j < kQK_K / 16; ++j) {
      const float d = h2f(b[i].d) * b[i].scales[j];
      if (d == 0) continue;
      for (int ii = 0; ii < 16; ++ii)
        L[16 * j + ii] = static_cast<int8_t>(std::clamp(nearest_int(x[16 * j + ii] / d), -32, 31) + 32);
    }
    uint8_t* ql = b[i].ql;
    uint8_t* qh = b[i].qh;
    for (int j = 0; j < kQK_K; j += 128) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t q1 = L[j + l] & 0xF, q2 = L[j + l + 32] & 0xF, q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
        ql[l] = static_cast<uint8_t>(q1 | (q3 << 4));
        ql[l + 32] = static_cast<uint8_t>(q2 | (q4 << 4));
        qh[l] = static_cast<uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                                     ((L[j + l + 96] >> 4) << 6));
      }
      ql += 64;
      qh += 32;
    }
  }
}

}  // namespace

void dequantize_row(DType type, const void* blocks, float* out, int64_t n) {
  check_blocks(type, n, "dequantize_row");
  const int64_t nb = n / dtype_block_elements(type);
  switch (type) {
    case DType::kQ8_0: return dequant_q8_0(static_cast<const BlockQ8_0*>(blocks), out, nb);
    case DType::kQ4_0: return dequant_q4_0(static_cast<const BlockQ4_0*>(blocks), out, nb);
    case DType::kQ4_K: return dequant_q4_k(static_cast<const BlockQ4_K*>(blocks), out, nb);
    case DType::kQ5_K: return dequant_q5_k(static_cast<const BlockQ5_K*>(blocks), out, nb);
    case DType::kQ6_K: return dequant_q6_k(static_cast<const BlockQ6_K*>(blocks), out, nb);
    default: break;
  }
}

void quantize_row(DType type, const float* in, void* blocks, int64_t n) {
  check_blocks(type, n, "quantize_row");
  const int64_t nb = n / dtype_block_elements(type);
  switch (type) {
    case DType::kQ8_0: return quant_q8_0(in, static_cast<BlockQ8_0*>(blocks), nb);
    case DType::kQ4_0: return quant_q4_0(in, static_cast<BlockQ4_0*>(blocks), nb);
    case DType::kQ4_K: return quant_q4_k(in, static_cast<BlockQ4_K*>(blocks), nb);
    case DType::kQ5_K: return quant_q5_k(in, static_cast<BlockQ5_K*>(blocks), nb);
    case DType::kQ6_K: return quant_q6_k(in, static_cast<BlockQ6_K*>(blocks), nb);
    default: break;
  }
}

// Whole tensors: blocks are independent, so chunks of blocks go to the pool's
// threads (quantizing a 1B model's matrices is seconds of work, not minutes).
void convert_quantized(const void* src, DType src_type, void* dst, DType dst_type, int64_t n) {
  const DType q = dtype_is_quantized(src_type) ? src_type : dst_type;
  if (dtype_is_quantized(src_type) && dtype_is_quantized(dst_type) && src_type != dst_type)
    throw Error(unsupported("conversion " + std::string(dtype_name(src_type)) + " → " + std::string(dtype_name(dst_type)) +
                            ": requantizing would add a second rounding; convert from the float weights"));
  check_blocks(q, n, "convert");
  const int64_t blk = dtype_block_elements(q);
  const int64_t nb = n / blk;
  constexpr int64_t kChunkBlocks = 64;
  ThreadPool::global().parallel_for((nb + kChunkBlocks - 1) / kChunkBlocks, [&](int64_t b0, int64_t b1, int) {
    std::vector<float> f(static_cast<size_t>(kChunkBlocks * blk));
    for (int64_t c = b0; c < b1; ++c) {
      const int64_t first = c * kChunkBlocks, count = std::min(kChunkBlocks, nb - first);
      const int64_t elems = count * blk;
      if (dtype_is_quantized(src_type)) {
        const auto* s = static_cast<const uint8_t*>(src) + dtype_bytes(src_type, first * blk);
        if (dst_type == DType::kF32) {
          dequantize_row(src_type, s, static_cast<float*>(dst) + first * blk, elems);
        } else {
          dequantize_row(src_type, s, f.data(), elems);
          convert_elements(f.data(), DType::kF32, static_cast<uint8_t*>(dst) + dtype_bytes(dst_type, first * blk), dst_type,
                           static_cast<size_t>(elems));
        }
      } else {
        const float* x = f.data();
        if (src_type == DType::kF32)
          x = static_cast<const float*>(src) + first * blk;
        else
          convert_elements(static_cast<const uint8_t*>(src) + dtype_bytes(src_type, first * blk), src_type, f.data(),
                           DType::kF32, static_cast<size_t>(elems));
        quantize_row(dst_type, x, static_cast<uint8_t*>(dst) + dtype_bytes(dst_type, first * blk), elems);
      }
    }
  });
}

}  // namespace loom
