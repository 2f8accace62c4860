// from_dir: tokenizer.json + tokenizer_config.json (BOS/EOS, add_bos_token/add_eos_token,
// chat templates).
#include <filesystem>
#include <fstream>
#include <sstream>

#include "loom/core/logging.h"
#include "loom/io/checkpoint.h"
#include "loom/tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"

namespace loom {
namespace {

// A special-token entry: "text" or {"content": "text", ...} (AddedToken dict).
std::optional<std::string> token_string(const nlohmann::json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) return j["content"].get<std::string>();
  return std::nullopt;
}

// Transformers' Llama/Gemma fast tokenizers rebuild their post-processor from
// add_bos_token / add_eos_token: "<bos>:0 $A:0 <eos>:0".
class BosEosTemplate final : public tok::PostProcessor {
 public:
  BosEosTemplate(std::optional<std::pair<int32_t, std::string>> bos, std::optional<std::pair<int32_t, std::string>> eos)
      : bos_(std::move(bos)), eos_(std::move(eos)) {}
  void process(tok::EncodingData& enc, bool add_special) const override {
    if (!add_special) return;
    auto put = [&](const std::pair<int32_t, std::string>& t, bool front) {
      auto at = [front](auto& v) { return front ? v.begin() : v.end(); };
      enc.ids.insert(at(enc.ids), t.first);
      enc.tokens.insert(at(enc.tokens), t.second);
      enc.offsets.insert(at(enc.offsets), {0, 0});
      enc.byte_offsets.insert(at(enc.byte_offsets), {0, 0});
      enc.special_tokens_mask.insert(at(enc.special_tokens_mask), 1);
      enc.type_ids.insert(at(enc.type_ids), 0);
    };
    if (bos_) put(*bos_, true);
    if (eos_) put(*eos_, false);
  }

 private:
  std::optional<std::pair<int32_t, std::string>> bos_, eos_;
};

}  // namespace

Result<std::shared_ptr<Tokenizer>> Tokenizer::from_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (Checkpoint::is_gguf_file(dir)) return from_gguf(dir);
  fs::path tj = fs::path(dir) / "tokenizer.json";
  if (!fs::exists(tj, ec)) return not_found(tj.string() + ": no tokenizer.json in " + dir);
  LOOM_ASSIGN_OR_RETURN(auto t, from_file(tj.string()));

  fs::path cj = fs::path(dir) / "tokenizer_config.json";
  if (!fs::exists(cj, ec)) return t;
  std::ifstream f(cj, std::ios::binary);
  if (!f) return io_error(cj.string() + ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    return parse_error(cj.string() + ": invalid JSON: " + e.what());
  }
  LOOM_RETURN_IF_ERROR(t->apply_config(std::move(config), cj.string()));
  return t;
}

Status Tokenizer::apply_config(nlohmann::json config, const std::string& name) {
  Tokenizer* t = this;
  tok::TokenizerImpl& impl = *impl_;
  impl.config = std::move(config);
  const nlohmann::json& c = impl.config;
  if (!c.is_object()) return parse_error(name + ": expected a JSON object");

  auto resolve = [&](const char* key, std::optional<std::string>* tokstr, std::optional<int32_t>* id) -> Status {
    auto it = c.find(key);
    if (it == c.end() || it->is_null()) return Status::Ok();
    auto s = token_string(*it);
    if (!s) return parse_error(name + ": " + key + ": expected a string or {\"content\": ...}");
    auto tid = t->token_to_id(*s);
    if (!tid) return parse_error(name + ": " + key + ": \"" + *s + "\" is not in the vocabulary");
    *tokstr = *s;
    *id = *tid;
    return Status::Ok();
  };
  LOOM_RETURN_IF_ERROR(resolve("bos_token", &impl.bos, &impl.bos_id));
  LOOM_RETURN_IF_ERROR(resolve("eos_token", &impl.eos, &impl.eos_id));

  if (auto it = c.find("chat_template"); it != c.end() && !it->is_null()) {
    if (it->is_string()) {
      impl.chat_templates["default"] = it->get<std::string>();
    } else if (it->is_array()) {
      for (size_t i = 0; i < it->size(); ++i) {
        const auto& e = (*it)[i];
        if (!e.is_object() || !e.contains("name") || !e["name"].is_string() || !e.contains("template") ||
            !e["template"].is_string())
          return parse_error(name + ": chat_template[" + std::to_string(i) + "]: expected {name, template}");
        impl.chat_templates[e["name"].get<std::string>()] = e["template"].get<std::string>();
      }
    } else {
      return parse_error(name + ": chat_template: expected a string or a list of {name, template}");
    }
  }

  // add_bos_token / add_eos_token: when present and different from what the
  // post-processor does, the post-processor is replaced by "BOS? $A EOS?".
  auto flag = [&](const char* key) -> Result<std::optional<bool>> {
    auto it = c.find(key);
    if (it == c.end() || it->is_null()) return std::optional<bool>();
    if (!it->is_boolean()) return parse_error(name + ": " + key + ": expected true or false");
    return std::optional<bool>(it->get<bool>());
  };
  LOOM_ASSIGN_OR_RETURN(auto add_bos, flag("add_bos_token"));
  LOOM_ASSIGN_OR_RETURN(auto add_eos, flag("add_eos_token"));
  if (add_bos || add_eos) {
    tok::EncodingData probe;
    if (impl.post_processor) impl.post_processor->process(probe, true);
    bool has_bos = impl.bos_id && !probe.ids.empty() && probe.ids.front() == *impl.bos_id;
    // A lone token that is BOS counts as BOS only.
    bool has_eos = impl.eos_id && !probe.ids.empty() && probe.ids.back() == *impl.eos_id &&
                   !(probe.ids.size() == 1 && has_bos);
    bool want_bos = add_bos.value_or(has_bos), want_eos = add_eos.value_or(has_eos);
    if (want_bos && !impl.bos_id) return parse_error(name + ": add_bos_token is true but bos_token is not set");
    if (want_eos && !impl.eos_id) return parse_error(name + ": add_eos_token is true but eos_token is not set");
    if (want_bos != has_bos || want_eos != has_eos) {
      std::optional<std::pair<int32_t, std::string>> b, e;
      if (want_bos) b = std::make_pair(*impl.bos_id, *impl.bos);
      if (want_eos) e = std::make_pair(*impl.eos_id, *impl.eos);
      impl.post_processor = std::make_unique<BosEosTemplate>(b, e);
    }
  }
  return Status::Ok();
}

}  // namespace loom
