// Patch points: named seams in model and op-building code that an exporter may
// replace for the duration of one export — what Transformers' exporters do by
// monkey-patching `LlamaAttention.forward` or `torch.where`, without touching
// the model. Code calls through a PatchPoint; a PatchScope installs
// replacements for the calling thread only and removes them when it ends (on
// every exit path, errors included), so a run on another thread, or after the
// export, never sees them, and nested scopes stack.
//
//   // once, where the seam is (a static: it registers its path):
//   static graph::PatchPoint<ValueId(GraphBuilder&, ValueId, ValueId, ValueId)>
//       where_op("ops.where", default_where);
//   ... where_op(b, cond, x, y) ...
//
//   // an exporter:
//   graph::PatchScope scope;
//   scope.install<ValueId(GraphBuilder&, ValueId, ValueId, ValueId)>("ops.where", replacement);
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <typeindex>
#include <vector>

#include "loom/core/status.h"

namespace loom::graph {

// Every patch point of the process, by path. Paths are unique.
class PatchRegistry {
 public:
  static PatchRegistry& global();

  struct Entry {
    std::string path;
    std::type_index type{typeid(void)};  // std::function<Sig> of the point
    const void* original = nullptr;      // the point's original std::function<Sig>
  };
  // Throws loom::Error when `path` is already registered.
  void add(Entry e);
  const Entry* find(const std::string& path) const;
  std::vector<std::string> paths() const;

 private:
  std::vector<Entry> entries_;
};

namespace detail {
// The replacement active on this thread for `path` (the innermost scope's), or null.
const void* active_patch(const std::string& path);
}  // namespace detail

template <typename Sig>
class PatchPoint;

template <typename R, typename... A>
class PatchPoint<R(A...)> {
 public:
  using Fn = std::function<R(A...)>;
  PatchPoint(std::string path, Fn original) : path_(std::move(path)), original_(std::move(original)) {
    PatchRegistry::global().add({path_, typeid(Fn), &original_});
  }
  PatchPoint(const PatchPoint&) = delete;
  PatchPoint& operator=(const PatchPoint&) = delete;

  R operator()(A... args) const {
    if (const void* p = detail::active_patch(path_)) return (*static_cast<const Fn*>(p))(std::forward<A>(args)...);
    return original_(std::forward<A>(args)...);
  }
  const std::string& path() const { return path_; }
  const Fn& original() const { return original_; }

 private:
  std::string path_;
  Fn original_;
};

// Replacements installed on this thread until the scope ends.
class PatchScope {
 public:
  PatchScope() = default;
  ~PatchScope();
  PatchScope(PatchScope&& o) noexcept;
  PatchScope& operator=(PatchScope&&) = delete;
  PatchScope(const PatchScope&) = delete;

  // Replaces `path` with `make(original)`. NotFound when no point has that
  // path; InvalidArgument when the point's signature is not Sig.
  template <typename Sig>
  Status install(const std::string& path, const std::function<std::function<Sig>(const std::function<Sig>&)>& make) {
    using Fn = std::function<Sig>;
    const PatchRegistry::Entry* e = PatchRegistry::global().find(path);
    if (!e) return not_found("patch point '" + path + "' does not exist");
    if (e->type != std::type_index(typeid(Fn)))
      return invalid_argument("patch for '" + path + "' has another signature than the patch point");
    return install_erased(path, std::make_shared<Fn>(make(*static_cast<const Fn*>(e->original))));
  }
  // The same, type-erased: `replacement` holds a std::function of the point's type.
  Status install_erased(const std::string& path, std::shared_ptr<const void> replacement);

  const std::vector<std::string>& installed() const { return paths_; }

 private:
  std::vector<std::string> paths_;
  std::vector<std::shared_ptr<const void>> fns_;
};

}  // namespace loom::graph
