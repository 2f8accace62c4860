// What GGUF's reader and writer share: the magic, the layout limits, and the
// smallest number of bytes each value type takes on disk (so a count can be
// checked against the bytes left before anything is allocated for it).
#pragma once

#include <cstdint>
#include <optional>

#include "loom/io/gguf.h"

namespace loom::io::gguf_format {

inline constexpr char kMagic[4] = {'G', 'G', 'U', 'F'};
inline constexpr uint32_t kWriteVersion = 3;
inline constexpr uint64_t kDefaultAlignment = 32;
inline constexpr int kMaxDims = 4;          // GGML_MAX_DIMS
inline constexpr int kMaxArrayDepth = 8;    // deeper is a corrupt file, not a real model
inline constexpr const char* kAlignmentKey = "general.alignment";

// nullopt for a number that is not a value type.
std::optional<GgufValueType> value_type_from_number(uint32_t n);

// Bytes of the smallest value of `t` (a string: its length field; an array: its
// element type and count).
uint64_t min_value_bytes(GgufValueType t);

// Which variant alternative a value of `t` keeps: unsigned integers uint64_t,
// signed int64_t, floats double.
bool is_unsigned_type(GgufValueType t);
bool is_signed_type(GgufValueType t);
bool is_float_type(GgufValueType t);

inline bool is_power_of_two(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }
inline uint64_t align_up(uint64_t v, uint64_t alignment) { return (v + alignment - 1) / alignment * alignment; }

}  // namespace loom::io::gguf_format
