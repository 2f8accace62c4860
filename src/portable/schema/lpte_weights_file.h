// The sidecar weights file of a portable program (<program>.weights): weights
// too large for the flatbuffer (which holds at most 2 GiB) or above the
// exporter's threshold. Shared by the exporter, which writes it, and
// loom_portable, which maps it read-only and reads the weights in place.
//
//   bytes 0..63   header: magic "LPTWGHT1", then little-endian u64s:
//                 payload offset (64), payload bytes, payload hash; zeros
//   bytes 64..    payload: each weight at an offset that is a multiple of 64
//                 (relative to the payload), zero padding in between
//
// The hash (lpte::PayloadHash over the payload, padding included) is also
// stored in the program, so a program and a weights file from different exports
// are not run together; the runtime compares the two at load (cheap) and
// recomputes it only when asked (lp_program_verify_weights: reads every page).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace lpte {

inline constexpr char kWeightsMagic[8] = {'L', 'P', 'T', 'W', 'G', 'H', 'T', '1'};
inline constexpr uint64_t kWeightsHeaderBytes = 64;
inline constexpr uint64_t kWeightsAlignment = 64;

struct WeightsHeader {
  char magic[8];
  uint64_t payload_offset;
  uint64_t payload_bytes;
  uint64_t payload_hash;
  uint8_t reserved[32];
};
static_assert(sizeof(WeightsHeader) == kWeightsHeaderBytes);

// A streaming 64-bit hash over 8-byte little-endian words (the input is
// consumed in any split; a final partial word is zero-extended). Not
// cryptographic: it detects damaged or mismatched files.
class PayloadHash {
 public:
  void update(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    while (n > 0 && fill_ > 0) {  // finish a partial word first
      buf_[fill_++] = *p++;
      --n;
      if (fill_ == 8) word_from_buf();
    }
    for (; n >= 8; n -= 8, p += 8) {
      uint64_t w;
      std::memcpy(&w, p, 8);
      mix(w);
    }
    while (n-- > 0) buf_[fill_++] = *p++;
  }
  uint64_t digest() const {
    uint64_t h = h_;
    if (fill_ > 0) {
      uint8_t tail[8] = {};
      std::memcpy(tail, buf_, fill_);
      uint64_t w;
      std::memcpy(&w, tail, 8);
      h = step(h, w);
    }
    h ^= count_ + fill_;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
  }

 private:
  static uint64_t step(uint64_t h, uint64_t w) {
    w *= 0x87c37b91114253d5ULL;
    w = (w << 31) | (w >> 33);
    w *= 0x4cf5ad432745937fULL;
    h ^= w;
    h = (h << 27) | (h >> 37);
    return h * 5 + 0x52dce729;
  }
  void mix(uint64_t w) {
    h_ = step(h_, w);
    count_ += 8;
  }
  void word_from_buf() {
    uint64_t w;
    std::memcpy(&w, buf_, 8);
    fill_ = 0;
    mix(w);
  }
  uint64_t h_ = 0x9e3779b97f4a7c15ULL, count_ = 0;
  uint8_t buf_[8] = {};
  size_t fill_ = 0;
};

}  // namespace lpte
