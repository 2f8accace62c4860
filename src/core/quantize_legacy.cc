// Reference quantizers of the 32-element types llama.cpp makes besides Q8_0 and Q4_0:
// Q4_1, Q5_0, Q5_1 (quantize_row_*_ref), MXFP4 (quantize_row_mxfp4_ref) and IQ4_NL (the
// search llama-quantize runs, quantize_iq4_nl without an importance matrix), in llama.cpp's
// arithmetic, so a row gives llama.cpp's bytes (tests/core/ggml_vectors_test.cc checks).
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "core/quantize_k.h"
#include "loom/core/quantize.h"

namespace loom::detail {
namespace {

// llama.cpp's (int8_t) of a float then MIN: truncation toward zero.
inline uint8_t trunc_level(float v, int max) { return static_cast<uint8_t>(std::min(max, static_cast<int>(static_cast<int8_t>(v)))); }

void min_max(const float* x, float* lo, float* hi) {
  *lo = FLT_MAX;
  *hi = -FLT_MAX;
  for (int j = 0; j < 32; ++j) {
    if (x[j] < *lo) *lo = x[j];
    if (x[j] > *hi) *hi = x[j];
  }
}

// The value of largest magnitude, sign kept (the first of equal magnitudes).
float signed_extreme(const float* x) {
  float amax = 0.0f, extreme = 0.0f;
  for (int j = 0; j < 32; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      extreme = x[j];
    }
  }
  return extreme;
}

// Index of the nearest of n sorted levels; at a midpoint the upper (exact: 2x against
// the sum of two neighbours).
int nearest_level(int n, const int8_t* values, float x) {
  const float x2 = x + x;
  int idx = 0;
  for (int step = n >> 1; step > 0; step >>= 1) {
    const int j = idx + step;
    if (x2 >= static_cast<float>(values[j - 1] + values[j])) idx = j;
  }
  return idx;
}

}  // namespace

void quantize_q4_1(const float* x, BlockQ4_1* y, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, x += 32) {
    float lo, hi;
    min_max(x, &lo, &hi);
    const float d = (hi - lo) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = f32_to_f16(d);
    y[b].m = f32_to_f16(lo);
    for (int j = 0; j < 16; ++j) {
      const uint8_t a = trunc_level((x[j] - lo) * id + 0.5f, 15);
      const uint8_t c = trunc_level((x[j + 16] - lo) * id + 0.5f, 15);
      y[b].qs[j] = static_cast<uint8_t>(a | (c << 4));
    }
  }
}

void quantize_q5_0(const float* x, BlockQ5_0* y, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, x += 32) {
    const float d = signed_extreme(x) / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = f32_to_f16(d);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      const uint8_t a = trunc_level(x[j] * id + 16.5f, 31);
      const uint8_t c = trunc_level(x[j + 16] * id + 16.5f, 31);
      y[b].qs[j] = static_cast<uint8_t>((a & 0xF) | ((c & 0xF) << 4));
      qh |= static_cast<uint32_t>(a >> 4) << j;
      qh |= static_cast<uint32_t>(c >> 4) << (j + 16);
    }
    std::memcpy(y[b].qh, &qh, 4);
  }
}

void quantize_q5_1(const float* x, BlockQ5_1* y, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, x += 32) {
    float lo, hi;
    min_max(x, &lo, &hi);
    const float d = (hi - lo) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = f32_to_f16(d);
    y[b].m = f32_to_f16(lo);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      // llama.cpp takes no MIN here: (x − min)·id + 0.5 stays below 32 up to rounding.
      const auto a = static_cast<uint8_t>((x[j] - lo) * id + 0.5f);
      const auto c = static_cast<uint8_t>((x[j + 16] - lo) * id + 0.5f);
      y[b].qs[j] = static_cast<uint8_t>((a & 0xF) | ((c & 0xF) << 4));
      qh |= static_cast<uint32_t>((a & 0x10) >> 4) << j;
      qh |= static_cast<uint32_t>((c & 0x10) >> 4) << (j + 16);
    }
    std::memcpy(y[b].qh, &qh, 4);
  }
}

void quantize_mxfp4(const float* x, BlockMXFP4* y, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, x += 32) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const uint8_t e = amax > 0.0f ? static_cast<uint8_t>(std::floor(std::log2(amax)) - 2 + 127) : 0;
    const float d = mxfp4_half_scale(e);
    y[b].e = e;
    auto nearest = [d](float v) {
      int best = 0;
      float best_err = std::fabs(static_cast<float>(kMXFP4Values[0]) * d - v);
      for (int i = 1; i < 16; ++i) {
        const float err = std::fabs(static_cast<float>(kMXFP4Values[i]) * d - v);
        if (err < best_err) {
          best = i;
          best_err = err;
        }
      }
      return best;
    };
    for (int j = 0; j < 16; ++j) y[b].qs[j] = static_cast<uint8_t>(nearest(x[j]) | (nearest(x[j + 16]) << 4));
  }
}

void quantize_iq4_nl(const float* x, BlockIQ4_NL* y, int64_t nblocks) {
  constexpr int kTries = 7;  // llama-quantize's search (quantize_iq4_nl)
  const int8_t* values = kIQ4Values;
  for (int64_t b = 0; b < nblocks; ++b, x += 32) {
    float weight[32];
    for (int j = 0; j < 32; ++j) weight[j] = x[j] * x[j];
    float amax = 0.0f, extreme = 0.0f;
    for (int j = 0; j < 32; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        extreme = x[j];
      }
    }
    float scale = 0.0f;
    if (amax >= 1e-15f) {
      float d = -extreme / values[0];
      float id = 1.0f / d;
      float sumqx = 0.0f, sumq2 = 0.0f;
      for (int j = 0; j < 32; ++j) {
        const float q = values[nearest_level(16, values, id * x[j])];
        sumqx += weight[j] * q * x[j];
        sumq2 += weight[j] * q * q;
      }
      d = sumq2 > 0.0f ? sumqx / sumq2 : 0.0f;
      float best = d * sumqx;
      for (int t = -kTries; t <= kTries; ++t) {
        id = static_cast<float>(t + values[0]) / extreme;
        sumqx = sumq2 = 0.0f;
        for (int j = 0; j < 32; ++j) {
          const float q = values[nearest_level(16, values, id * x[j])];
          sumqx += weight[j] * q * x[j];
          sumq2 += weight[j] * q * q;
        }
        if (sumq2 > 0.0f && sumqx * sumqx > best * sumq2) {
          d = sumqx / sumq2;
          best = d * sumqx;
        }
      }
      scale = d;
    }
    y[b].d = f32_to_f16(scale);
    const float id = scale != 0.0f ? 1.0f / scale : 0.0f;
    uint8_t L[32];
    for (int j = 0; j < 32; ++j) L[j] = static_cast<uint8_t>(nearest_level(16, values, id * x[j]));
    for (int j = 0; j < 16; ++j) y[b].qs[j] = static_cast<uint8_t>(L[j] | (L[j + 16] << 4));
  }
}

}  // namespace loom::detail
