// GPT-2's byte ↔ printable-char table, shared by the ByteLevel pre-tokenizer, decoder
// and post-processor.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace loom::tok {

struct ByteLevelTable {
  std::array<char32_t, 256> byte_to_char;
  std::array<std::string, 256> byte_to_utf8;
  // char → byte+1 for chars < 0x144 (every mapped char is below U+0144); 0 = unmapped.
  std::array<uint16_t, 0x144> char_to_byte;
  static const ByteLevelTable& get();
};

}  // namespace loom::tok
