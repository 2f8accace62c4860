// Q8_0 and Q4_0 row codecs, the activation blocks, the dispatch by DType and the
// quantized half of convert_elements. The K types live in quantize_k.cc.
#include "loom/core/quantize.h"

#include "loom/core/thread_pool.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "loom/core/status.h"
#include "core/quantize_k.h"

namespace loom {
namespace {

int64_t checked_blocks(DType type, int64_t n, const char* what) {
  if (!dtype_is_quantized(type)) {
    throw Error(invalid_argument(std::string(what) + ": " + std::string(dtype_name(type)) + " is not a quantized type"));
  }
  const int64_t block = dtype_block_elements(type);
  if (n < 0 || n % block != 0) {
    throw Error(invalid_argument(std::string(what) + ": " + std::to_string(n) + " elements is not a multiple of " +
                                 std::string(dtype_name(type)) + "'s block of " + std::to_string(block)));
  }
  return n / block;
}

void dequantize_q8_0(const BlockQ8_0* x, float* y, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, y += 32) {
    const float d = f16_to_f32(x[b].d);
    for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(x[b].qs[j]) * d;
  }
}

void dequantize_q4_0(const BlockQ4_0* x, float* y, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, y += 32) {
    const float d = f16_to_f32(x[b].d);
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>((x[b].qs[j] & 0xF) - 8) * d;
      y[j + 16] = static_cast<float>((x[b].qs[j] >> 4) - 8) * d;
    }
  }
}

// q = nearest-even(x / d), d = max|x| / 127; the scale and its use stay f32.
float quantize_symmetric_127(const float* x, int n, int8_t* q) {
  float amax = 0.0f;
  for (int j = 0; j < n; ++j) amax = std::fmax(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 127.0f / amax : 0.0f;
  for (int j = 0; j < n; ++j) {
    const int v = detail::round_to_int(x[j] * id);
    q[j] = static_cast<int8_t>(std::max(-127, std::min(127, v)));
  }
  return d;
}

}  // namespace

namespace detail {

void quantize_q8_0_ref(const float* x, BlockQ8_0* y, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, x += 32) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = f32_to_f16(d);
    // llama.cpp rounds half away from zero here (roundf), with the unrounded d.
    for (int j = 0; j < 32; ++j) y[b].qs[j] = static_cast<int8_t>(std::round(x[j] * id));
  }
}

void quantize_q4_0_ref(const float* x, BlockQ4_0* y, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, x += 32) {
    // The signed value of largest magnitude maps to −8, so the grid's extra
    // negative step is spent on the side that needs it.
    float amax = 0.0f, extreme = 0.0f;
    for (int j = 0; j < 32; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        extreme = x[j];
      }
    }
    const float d = extreme / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = f32_to_f16(d);
    for (int j = 0; j < 16; ++j) {
      // Truncation of (v + 8.5) is round-half-up onto 0..16, then capped at 15.
      const int lo = std::min(15, static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f)));
      const int hi = std::min(15, static_cast<int>(static_cast<int8_t>(x[j + 16] * id + 8.5f)));
      y[b].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

}  // namespace detail

