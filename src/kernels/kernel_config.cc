#include "loom/kernels/kernel_config.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "loom/kernels/layer_names.h"
#include "loom/weights/weight_pattern.h"

namespace loom::kernels {

namespace {

using nlohmann::json;

Status with_key(const Status& s, const std::string& key) {
  return s.ok() ? s : Status(s.code(), "kernel config " + key + ": " + s.message());
}

Result<KernelRef> parse_ref_value(const json& v) {
  if (v.is_string()) return KernelRef::parse(v.get<std::string>());
  if (!v.is_array())
    return invalid_argument("expected \"repo:Name\" or [\"repo:Name\", {metadata}], got " + v.dump());
  if (v.size() != 2 || !v[0].is_string() || !v[1].is_object())
    return invalid_argument("expected [\"repo:Name\", {metadata}], got " + v.dump());
  LOOM_ASSIGN_OR_RETURN(KernelRef ref, KernelRef::parse(v[0].get<std::string>()));
  const json& meta = v[1];
  for (auto it = meta.begin(); it != meta.end(); ++it) {
    const std::string& k = it.key();
    const json& x = it.value();
    if (k == "version") {
      if (!x.is_number_integer())
        return invalid_argument(ref.id() + ": \"version\" must be an integer major version, got " + x.dump());
      ref.version = static_cast<int>(x.get<int64_t>());
    } else if (k == "revision") {
      if (!x.is_string()) return invalid_argument(ref.id() + ": \"revision\" must be a string, got " + x.dump());
      ref.revision = x.get<std::string>();
    } else if (k == "trust_remote_code") {
      if (!x.is_boolean())
        return invalid_argument(ref.id() + ": \"trust_remote_code\" must be true or false, got " + x.dump());
      ref.trust_remote_code = x.get<bool>();
    } else {
      return invalid_argument(ref.id() + ": unknown metadata key \"" + k +
                              "\" (known: version, revision, trust_remote_code)");
    }
  }
  if (!ref.version && !ref.revision)
    return invalid_argument(ref.id() + ": metadata needs \"version\" or \"revision\"");
  LOOM_RETURN_IF_ERROR(ref.validate());
  return ref;
}

Result<KernelChoice> parse_choice(const json& v) {
  if (!v.is_object()) {
    LOOM_ASSIGN_OR_RETURN(KernelRef ref, parse_ref_value(v));
    return KernelChoice::any(std::move(ref));
  }
  if (v.empty()) return invalid_argument("empty per-device map");
  KernelChoice choice;
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (!is_known_device(it.key()))
      return invalid_argument("unknown device \"" + it.key() + "\" (known: cpu, cuda, rocm, xpu, mps, metal, npu)");
    if (it.value().is_object())
      return invalid_argument("device \"" + it.key() + "\": per-device maps do not nest");
    auto ref = parse_ref_value(it.value());
    if (!ref.ok()) return ref.status().with_context("device \"" + it.key() + "\"");
    choice.per_device.emplace(it.key(), std::move(ref).value());
  }
  return choice;
}

Status validate_choice(const KernelChoice& c) {
  if (c.per_device.empty()) return invalid_argument("no kernel given");
  for (const auto& [device, ref] : c.per_device) {
    if (!device.empty() && !is_known_device(device)) return invalid_argument("unknown device \"" + device + "\"");
    LOOM_ASSIGN_OR_RETURN(KernelRef reparsed, KernelRef::parse(ref.id()));
    (void)reparsed;
    LOOM_RETURN_IF_ERROR(ref.validate());
  }
  return Status::Ok();
}

}  // namespace

bool is_known_device(std::string_view d) {
  return d == "cpu" || d == "cuda" || d == "rocm" || d == "xpu" || d == "mps" || d == "metal" || d == "npu";
}

KernelChoice KernelChoice::any(KernelRef ref) {
  KernelChoice c;
  c.per_device.emplace("", std::move(ref));
  return c;
}

KernelChoice& KernelChoice::on(const std::string& device, KernelRef ref) {
  per_device.insert_or_assign(device, std::move(ref));
  return *this;
}

const KernelRef* KernelChoice::for_device(const std::string& device) const {
  auto it = per_device.find(device);
  if (it == per_device.end()) it = per_device.find("");
  return it == per_device.end() ? nullptr : &it->second;
}

std::string FusionEntry::layer_key() const {
  std::vector<std::string> layers;
  for (const auto& c : children) layers.push_back(c.layer);
  return fused_layer_key(layers);
}

std::string FusionEntry::describe() const {
  std::string s = "(";
  for (size_t i = 0; i < children.size(); ++i)
    s += (i ? ", (" : "(") + children[i].layer + ", " + children[i].pattern + ")";
  return s + ")";
}

Status validate_module_pattern(std::string_view pattern) {
  if (pattern.empty()) return invalid_argument("empty module path pattern");
  if (pattern.front() == '^' || pattern.back() == '$')
    return invalid_argument("module path pattern '" + std::string(pattern) + "': no anchors, it always names a whole path");
  Result<WeightPattern> p = WeightPattern::parse(pattern);
  if (!p.ok()) return invalid_argument("module path " + p.status().message());
  return Status::Ok();
}

