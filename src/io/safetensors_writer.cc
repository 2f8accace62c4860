#include "loom/io/safetensors_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <numeric>
#include <set>

#include "io/safetensors_dtypes.h"

namespace loom {
namespace {

bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    int extra;
    uint32_t cp;
    if (c < 0x80) { ++i; continue; }
    if ((c & 0xe0) == 0xc0) { extra = 1; cp = c & 0x1f; }
    else if ((c & 0xf0) == 0xe0) { extra = 2; cp = c & 0x0f; }
    else if ((c & 0xf8) == 0xf0) { extra = 3; cp = c & 0x07; }
    else return false;
    if (i + extra >= s.size()) return false;  // truncated sequence
    for (int k = 1; k <= extra; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[extra] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += extra + 1;
  }
  return true;
}

// serde_json's escaping: quote, backslash and C0 controls; \u00xx in lowercase.
void append_json_string(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out.push_back(kHex[c >> 4]);
          out.push_back(kHex[c & 0xf]);
        } else {
          out.push_back(ch);
        }
    }
  }
  out.push_back('"');
}

struct Plan {
  std::string header;                 // 8-byte length + padded JSON
  std::vector<const Tensor*> order;   // tensors in data order
  uint64_t data_bytes = 0;
};

Result<Plan> plan(const NamedTensors& tensors, const std::map<std::string, std::string>& metadata,
                  SafetensorsOrder order) {
  std::set<std::string_view> names;
  for (const auto& [name, t] : tensors) {
    if (!t.defined()) return invalid_argument("safetensors writer: tensor '" + name + "' is undefined");
    if (name == "__metadata__") return invalid_argument("safetensors writer: '__metadata__' is reserved, not a tensor name");
    if (!valid_utf8(name)) return invalid_argument("safetensors writer: tensor name '" + name + "' is not valid UTF-8");
    if (!names.insert(name).second) return invalid_argument("safetensors writer: duplicate tensor name '" + name + "'");
  }
  for (const auto& [k, v] : metadata)
    if (!valid_utf8(k) || !valid_utf8(v))
      return invalid_argument("safetensors writer: metadata entry '" + k + "' is not valid UTF-8");

  std::vector<size_t> idx(tensors.size());
  std::iota(idx.begin(), idx.end(), size_t{0});
  if (order == SafetensorsOrder::kLikePython) {
    std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
      const int ra = io::safetensors_dtype_rank(tensors[a].second.dtype());
      const int rb = io::safetensors_dtype_rank(tensors[b].second.dtype());
      if (ra != rb) return ra > rb;
      return tensors[a].first < tensors[b].first;  // std::string compares bytes as unsigned, like Rust
    });
  }

  Plan p;
  std::string json = "{";
  bool first = true;
  if (!metadata.empty()) {
    json += "\"__metadata__\":{";
    for (auto it = metadata.begin(); it != metadata.end(); ++it) {
      if (it != metadata.begin()) json.push_back(',');
      append_json_string(json, it->first);
      json.push_back(':');
      append_json_string(json, it->second);
    }
    json.push_back('}');
    first = false;
  }
  uint64_t offset = 0;
  for (size_t i : idx) {
    const auto& [name, t] = tensors[i];
    if (!first) json.push_back(',');
    first = false;
    append_json_string(json, name);
    json += ":{\"dtype\":\"";
    json += dtype_name(t.dtype());
    json += "\",\"shape\":[";
    for (int d = 0; d < t.rank(); ++d) {
      if (d) json.push_back(',');
      json += std::to_string(t.dim(d));
    }
    const uint64_t n = t.nbytes();
    json += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + n) + "]}";
    offset += n;
    p.order.push_back(&t);
  }
  json.push_back('}');
  json.append((8 - json.size() % 8) % 8, ' ');

  const uint64_t len = json.size();
  p.header.resize(8);
  for (int i = 0; i < 8; ++i) p.header[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  p.header += json;
  p.data_bytes = offset;
  return p;
}

Status write_all(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    // Large single writes are fine on Linux but capped at ~2 GB each.
    const ssize_t w = ::write(fd, p, std::min<size_t>(n, size_t{1} << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      return io_error(path + ": write failed: " + std::strerror(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

}  // namespace

Result<std::string> serialize_safetensors(const NamedTensors& tensors,
                                          const std::map<std::string, std::string>& metadata,
                                          SafetensorsOrder order) {
  LOOM_ASSIGN_OR_RETURN(Plan p, plan(tensors, metadata, order));
  std::string out = std::move(p.header);
  out.reserve(out.size() + p.data_bytes);
  for (const Tensor* t : p.order) out.append(static_cast<const char*>(t->data()), t->nbytes());
  return out;
}

Status write_safetensors(const std::string& path, const NamedTensors& tensors,
                         const std::map<std::string, std::string>& metadata, SafetensorsOrder order) {
  LOOM_ASSIGN_OR_RETURN(Plan p, plan(tensors, metadata, order));

  // A unique sibling, created with O_EXCL and the usual 0666 & ~umask mode, so
  // the final file gets the permissions a plain create would have given it.
  static std::atomic<uint64_t> counter{0};
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) return io_error(path + ": cannot create " + tmp + ": " + std::strerror(errno));
  }
  if (fd < 0) return io_error(path + ": cannot create a temporary file next to it");

  auto fail = [&](Status s) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  };
  if (Status s = write_all(fd, p.header.data(), p.header.size(), path); !s.ok()) return fail(s);
  for (const Tensor* t : p.order)
    if (Status s = write_all(fd, t->data(), t->nbytes(), path); !s.ok()) return fail(s);
  if (::fsync(fd) != 0) return fail(io_error(path + ": fsync failed: " + std::strerror(errno)));
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    return io_error(path + ": close failed: " + std::strerror(errno));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return io_error(path + ": cannot rename " + tmp + " into place: " + std::strerror(err));
  }
  return Status::Ok();
}

}  // namespace loom
