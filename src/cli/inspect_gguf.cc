#include "cli/inspect_gguf.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>

#include "loom/io/gguf.h"

namespace loom::cli {

namespace {

// Arrays longer than this print their first items and their length: a
// vocabulary is 150k strings.
constexpr size_t kArrayItemsShown = 5;
constexpr size_t kStringCharsShown = 60;

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char ch : s.substr(0, kStringCharsShown)) {
    const auto c = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') { out.push_back('\\'); out.push_back(ch); }
    else if (ch == '\n') out += "\\n";
    else if (c < 0x20) { char buf[8]; std::snprintf(buf, sizeof buf, "\\x%02x", c); out += buf; }
    else out.push_back(ch);
  }
  out += s.size() > kStringCharsShown ? "\"… (" + std::to_string(s.size()) + " bytes)" : "\"";
  return out;
}

std::string format_value(const io::GgufValue& v);

// The first items, then "…" when there are more.
std::string format_items(const std::vector<io::GgufValue>& items) {
  std::string out;
  for (size_t i = 0; i < items.size() && i < kArrayItemsShown; ++i) out += (i ? ", " : "") + format_value(items[i]);
  if (items.size() > kArrayItemsShown) out += ", …";
  return out;
}

// Top-level arrays say their element type and length; nested ones are bracketed.
std::string format_value(const io::GgufValue& v) {
  if (v.is_array()) return "[" + format_items(v.array()) + "]";
  if (const auto* s = std::get_if<std::string>(&v.value)) return quoted(*s);
  if (const auto* b = std::get_if<bool>(&v.value)) return *b ? "true" : "false";
  if (const auto* u = std::get_if<uint64_t>(&v.value)) return std::to_string(*u);
  if (const auto* i = std::get_if<int64_t>(&v.value)) return std::to_string(*i);
  if (const auto* d = std::get_if<double>(&v.value)) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", *d);
    return buf;
  }
  return "?";
}

std::string human_bytes(uint64_t n) {
  char buf[32];
  if (n >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", n / double(1ull << 30));
  else if (n >= (1ull << 20)) std::snprintf(buf, sizeof buf, "%.2f MiB", n / double(1ull << 20));
  else if (n >= 1024) std::snprintf(buf, sizeof buf, "%.1f KiB", n / 1024.0);
  else std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(n));
  return buf;
}

}  // namespace

bool is_gguf_path(const std::string& path) {
  const std::filesystem::path p(path);
  return p.extension() == ".gguf" && !std::filesystem::is_directory(p);
}

void inspect_gguf(const std::string& path) {
  auto file = io::GgufFile::open(path).value();
  std::printf("file:           %s\n", path.c_str());
  std::printf("format:         GGUF version %u, alignment %llu, data at byte %llu of %llu\n", file->version(),
              static_cast<unsigned long long>(file->alignment()), static_cast<unsigned long long>(file->data_offset()),
              static_cast<unsigned long long>(file->file_size()));
  std::printf("metadata:       %zu keys\n", file->metadata().size());
  for (const auto& [key, value] : file->metadata()) {
    if (value.is_array()) {
      const std::string type = "[" + std::string(io::gguf_value_type_name(value.element_type)) + " × " +
                               std::to_string(value.array().size()) + "]";
      std::printf("  %-40s %-8s %s %s\n", key.c_str(), "array", type.c_str(), format_items(value.array()).c_str());
    } else {
      std::printf("  %-40s %-8s %s\n", key.c_str(), std::string(io::gguf_value_type_name(value.type)).c_str(),
                  format_value(value).c_str());
    }
  }

  size_t name_width = 4;
  for (const auto& t : file->tensors()) name_width = std::max(name_width, t.name.size());
  std::printf("tensors:        %zu\n", file->tensors().size());
  std::printf("  %-*s  %-6s  %-22s  %12s  %s\n", static_cast<int>(name_width), "name", "dtype", "shape", "bytes",
              "offset");
  struct Total {
    size_t tensors = 0;
    int64_t elements = 0;
    uint64_t bytes = 0;
  };
  std::map<std::string, Total> totals;
  Total all;
  for (const auto& t : file->tensors()) {
    const std::string type = io::ggml_type_name(t.ggml_type);
    std::printf("  %-*s  %-6s  %-22s  %12llu  %llu\n", static_cast<int>(name_width), t.name.c_str(), type.c_str(),
                shape_to_string(t.shape).c_str(), static_cast<unsigned long long>(t.nbytes),
                static_cast<unsigned long long>(t.offset));
    for (Total* total : {&totals[type], &all}) {
      total->tensors++;
      total->elements += t.numel();
      total->bytes += t.nbytes;
    }
  }
  std::printf("totals:\n");
  totals.emplace("all", all);
  for (const auto& [type, total] : totals)
    std::printf("  %-6s  %5zu tensors  %14lld elements  %14llu bytes (%s)\n", type.c_str(), total.tensors,
                static_cast<long long>(total.elements), static_cast<unsigned long long>(total.bytes),
                human_bytes(total.bytes).c_str());
}

}  // namespace loom::cli
