// KernelConfig: which kernel replaces which module, for one model instance.
// Mirrors Transformers' KernelConfig; built in C++ or read from JSON.
//
// JSON (one object; every key other than "fusions" and "use_fallback" is a
// kernel layer name, see layer_names.h):
//   {
//     "RMSNorm":   "loom:FusedRMSNorm",                               // version 1
//     "Attention": ["acme/attn:Flash", {"version": 2}],               // or {"revision": "v2.1"}
//     "SiLUAndMul": ["acme/act:SiLU", {"version": 1, "trust_remote_code": true}],
//     "MLP":       {"cpu": "loom:SomeMLP", "cuda": "acme/mlp:X"},   // per device; values as above
//     "fusions": [
//       [[["RMSNorm", "model.layers.*.post_attention_layernorm"], ["MLP", "model.layers.*.mlp"]],
//        "loom:RMSNormMLP"]                                           // value: any form above
//     ],
//     "use_fallback": true                                            // default true
//   }
// A fusion key is a tuple of (layer name, module path pattern) pairs, which
// JSON cannot use as an object key, so fusions are a list of [key, value]
// pairs. Patterns use the one tensor-name syntax (weight_pattern.h; a lone `*`
// is exactly one whole path segment, as before); all patterns of a
// fusion must share their parent (everything but the last segment) and the
// order of the pairs is the order of the chain (and of the Layout's modules).
//
// Metadata: exactly one of "version" (integer ≥ 1: the kernel's major version)
// or "revision" (string, matched exactly against the kernel's revision), and
// optionally "trust_remote_code" (bool). A plain string means version 1,
// untrusted.
//
// Precedence: a fusion claims the modules it matches; a layer entry covers the
// remaining modules of that layer. Two fusions claiming one module are a
// conflict (an error when the config is resolved against a model).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "loom/core/status.h"
#include "loom/kernels/kernel_ref.h"

namespace loom::kernels {

// Device names a config may use: cpu cuda rocm xpu mps metal npu.
bool is_known_device(std::string_view device);

struct KernelChoice {
  // Device → kernel; "" applies to every device that has no entry of its own.
  std::map<std::string, KernelRef> per_device;

  static KernelChoice any(KernelRef ref);
  KernelChoice& on(const std::string& device, KernelRef ref);
  // nullptr when nothing is asked for on `device`.
  const KernelRef* for_device(const std::string& device) const;
};

struct FusionChild {
  std::string layer;    // "RMSNorm"
  std::string pattern;  // "model.layers.*.post_attention_layernorm"
};

struct FusionEntry {
  std::vector<FusionChild> children;
  KernelChoice choice;

  // "RMSNorm+MLP", the layers a fused kernel must provide.
  std::string layer_key() const;
  // "((RMSNorm, model.layers.*.post_attention_layernorm), (MLP, model.layers.*.mlp))".
  std::string describe() const;
};

class KernelConfig {
 public:
  // Errors (kInvalidArgument) name the key: unknown layer name, bad device,
  // invalid ref metadata, the layer given twice.
  Status add_layer(const std::string& layer, KernelChoice choice);
  // Also: fewer than two children, a bad pattern, children not sharing a
  // parent, the same fusion key twice.
  Status add_fusion(std::vector<FusionChild> children, KernelChoice choice);
  void set_use_fallback(bool on) { use_fallback_ = on; }

  bool use_fallback() const { return use_fallback_; }
  const std::map<std::string, KernelChoice>& layers() const { return layers_; }
  const std::vector<FusionEntry>& fusions() const { return fusions_; }
  bool empty() const { return layers_.empty() && fusions_.empty(); }

  // The JSON form above. Errors name the key ("kernel config \"RMSNorm\": …").
  static Result<KernelConfig> from_json(const nlohmann::json& json);
  static Result<KernelConfig> parse(std::string_view json_text);
  static Result<KernelConfig> from_file(const std::string& path);

 private:
  std::map<std::string, KernelChoice> layers_;
  std::vector<FusionEntry> fusions_;
  bool use_fallback_ = true;
};

// A module path pattern, in weights' one pattern syntax (loom/weights/weight_pattern.h):
// dot-separated, non-empty segments where `*` matches one or more characters of a
// segment, so a lone `*` is one whole segment. Matching is whole-path; no anchors.
Status validate_module_pattern(std::string_view pattern);
bool module_pattern_matches(std::string_view pattern, std::string_view path);

}  // namespace loom::kernels
