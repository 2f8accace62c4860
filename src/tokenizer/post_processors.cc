// Post-processors: TemplateProcessing, BertProcessing, RobertaProcessing, ByteLevel
// (offset trimming), Sequence. Single sequences only (loom encodes one text at a time).
#include "tokenizer/byte_level.h"
#include "tokenizer/components.h"
#include "tokenizer/unicode.h"

namespace loom::tok {
namespace {

// ByteLevel's trim_offsets: leading/trailing 'Ġ' or whitespace chars are cut from each
// token's offsets (both char and byte offsets move by the same count, since every such
// char stands for one input byte... or one input char for real whitespace).
void process_offsets(EncodingData& enc, bool add_prefix_space) {
  const char32_t kSpace = ByteLevelTable::get().byte_to_char[' '];
  auto is_space = [&](char32_t c) { return c == kSpace || uni::is_whitespace(c); };
  for (size_t i = 0; i < enc.tokens.size(); ++i) {
    std::vector<char32_t> cs = to_chars(enc.tokens[i]);
    size_t leading = 0, trailing = 0;
    while (leading < cs.size() && is_space(cs[leading])) ++leading;
    while (trailing < cs.size() && is_space(cs[cs.size() - 1 - trailing])) ++trailing;
    if (leading == 0 && trailing == 0) continue;
    if (leading > 0 && i == 0 && add_prefix_space && leading == 1) leading = 0;
    for (auto* offs : {&enc.offsets, &enc.byte_offsets}) {
      auto& o = (*offs)[i];
      if (leading > 0) o.first = std::min(o.first + leading, o.second);
      if (trailing > 0 && o.second >= trailing) o.second = std::max(o.second - trailing, o.first);
    }
  }
}

struct SpecialPiece {
  std::vector<int32_t> ids;
  std::vector<std::string> tokens;
};

void push_special(EncodingData& enc, const SpecialPiece& p, uint32_t type_id, bool front) {
  EncodingData add;
  for (size_t k = 0; k < p.ids.size(); ++k) {
    add.ids.push_back(p.ids[k]);
    add.tokens.push_back(k < p.tokens.size() ? p.tokens[k] : std::string());
    add.offsets.push_back({0, 0});
    add.byte_offsets.push_back({0, 0});
    add.special_tokens_mask.push_back(1);
    add.type_ids.push_back(type_id);
  }
  auto splice = [front](auto& dst, auto& src) {
    dst.insert(front ? dst.begin() : dst.end(), src.begin(), src.end());
  };
  splice(enc.ids, add.ids);
  splice(enc.tokens, add.tokens);
  splice(enc.offsets, add.offsets);
  splice(enc.byte_offsets, add.byte_offsets);
  splice(enc.special_tokens_mask, add.special_tokens_mask);
  splice(enc.type_ids, add.type_ids);
}

class ByteLevelPost final : public PostProcessor {
 public:
  ByteLevelPost(bool trim, bool aps) : trim_(trim), aps_(aps) {}
  void process(EncodingData& enc, bool) const override {
    if (trim_) process_offsets(enc, aps_);
  }

 private:
  bool trim_, aps_;
};

// [CLS] A [SEP] (Bert) / <s> A </s> (Roberta, after optional trimming).
class ClsSep final : public PostProcessor {
 public:
  ClsSep(SpecialPiece cls, SpecialPiece sep, bool roberta, bool trim, bool aps)
      : cls_(std::move(cls)), sep_(std::move(sep)), roberta_(roberta), trim_(trim), aps_(aps) {}
  void process(EncodingData& enc, bool add_special) const override {
    if (roberta_ && trim_) process_offsets(enc, aps_);
    if (!add_special) return;
    for (auto& t : enc.type_ids) t = 0;
    push_special(enc, cls_, 0, true);
    push_special(enc, sep_, 0, false);
  }

 private:
  SpecialPiece cls_, sep_;
  bool roberta_, trim_, aps_;
};

class Template final : public PostProcessor {
 public:
  struct Item {
    bool is_sequence;
    std::string id;  // special token name, or "A"/"B"
    uint32_t type_id;
  };
  Template(std::vector<Item> single, std::unordered_map<std::string, SpecialPiece> specials)
      : single_(std::move(single)), specials_(std::move(specials)) {}
  void process(EncodingData& enc, bool add_special) const override {
    EncodingData out;
    for (const Item& it : single_) {
      if (it.is_sequence) {
        if (it.id != "A") continue;
        for (size_t i = 0; i < enc.ids.size(); ++i) {
          out.ids.push_back(enc.ids[i]);
          out.tokens.push_back(std::move(enc.tokens[i]));
          out.offsets.push_back(enc.offsets[i]);
          out.byte_offsets.push_back(enc.byte_offsets[i]);
          out.special_tokens_mask.push_back(enc.special_tokens_mask[i]);
          out.type_ids.push_back(it.type_id);
        }
      } else if (add_special) {
        push_special(out, specials_.at(it.id), it.type_id, false);
      }
    }
    enc = std::move(out);
  }

