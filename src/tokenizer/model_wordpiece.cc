// WordPiece (greedy longest-match-first with "##" continuations) and WordLevel.
#include "tokenizer/components.h"
#include "tokenizer/model_factories.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"

namespace loom::tok {
namespace {

Status read_vocab_object(const json& j, const std::string& path, ModelTables* tables, Vocab& vocab) {
  LOOM_ASSIGN_OR_RETURN(auto entries, read_vocab_entries(j, path, tables));
  vocab.reserve(entries.size());
  for (auto& [token, id] : entries) vocab.add(std::move(token), id);
  return Status::Ok();
}

class WordPiece final : public Model {
 public:
  Vocab vocab;
  std::string unk_token = "[UNK]";
  std::string prefix = "##";
  size_t max_chars = 100;

  Status unk(std::string_view s, std::vector<Token>& out) const {
    auto id = vocab.find(unk_token);
    if (!id) return invalid_argument("WordPiece: unk_token \"" + unk_token + "\" is not in the vocabulary");
    out.push_back({*id, 0, static_cast<uint32_t>(s.size()), unk_token, true});
    return Status::Ok();
  }

  Status tokenize(std::string_view s, std::vector<Token>& out) const override {
    if (uni::count_chars(s) > max_chars) return unk(s, out);
    size_t first = out.size();
    std::string buf;
    size_t start = 0;
    while (start < s.size()) {
      size_t end = s.size();
      bool found = false;
      while (start < end) {
        std::string_view sub = s.substr(start, end - start);
        if (start > 0) {
          buf = prefix;
          buf += sub;
          sub = buf;
        }
        if (auto id = vocab.find(sub)) {
          out.push_back({*id, static_cast<uint32_t>(start), static_cast<uint32_t>(end), std::string(sub), true});
          found = true;
          break;
        }
        // Drop the last char of the candidate.
        size_t k = end - 1;
        while (k > start && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
        end = k;
      }
      if (!found) {
        out.resize(first);
        return unk(s, out);
      }
      start = end;
    }
    return Status::Ok();
  }
  std::optional<int32_t> token_to_id(std::string_view t) const override { return vocab.find(t); }
  const std::string* id_to_token(int32_t id) const override { return vocab.token(id); }
  int32_t vocab_size() const override { return static_cast<int32_t>(vocab.size()); }
  int32_t id_limit() const override { return vocab.id_limit(); }
};

class WordLevel final : public Model {
 public:
  Vocab vocab;
  std::string unk_token = "<unk>";

  Status tokenize(std::string_view s, std::vector<Token>& out) const override {
    if (auto id = vocab.find(s)) {
      out.push_back({*id, 0, static_cast<uint32_t>(s.size()), {}, false});
      return Status::Ok();
    }
    auto id = vocab.find(unk_token);
    if (!id) return invalid_argument("WordLevel: \"" + std::string(s) + "\" is not in the vocabulary and unk_token \"" + unk_token + "\" is missing");
    out.push_back({*id, 0, static_cast<uint32_t>(s.size()), unk_token, true});
    return Status::Ok();
  }
  std::optional<int32_t> token_to_id(std::string_view t) const override { return vocab.find(t); }
  const std::string* id_to_token(int32_t id) const override { return vocab.token(id); }
  int32_t vocab_size() const override { return static_cast<int32_t>(vocab.size()); }
  int32_t id_limit() const override { return vocab.id_limit(); }
};

}  // namespace

Result<std::unique_ptr<Model>> make_wordpiece(const json& j, const std::string& path, ModelTables* tables) {
  auto m = std::make_unique<WordPiece>();
  LOOM_RETURN_IF_ERROR(read_vocab_object(j, path, tables, m->vocab));
  LOOM_ASSIGN_OR_RETURN(auto unk, read_opt_string(j, path, "unk_token"));
  if (unk) m->unk_token = *unk;
  LOOM_ASSIGN_OR_RETURN(auto prefix, read_opt_string(j, path, "continuing_subword_prefix"));
  if (prefix) m->prefix = *prefix;
  LOOM_ASSIGN_OR_RETURN(int64_t mx, read_int(j, path, "max_input_chars_per_word", int64_t{100}));
  if (mx < 0) return field_error(field_path(path, "max_input_chars_per_word"), "must be non-negative");
  m->max_chars = static_cast<size_t>(mx);
  return std::unique_ptr<Model>(std::move(m));
}

Result<std::unique_ptr<Model>> make_wordlevel(const json& j, const std::string& path, ModelTables* tables) {
  auto m = std::make_unique<WordLevel>();
  LOOM_RETURN_IF_ERROR(read_vocab_object(j, path, tables, m->vocab));
  LOOM_ASSIGN_OR_RETURN(auto unk, read_opt_string(j, path, "unk_token"));
  if (unk) m->unk_token = *unk;
  return std::unique_ptr<Model>(std::move(m));
}

Result<std::unique_ptr<Model>> make_model(const json& j, const std::string& path, ModelTables* tables) {
  if (!j.is_object()) return field_error(path, "expected an object");
  std::string type;
  auto it = j.find("type");
  if (it != j.end() && it->is_string()) {
    type = it->get<std::string>();
  } else if (j.contains("merges")) {
    type = "BPE";  // old files omit the model type
  } else {
    return field_error(field_path(path, "type"), "missing");
  }
  if (type == "BPE") return make_bpe(j, path, tables);
  if (type == "Unigram") return make_unigram(j, path);
  if (type == "WordPiece") return make_wordpiece(j, path, tables);
  if (type == "WordLevel") return make_wordlevel(j, path, tables);
  return unsupported(path + ": unknown type \"" + type + "\"");
}

}  // namespace loom::tok