void dequantize_row_ref(DType type, const void* src, float* dst, int64_t n) {
  const int64_t nb = checked_blocks(type, n, "dequantize_row_ref");
  switch (type) {
    case DType::kQ8_0: return dequantize_q8_0(static_cast<const BlockQ8_0*>(src), dst, nb);
    case DType::kQ4_0: return dequantize_q4_0(static_cast<const BlockQ4_0*>(src), dst, nb);
    case DType::kQ4_K: return detail::dequantize_q4_k(static_cast<const BlockQ4_K*>(src), dst, nb);
    case DType::kQ5_K: return detail::dequantize_q5_k(static_cast<const BlockQ5_K*>(src), dst, nb);
    case DType::kQ6_K: return detail::dequantize_q6_k(static_cast<const BlockQ6_K*>(src), dst, nb);
    case DType::kQ4_1: return detail::dequantize_q4_1(static_cast<const BlockQ4_1*>(src), dst, nb);
    case DType::kQ5_0: return detail::dequantize_q5_0(static_cast<const BlockQ5_0*>(src), dst, nb);
    case DType::kQ5_1: return detail::dequantize_q5_1(static_cast<const BlockQ5_1*>(src), dst, nb);
    case DType::kIQ4_NL: return detail::dequantize_iq4_nl(static_cast<const BlockIQ4_NL*>(src), dst, nb);
    case DType::kMXFP4: return detail::dequantize_mxfp4(static_cast<const BlockMXFP4*>(src), dst, nb);
    case DType::kQ2_K: return detail::dequantize_q2_k(static_cast<const BlockQ2_K*>(src), dst, nb);
    case DType::kQ3_K: return detail::dequantize_q3_k(static_cast<const BlockQ3_K*>(src), dst, nb);
    case DType::kIQ4_XS: return detail::dequantize_iq4_xs(static_cast<const BlockIQ4_XS*>(src), dst, nb);
    case DType::kIQ2_XXS: return detail::dequantize_iq2_xxs(static_cast<const BlockIQ2_XXS*>(src), dst, nb);
    case DType::kIQ2_XS: return detail::dequantize_iq2_xs(static_cast<const BlockIQ2_XS*>(src), dst, nb);
    case DType::kIQ2_S: return detail::dequantize_iq2_s(static_cast<const BlockIQ2_S*>(src), dst, nb);
    case DType::kIQ3_XXS: return detail::dequantize_iq3_xxs(static_cast<const BlockIQ3_XXS*>(src), dst, nb);
    case DType::kIQ3_S: return detail::dequantize_iq3_s(static_cast<const BlockIQ3_S*>(src), dst, nb);
    case DType::kIQ1_S: return detail::dequantize_iq1_s(static_cast<const BlockIQ1_S*>(src), dst, nb);
    case DType::kIQ1_M: return detail::dequantize_iq1_m(static_cast<const BlockIQ1_M*>(src), dst, nb);
    case DType::kTQ1_0: return detail::dequantize_tq1_0(static_cast<const BlockTQ1_0*>(src), dst, nb);
    case DType::kTQ2_0: return detail::dequantize_tq2_0(static_cast<const BlockTQ2_0*>(src), dst, nb);
    default: break;
  }
  throw Error(unsupported("dequantize_row_ref: " + std::string(dtype_name(type))));
}

void quantize_row_ref(DType type, const float* src, void* dst, int64_t n) {
  const int64_t nb = checked_blocks(type, n, "quantize_row_ref");
  switch (type) {
    case DType::kQ8_0: return detail::quantize_q8_0(src, static_cast<BlockQ8_0*>(dst), nb);
    case DType::kQ4_0: return detail::quantize_q4_0(src, static_cast<BlockQ4_0*>(dst), nb);
    case DType::kQ4_K: return detail::quantize_q4_k(src, static_cast<BlockQ4_K*>(dst), nb);
    case DType::kQ5_K: return detail::quantize_q5_k(src, static_cast<BlockQ5_K*>(dst), nb);
    case DType::kQ6_K: return detail::quantize_q6_k(src, static_cast<BlockQ6_K*>(dst), nb);
    case DType::kQ4_1: return detail::quantize_q4_1(src, static_cast<BlockQ4_1*>(dst), nb);
    case DType::kQ5_0: return detail::quantize_q5_0(src, static_cast<BlockQ5_0*>(dst), nb);
    case DType::kQ5_1: return detail::quantize_q5_1(src, static_cast<BlockQ5_1*>(dst), nb);
    case DType::kMXFP4: return detail::quantize_mxfp4(src, static_cast<BlockMXFP4*>(dst), nb);
    case DType::kIQ4_NL: return detail::quantize_iq4_nl(src, static_cast<BlockIQ4_NL*>(dst), nb);
    default: break;
  }
  throw Error(unsupported("quantize_row_ref: loom does not quantize to " + std::string(dtype_name(type)) +
                          " (it reads and runs it)"));
}

