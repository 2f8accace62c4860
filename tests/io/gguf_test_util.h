// GGUF bytes built field by field, so a test states exactly the file it opens
// (the malformed cases) independently of loom's writer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom::testing {

class GgufBytes {
 public:
  GgufBytes& raw(const std::string& s) { out_ += s; return *this; }
  GgufBytes& u8(uint8_t v) { return le(v, 1); }
  GgufBytes& u32(uint32_t v) { return le(v, 4); }
  GgufBytes& u64(uint64_t v) { return le(v, 8); }
  GgufBytes& str(const std::string& s) { u64(s.size()); out_ += s; return *this; }

  // magic, version, tensor count, metadata count.
  GgufBytes& header(uint32_t version, uint64_t tensors, uint64_t kvs) {
    return raw("GGUF").u32(version).u64(tensors).u64(kvs);
  }
  // A key and a uint32 value (type 4).
  GgufBytes& kv_u32(const std::string& key, uint32_t v) { return str(key).u32(4).u32(v); }
  GgufBytes& kv_string(const std::string& key, const std::string& v) { return str(key).u32(8).str(v); }
  // A tensor info: name, n_dims, ne (GGUF order), ggml type, offset.
  GgufBytes& tensor(const std::string& name, const std::vector<uint64_t>& ne, uint32_t type, uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(ne.size()));
    for (uint64_t n : ne) u64(n);
    return u32(type).u64(offset);
  }
  GgufBytes& pad_to(size_t alignment) {
    out_.append((alignment - out_.size() % alignment) % alignment, '\0');
    return *this;
  }
  GgufBytes& zeros(size_t n) { out_.append(n, '\0'); return *this; }

  const std::string& bytes() const { return out_; }
  size_t size() const { return out_.size(); }

 private:
  GgufBytes& le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    return *this;
  }
  std::string out_;
};

}  // namespace loom::testing