bool module_pattern_matches(std::string_view pattern, std::string_view path) {
  Result<WeightPattern> p = WeightPattern::parse(pattern);
  return p.ok() && p->match(path).has_value();
}

Status KernelConfig::add_layer(const std::string& layer, KernelChoice choice) {
  const std::string key = "\"" + layer + "\"";
  if (!is_kernel_layer_name(layer))
    return with_key(invalid_argument("unknown kernel layer name (known: " + kernel_layer_names_list() + ")"), key);
  if (layers_.count(layer)) return with_key(invalid_argument("given twice (conflicting rules)"), key);
  LOOM_RETURN_IF_ERROR(with_key(validate_choice(choice), key));
  layers_.emplace(layer, std::move(choice));
  return Status::Ok();
}

Status KernelConfig::add_fusion(std::vector<FusionChild> children, KernelChoice choice) {
  FusionEntry e{std::move(children), std::move(choice)};
  const std::string key = "fusion " + e.describe();
  if (e.children.size() < 2) return with_key(invalid_argument("a fusion needs at least two (layer, pattern) pairs"), key);
  std::string parent;
  for (size_t i = 0; i < e.children.size(); ++i) {
    const FusionChild& c = e.children[i];
    if (!is_kernel_layer_name(c.layer))
      return with_key(invalid_argument("unknown kernel layer name \"" + c.layer + "\" (known: " +
                                       kernel_layer_names_list() + ")"),
                      key);
    LOOM_RETURN_IF_ERROR(with_key(validate_module_pattern(c.pattern), key));
    const auto dot = c.pattern.rfind('.');
    const std::string p = dot == std::string::npos ? "" : c.pattern.substr(0, dot);
    if (i == 0) parent = p;
    if (p != parent)
      return with_key(invalid_argument("children must share one parent: '" + c.pattern + "' is not under '" +
                                       parent + "'"),
                      key);
    for (size_t j = 0; j < i; ++j)
      if (e.children[j].pattern == c.pattern)
        return with_key(invalid_argument("pattern '" + c.pattern + "' given twice"), key);
  }
  for (const auto& other : fusions_) {
    bool same = other.children.size() == e.children.size();
    for (size_t i = 0; same && i < e.children.size(); ++i)
      same = other.children[i].layer == e.children[i].layer && other.children[i].pattern == e.children[i].pattern;
    if (same) return with_key(invalid_argument("given twice (conflicting rules)"), key);
  }
  LOOM_RETURN_IF_ERROR(with_key(validate_choice(e.choice), key));
  fusions_.push_back(std::move(e));
  return Status::Ok();
}

Result<KernelConfig> KernelConfig::from_json(const json& j) {
  if (!j.is_object()) return invalid_argument("kernel config: expected a JSON object, got " + std::string(j.type_name()));
  KernelConfig cfg;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const json& v = it.value();
    if (k == "use_fallback") {
      if (!v.is_boolean()) return invalid_argument("kernel config \"use_fallback\": must be true or false, got " + v.dump());
      cfg.use_fallback_ = v.get<bool>();
    } else if (k == "fusions") {
      if (!v.is_array()) return invalid_argument("kernel config \"fusions\": expected a list of [key, kernel] pairs");
      for (size_t i = 0; i < v.size(); ++i) {
        const std::string where = "\"fusions\"[" + std::to_string(i) + "]";
        const json& pair = v[i];
        if (!pair.is_array() || pair.size() != 2 || !pair[0].is_array())
          return invalid_argument("kernel config " + where +
                                  ": expected [[[\"Layer\", \"path.pattern\"], ...], kernel], got " + pair.dump());
        std::vector<FusionChild> children;
        for (const json& c : pair[0]) {
          if (!c.is_array() || c.size() != 2 || !c[0].is_string() || !c[1].is_string())
            return invalid_argument("kernel config " + where + ": each key item must be [\"Layer\", \"path.pattern\"], got " +
                                    c.dump());
          children.push_back({c[0].get<std::string>(), c[1].get<std::string>()});
        }
        auto choice = parse_choice(pair[1]);
        if (!choice.ok()) return with_key(choice.status(), where);
        Status s = cfg.add_fusion(std::move(children), std::move(choice).value());
        if (!s.ok()) return Status(s.code(), s.message() + " (" + where + ")");
      }
    } else {
      if (!is_kernel_layer_name(k))
        return invalid_argument("kernel config \"" + k + "\": unknown kernel layer name (known: " +
                                kernel_layer_names_list() + ", plus \"fusions\" and \"use_fallback\")");
      auto choice = parse_choice(v);
      if (!choice.ok()) return with_key(choice.status(), "\"" + k + "\"");
      LOOM_RETURN_IF_ERROR(cfg.add_layer(k, std::move(choice).value()));
    }
  }
  return cfg;
}

Result<KernelConfig> KernelConfig::parse(std::string_view text) {
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return parse_error("kernel config: not valid JSON");
  return from_json(j);
}

Result<KernelConfig> KernelConfig::from_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return io_error("kernel config " + path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  auto cfg = parse(ss.str());
  if (!cfg.ok()) return cfg.status().with_context(path);
  return cfg;
}

}  // namespace loom::kernels
