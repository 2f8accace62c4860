#include "loom/tokenizer/token_bytes.h"

#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace loom {
namespace {

std::optional<std::string> decoded(const tok::TokenizerImpl& impl, std::vector<std::string> tokens) {
  std::string out;
  if (!impl.decode_tokens(tokens, &out).ok()) return std::nullopt;
  return out;
}

int byte_fallback_value(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  auto hex = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
  };
  int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

}  // namespace

std::vector<std::optional<std::string>> token_byte_strings(const Tokenizer& tokenizer) {
  const tok::TokenizerImpl& impl = tokenizer.impl();
  const int32_t n = tokenizer.id_limit();
  std::vector<std::optional<std::string>> out(n);
  // Which decoding the chain does, asked of the chain itself.
  const bool byte_level = decoded(impl, {"\xC4\xA0"}) == std::optional<std::string>(" ") &&
                          decoded(impl, {"\xC4\x8A"}) == std::optional<std::string>("\n");
  const bool byte_fallback = decoded(impl, {"<0x41>"}) == std::optional<std::string>("A");
  const auto& table = tok::ByteLevelTable::get();
  for (int32_t id = 0; id < n; ++id) {
    const std::string* t = impl.id_to_token(id);
    if (!t || tokenizer.is_special_id(id)) continue;
    if (byte_level) {
      std::string bytes;
      bool mapped = true;
      for (size_t i = 0; i < t->size();) {
        int len;
        char32_t c = tok::uni::decode(t->data() + i, &len);
        i += len;
        if (c >= table.char_to_byte.size() || table.char_to_byte[c] == 0) {
          mapped = false;
          break;
        }
        bytes.push_back(static_cast<char>(table.char_to_byte[c] - 1));
      }
      if (mapped) {
        out[id] = std::move(bytes);
        continue;
      }
    }
    if (byte_fallback) {
      int b = byte_fallback_value(*t);
      if (b >= 0) {
        out[id] = std::string(1, static_cast<char>(b));
        continue;
      }
    }
    // Mid-text form: decode after a plain neighbour and drop the neighbour's text.
    auto with = decoded(impl, {"x", *t});
    auto alone = decoded(impl, {"x"});
    if (with && alone && with->compare(0, alone->size(), *alone) == 0) out[id] = with->substr(alone->size());
  }
  return out;
}

}  // namespace loom
