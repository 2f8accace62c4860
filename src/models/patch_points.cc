#include "loom/models/patch_points.h"

#include <map>
#include <memory>
#include <mutex>

#include "loom/graph/patch_point.h"

namespace loom::models {
namespace {

// One point per class and signature, created on first use and kept for the
// process (PatchRegistry holds pointers to them). A class name reused with
// another signature gets no point: its modules are then called directly.
template <typename Sig>
class ForwardPoints {
 public:
  using Point = graph::PatchPoint<Sig>;
  using Fn = std::function<Sig>;

  const Point* get(const std::string& path, const Fn& original) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = points_.find(path);
    if (it != points_.end()) return it->second.get();
    if (graph::PatchRegistry::global().find(path)) {  // taken by another signature
      points_.emplace(path, nullptr);
      return nullptr;
    }
    auto point = std::make_unique<Point>(path, original);
    const Point* raw = point.get();
    points_.emplace(path, std::move(point));
    return raw;
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<Point>> points_;
};

template <typename Sig>
ForwardPoints<Sig>& points() {
  static auto* p = new ForwardPoints<Sig>();  // never destroyed: the registry points into it
  return *p;
}

const graph::PatchPoint<UnaryForwardSig>* unary_point(const Module& m) {
  return points<UnaryForwardSig>().get(forward_patch_path(m), [](const UnaryModule& u, GraphBuilder& b, ValueId x) {
    return u.forward(b, x);
  });
}

const graph::PatchPoint<AttentionForwardSig>* attention_point(const Module& m) {
  return points<AttentionForwardSig>().get(
      forward_patch_path(m),
      [](const SelfAttention& a, GraphBuilder& b, ValueId x, ValueId positions) { return a.forward(b, x, positions); });
}

const graph::PatchPoint<DecoderLayerForwardSig>* layer_point(const Module& m) {
  return points<DecoderLayerForwardSig>().get(
      forward_patch_path(m),
      [](const DecoderLayer& l, GraphBuilder& b, ValueId x, ValueId positions) { return l.forward(b, x, positions); });
}

}  // namespace

std::string forward_patch_path(const Module& m) { return "models." + m.class_name() + ".forward"; }

ValueId call_forward(const UnaryModule& m, GraphBuilder& b, ValueId x) {
  if (const auto* p = unary_point(m)) return (*p)(m, b, x);
  return m.forward(b, x);
}

ValueId call_forward(const SelfAttention& m, GraphBuilder& b, ValueId x, ValueId positions) {
  if (const auto* p = attention_point(m)) return (*p)(m, b, x, positions);
  return m.forward(b, x, positions);
}

ValueId call_forward(const DecoderLayer& m, GraphBuilder& b, ValueId x, ValueId positions) {
  if (const auto* p = layer_point(m)) return (*p)(m, b, x, positions);
  return m.forward(b, x, positions);
}

void declare_patch_point(const UnaryModule& m) { unary_point(m); }
void declare_patch_point(const SelfAttention& m) { attention_point(m); }
void declare_patch_point(const DecoderLayer& m) { layer_point(m); }

}  // namespace loom::models
