#include "tokenizer/byte_level.h"

#include "tokenizer/unicode.h"

namespace loom::tok {

const ByteLevelTable& ByteLevelTable::get() {
  static const ByteLevelTable table = [] {
    ByteLevelTable t{};
    bool direct[256] = {};
    for (int b = '!'; b <= '~'; ++b) direct[b] = true;
    for (int b = 0xA1; b <= 0xAC; ++b) direct[b] = true;
    for (int b = 0xAE; b <= 0xFF; ++b) direct[b] = true;
    int n = 0;
    for (int b = 0; b < 256; ++b) t.byte_to_char[b] = direct[b] ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
    t.char_to_byte.fill(0);
    for (int b = 0; b < 256; ++b) {
      uni::append_utf8(t.byte_to_utf8[b], t.byte_to_char[b]);
      t.char_to_byte[t.byte_to_char[b]] = static_cast<uint16_t>(b + 1);
    }
    return t;
  }();
  return table;
}

}  // namespace loom::tok