void quantize_activations_q8x32(const float* x, ActBlockQ8x32* dst, int64_t n) {
  if (n < 0 || n % 32 != 0) throw Error(invalid_argument("quantize_activations_q8x32: n must be a multiple of 32"));
  for (int64_t b = 0; b < n / 32; ++b) dst[b].d = quantize_symmetric_127(x + 32 * b, 32, dst[b].qs);
}

void quantize_activations_q8k(const float* x, ActBlockQ8K* dst, int64_t n) {
  if (n < 0 || n % 256 != 0) throw Error(invalid_argument("quantize_activations_q8k: n must be a multiple of 256"));
  for (int64_t b = 0; b < n / 256; ++b) {
    ActBlockQ8K& y = dst[b];
    y.d = quantize_symmetric_127(x + 256 * b, 256, y.qs);
    for (int s = 0; s < 16; ++s) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += y.qs[16 * s + j];
      y.bsums[s] = static_cast<int16_t>(sum);
    }
  }
}

// Whole tensors: blocks are independent, so chunks of blocks go to the pool's
// threads (quantizing a 1B model's matrices is seconds of work, not minutes); a
// call from inside a pool worker (a row of an embedding) runs inline.
void convert_quantized(const void* src, DType src_type, void* dst, DType dst_type, int64_t n) {
  const bool from_q = dtype_is_quantized(src_type);
  const DType plain = from_q ? dst_type : src_type;
  if (from_q && dtype_is_quantized(dst_type)) {
    if (src_type == dst_type) {
      checked_blocks(src_type, n, "convert");
      std::memcpy(dst, src, dtype_bytes(src_type, n));
      return;
    }
    throw Error(unsupported("conversion " + std::string(dtype_name(src_type)) + " → " +
                            std::string(dtype_name(dst_type)) + " (requantizing loses precision twice)"));
  }
  if (!dtype_is_float(plain)) {
    throw Error(unsupported("conversion " + std::string(dtype_name(src_type)) + " → " +
                            std::string(dtype_name(dst_type)) + ": only F32/BF16/F16 pair with a quantized type"));
  }
  const DType qtype = from_q ? src_type : dst_type;
  checked_blocks(qtype, n, "convert");
  const int64_t blk = dtype_block_elements(qtype), nb = n / blk;
  constexpr int64_t kChunkBlocks = 64;
  const auto at = [](const void* p, DType t, int64_t elems) {
    return static_cast<const uint8_t*>(p) + dtype_bytes(t, elems);
  };
  ThreadPool::global().parallel_for((nb + kChunkBlocks - 1) / kChunkBlocks, [&](int64_t c0, int64_t c1, int) {
    std::vector<float> tmp(static_cast<size_t>(kChunkBlocks * blk));
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t first = c * kChunkBlocks * blk, elems = std::min(kChunkBlocks * blk, n - first);
      auto* out = const_cast<uint8_t*>(at(dst, from_q ? plain : qtype, first));
      if (from_q) {
        if (plain == DType::kF32) {
          dequantize_row_ref(qtype, at(src, qtype, first), reinterpret_cast<float*>(out), elems);
        } else {
          dequantize_row_ref(qtype, at(src, qtype, first), tmp.data(), elems);
          convert_elements(tmp.data(), DType::kF32, out, plain, static_cast<size_t>(elems));
        }
      } else if (plain == DType::kF32) {
        quantize_row_ref(qtype, reinterpret_cast<const float*>(at(src, plain, first)), out, elems);
      } else {
        convert_elements(at(src, plain, first), plain, tmp.data(), DType::kF32, static_cast<size_t>(elems));
        quantize_row_ref(qtype, tmp.data(), out, elems);
      }
    }
  });
}

}  // namespace loom
