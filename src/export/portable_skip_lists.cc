// The portable exporter's skip list (upstream's EXPORT_SKIPS), in one file so
// it stays visible and short; the ONNX exporter keeps its own in
// onnx_skip_lists.cc. Every entry says why and should go away with its reason.
// export_portable refuses a listed architecture with the reason, and
// tests/export/portable_exporter_test.cc exports every fixture variant not
// listed, expects the listed ones to be refused with their reason, and checks
// the refusal itself through ScopedPortableSkip.
#include <mutex>

#include "loom/export/portable_exporter.h"

namespace loom::exporting {
namespace {

std::mutex& skip_lists_mu() {
  static std::mutex m;
  return m;
}

// model_type → reason. Every other architecture loom runs has portable
// kernels (mixtral and qwen2_moe left with the runtime's moe kernel).
std::map<std::string, std::string>& list() {
  static std::map<std::string, std::string> l = {
      {"gpt_oss", "gpt-oss: the portable runtime has no kernel for attention sinks or the biased, clamped-SwiGLU moe"},
  };
  return l;
}

}  // namespace

std::map<std::string, std::string> portable_export_skips() {
  std::lock_guard<std::mutex> lock(skip_lists_mu());
  return list();
}

std::string portable_export_skip_reason(const std::string& model_type) {
  std::lock_guard<std::mutex> lock(skip_lists_mu());
  auto it = list().find(model_type);
  return it == list().end() ? "" : it->second;
}

ScopedPortableSkip::ScopedPortableSkip(std::string model_type, std::string reason) : model_type_(std::move(model_type)) {
  std::lock_guard<std::mutex> lock(skip_lists_mu());
  if (auto it = list().find(model_type_); it != list().end()) {
    had_previous_ = true;
    previous_ = it->second;
  }
  list()[model_type_] = std::move(reason);
}

ScopedPortableSkip::~ScopedPortableSkip() {
  std::lock_guard<std::mutex> lock(skip_lists_mu());
  if (had_previous_) list()[model_type_] = previous_;
  else list().erase(model_type_);
}

}  // namespace loom::exporting
