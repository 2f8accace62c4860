// A reference to a kernel as KernelConfig spells it: "repo:Name" plus optional
// metadata, as in Transformers ("owner/repo:ClassName", {"version": 1 |
// "revision": "...", "trust_remote_code": true}).
//
// repo is "loom" (the built-in kernels) or a plugin repo "owner/name" whose
// files live under <plugin dir>/owner/name/. Segments are [A-Za-z0-9._-]+ and
// never "." or "..", so a repo cannot name a path outside its plugin directory.
// Name is an identifier.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "loom/core/status.h"

namespace loom::kernels {

inline constexpr const char* kBuiltinRepo = "loom";

struct KernelRef {
  std::string repo;
  std::string name;
  // At most one of version / revision. A plain string means version 1.
  std::optional<int> version;
  std::optional<std::string> revision;
  bool trust_remote_code = false;

  // "repo:Name" alone (version 1). kInvalidArgument saying what is malformed.
  static Result<KernelRef> parse(std::string_view text);

  bool builtin() const { return repo == kBuiltinRepo; }
  int major_version() const { return version.value_or(1); }
  // Metadata constraints: version ≥ 1, not both version and revision, no empty revision.
  Status validate() const;
  // "acme/norms:CustomRMSNorm" (no metadata).
  std::string id() const { return repo + ":" + name; }
  // "acme/norms:CustomRMSNorm (version 2, trust_remote_code)".
  std::string to_string() const;
};

}  // namespace loom::kernels