 private:
  std::vector<Item> single_;
  std::unordered_map<std::string, SpecialPiece> specials_;
};

class SequencePost final : public PostProcessor {
 public:
  explicit SequencePost(std::vector<std::unique_ptr<PostProcessor>> p) : items_(std::move(p)) {}
  void process(EncodingData& enc, bool add_special) const override {
    for (const auto& p : items_) p->process(enc, add_special);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> items_;
};

Result<SpecialPiece> read_pair(const json& j, const std::string& path, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_array() || it->size() != 2 || !(*it)[0].is_string() || !(*it)[1].is_number_integer())
    return field_error(field_path(path, key), "expected [token, id]");
  SpecialPiece p;
  p.tokens.push_back((*it)[0].get<std::string>());
  p.ids.push_back((*it)[1].get<int32_t>());
  return p;
}

}  // namespace

Result<std::unique_ptr<PostProcessor>> make_post_processor(const json& j, const std::string& path) {
  if (j.is_null()) return std::unique_ptr<PostProcessor>();
  LOOM_ASSIGN_OR_RETURN(std::string type, read_type(j, path));
  if (type == "ByteLevel") {
    LOOM_ASSIGN_OR_RETURN(bool trim, read_bool(j, path, "trim_offsets", true));
    LOOM_ASSIGN_OR_RETURN(bool aps, read_bool(j, path, "add_prefix_space", true));
    return std::unique_ptr<PostProcessor>(new ByteLevelPost(trim, aps));
  }
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    LOOM_ASSIGN_OR_RETURN(SpecialPiece sep, read_pair(j, path, "sep"));
    LOOM_ASSIGN_OR_RETURN(SpecialPiece cls, read_pair(j, path, "cls"));
    bool roberta = type == "RobertaProcessing";
    LOOM_ASSIGN_OR_RETURN(bool trim, read_bool(j, path, "trim_offsets", true));
    LOOM_ASSIGN_OR_RETURN(bool aps, read_bool(j, path, "add_prefix_space", true));
    return std::unique_ptr<PostProcessor>(new ClsSep(std::move(cls), std::move(sep), roberta, trim, aps));
  }
  if (type == "TemplateProcessing") {
    std::unordered_map<std::string, SpecialPiece> specials;
    auto sit = j.find("special_tokens");
    if (sit != j.end() && !sit->is_null()) {
      if (!sit->is_object()) return field_error(field_path(path, "special_tokens"), "expected an object");
      for (auto it = sit->begin(); it != sit->end(); ++it) {
        std::string p = field_path(path, "special_tokens") + "[\"" + it.key() + "\"]";
        const json& v = it.value();
        if (!v.is_object() || !v.contains("ids") || !v["ids"].is_array() || !v.contains("tokens") || !v["tokens"].is_array())
          return field_error(p, "expected {id, ids, tokens}");
        SpecialPiece sp;
        for (const auto& x : v["ids"]) {
          if (!x.is_number_integer()) return field_error(p + ".ids", "expected integers");
          sp.ids.push_back(x.get<int32_t>());
        }
        for (const auto& x : v["tokens"]) {
          if (!x.is_string()) return field_error(p + ".tokens", "expected strings");
          sp.tokens.push_back(x.get<std::string>());
        }
        if (sp.ids.size() != sp.tokens.size()) return field_error(p, "ids and tokens differ in length");
        specials.emplace(it.key(), std::move(sp));
      }
    }
    LOOM_ASSIGN_OR_RETURN(const json* single, read_array(j, path, "single"));
    std::vector<Template::Item> items;
    for (size_t i = 0; i < single->size(); ++i) {
      std::string p = field_path(path, "single") + "[" + std::to_string(i) + "]";
      const json& e = (*single)[i];
      Template::Item item{};
      const json* body = nullptr;
      if (e.is_object() && e.contains("Sequence")) {
        item.is_sequence = true;
        body = &e["Sequence"];
      } else if (e.is_object() && e.contains("SpecialToken")) {
        item.is_sequence = false;
        body = &e["SpecialToken"];
      } else {
        return field_error(p, "expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
      }
      if (!body->is_object() || !body->contains("id") || !(*body)["id"].is_string())
        return field_error(p, "missing id");
      item.id = (*body)["id"].get<std::string>();
      item.type_id = body->contains("type_id") && (*body)["type_id"].is_number_integer() ? (*body)["type_id"].get<uint32_t>() : 0;
      if (!item.is_sequence && !specials.count(item.id))
        return field_error(p, "special token \"" + item.id + "\" is not in special_tokens");
      if (item.is_sequence && item.id != "A" && item.id != "B") return field_error(p, "sequence id must be A or B");
      items.push_back(std::move(item));
    }
    return std::unique_ptr<PostProcessor>(new Template(std::move(items), std::move(specials)));
  }
  if (type == "Sequence") {
    LOOM_ASSIGN_OR_RETURN(auto items, read_sequence<PostProcessor>(j, path, "processors", "a post-processor", make_post_processor));
    return std::unique_ptr<PostProcessor>(new SequencePost(std::move(items)));
  }
  return unsupported(path + ": unknown type \"" + type + "\"");
}

}  // namespace loom::tok
