// Tokenizers stored in GGUF metadata (tokenizer.ggml.*), both ways: from_gguf builds
// the tokenizer.json the metadata describes and runs it through the ordinary
// tokenizer.json pipeline; gguf_tokenizer_metadata writes a checkpoint's
// tokenizer.json + tokenizer_config.json as that metadata. One table of known
// pre-tokenizers (llama.cpp's tokenizer.ggml.pre names) serves both directions.
#include "loom/tokenizer/gguf_tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <sstream>
#include <unordered_map>

#include "loom/io/checkpoint.h"
#include "loom/io/gguf.h"
#include "loom/tokenizer/tokenizer.h"

namespace loom {
namespace {

using io::GgufValue;
using io::GgufValueType;
using nlohmann::json;

// llama.cpp's token types (llama_token_type).
enum TokenType : int32_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

struct KnownPreTokenizer {
  const char* name;  // tokenizer.ggml.pre
  json normalizer;
  json pre_tokenizer;
  json decoder;
  bool ignore_merges;
};

json byte_level(bool trim_offsets, bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", trim_offsets}, {"use_regex", use_regex}};
}

json split_then_bytes(const char* regex, bool trim_offsets) {
  return {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}},
            byte_level(trim_offsets, false)}}};
}

const std::vector<KnownPreTokenizer>& known_pre_tokenizers() {
  static const std::vector<KnownPreTokenizer> table = {
      {"llama-bpe", nullptr,
       split_then_bytes("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                        "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
                        true),
       byte_level(true, true), true},
      {"qwen2", json{{"type", "NFC"}},
       split_then_bytes("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                        "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
                        false),
       byte_level(false, false), false},
      {"gpt-2", nullptr, byte_level(true, true), byte_level(true, true), false},
  };
  return table;
}

std::string known_names() {
  std::string s;
  for (const auto& k : known_pre_tokenizers()) s += (s.empty() ? "" : ", ") + std::string(k.name);
  return s;
}

// The parts of a pre-tokenizer that decide the split (offset trimming does not).
bool same_split(const json& a, const json& b) {
  auto strip = [](json j) {
    std::function<void(json&)> walk = [&](json& x) {
      if (x.is_object()) {
        x.erase("trim_offsets");
        for (auto& [k, v] : x.items()) walk(v);
      } else if (x.is_array()) {
        for (auto& v : x) walk(v);
      }
    };
    walk(j);
    return j;
  };
  return strip(a) == strip(b);
}

// The SentencePiece model's normalizer and decoder as Transformers' LlamaConverter
// writes them. Without a space prefix (tokenizer.ggml.add_space_prefix false: Gemma)
// nothing is prepended, so nothing is stripped when decoding.
json spm_normalizer(bool add_space_prefix = true) {
  json replace = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}};
  if (!add_space_prefix) return replace;
  return {{"type", "Sequence"}, {"normalizers", {{{"type", "Prepend"}, {"prepend", "\u2581"}}, replace}}};
}
json spm_decoder(bool add_space_prefix = true) {
  json steps = {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                {{"type", "ByteFallback"}},
                {{"type", "Fuse"}}};
  if (add_space_prefix) steps.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  return {{"type", "Sequence"}, {"decoders", steps}};
}

struct Metadata {
  const io::GgufFile& file;
  const GgufValue* find(const std::string& key) const { return file.find_value(key); }
  Result<std::vector<std::string>> strings(const std::string& key, bool required) const {
    const GgufValue* v = find(key);
    std::vector<std::string> out;
    if (!v) {
      if (required) return not_found(file.path() + ": no metadata key '" + key + "'");
      return out;
    }
    if (!v->is_array()) return parse_error(file.path() + ": " + key + " must be an array of strings");
    out.reserve(v->array().size());
    for (const GgufValue& e : v->array()) {
      LOOM_ASSIGN_OR_RETURN(std::string s, e.as_string(key));
      out.push_back(std::move(s));
    }
    return out;
  }
  template <typename T, typename Get>
  Result<std::vector<T>> numbers(const std::string& key, Get get) const {
    const GgufValue* v = find(key);
    std::vector<T> out;
    if (!v) return out;
    if (!v->is_array()) return parse_error(file.path() + ": " + key + " must be an array");
    for (const GgufValue& e : v->array()) {
      auto r = get(e, key);
      if (!r.ok()) return r.status();
      out.push_back(static_cast<T>(r.value()));
    }
    return out;
  }
  Result<std::optional<int64_t>> id(const std::string& key, size_t vocab) const {
    const GgufValue* v = find(key);
    if (!v) return std::optional<int64_t>();
    LOOM_ASSIGN_OR_RETURN(int64_t i, v->as_int(key));
    if (i < 0 || static_cast<size_t>(i) >= vocab)
      return out_of_range(file.path() + ": " + key + " = " + std::to_string(i) + " is outside the vocabulary of " +
                          std::to_string(vocab));
    return std::optional<int64_t>(i);
  }
  Result<std::optional<bool>> flag(const std::string& key) const {
    const GgufValue* v = find(key);
    if (!v) return std::optional<bool>();
    LOOM_ASSIGN_OR_RETURN(bool b, v->as_bool(key));
    return std::optional<bool>(b);
  }
};

// Merges of a SentencePiece BPE vocabulary from its scores, as Transformers'
// SentencePieceExtractor derives them: every split of a piece into two pieces of
// the vocabulary, by the merged piece's score (higher first), then by the ids.
std::vector<std::string> merges_from_scores(const std::vector<std::string>& tokens, const std::vector<float>& scores,
                                            const std::vector<int32_t>& types) {
  std::unordered_map<std::string, int32_t> id;
  for (size_t i = 0; i < tokens.size(); ++i)
    if (types.empty() || types[i] == kNormal) id.emplace(tokens[i], static_cast<int32_t>(i));
  struct M {
    float score;
    int32_t l, r;
    std::string text;
  };
  std::vector<M> all;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (!types.empty() && types[i] != kNormal) continue;
    const std::string& t = tokens[i];
    std::vector<M> local;
    for (size_t cut = 1; cut < t.size(); ++cut) {
      if ((static_cast<unsigned char>(t[cut]) & 0xC0) == 0x80) continue;  // not inside a UTF-8 sequence
      auto l = id.find(t.substr(0, cut)), r = id.find(t.substr(cut));
      if (l == id.end() || r == id.end()) continue;
      local.push_back({scores[i], l->second, r->second, l->first + " " + r->first});
    }
    std::sort(local.begin(), local.end(), [](const M& a, const M& b) { return a.l != b.l ? a.l < b.l : a.r < b.r; });
    for (auto& m : local) all.push_back(std::move(m));
  }
  std::stable_sort(all.begin(), all.end(), [](const M& a, const M& b) { return a.score > b.score; });
  std::vector<std::string> out;
  out.reserve(all.size());
  for (auto& m : all) out.push_back(std::move(m.text));
  return out;
}

// A tokenizer.json BPE model's merges as "left right" strings (both of its forms).
std::vector<std::string> merge_strings(const json& model) {
  std::vector<std::string> merges;
  for (const json& mg : model.value("merges", json::array())) {
    if (mg.is_string()) merges.push_back(mg.get<std::string>());
    else if (mg.is_array() && mg.size() == 2) merges.push_back(mg[0].get<std::string>() + " " + mg[1].get<std::string>());
  }
  return merges;
}

Result<std::string> read_text(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) return io_error(p.string() + ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

Result<GgufTokenizerJson> tokenizer_json_from_gguf(const io::GgufFile& file) {
  Metadata md{file};
  LOOM_ASSIGN_OR_RETURN(const GgufValue* model_v, file.require_value("tokenizer.ggml.model"));
  LOOM_ASSIGN_OR_RETURN(std::string model, model_v->as_string("tokenizer.ggml.model"));
  if (model == "none")
    return not_found(file.path() + ": the file has no tokenizer (tokenizer.ggml.model is 'none'); use token ids");
  LOOM_ASSIGN_OR_RETURN(std::vector<std::string> tokens, md.strings("tokenizer.ggml.tokens", true));
  auto as_i = [](const GgufValue& v, std::string_view w) { return v.as_int(w); };
  auto as_d = [](const GgufValue& v, std::string_view w) { return v.as_double(w); };
  LOOM_ASSIGN_OR_RETURN(std::vector<int32_t> types, md.numbers<int32_t>("tokenizer.ggml.token_type", as_i));
  if (!types.empty() && types.size() != tokens.size())
    return parse_error(file.path() + ": tokenizer.ggml.token_type has " + std::to_string(types.size()) +
                       " entries for " + std::to_string(tokens.size()) + " tokens");
  const size_t n = tokens.size();

  GgufTokenizerJson out;
  json& tj = out.tokenizer;
  json& cfg = out.config;
  tj["version"] = "1.0";
  tj["truncation"] = nullptr;
  tj["padding"] = nullptr;
  tj["post_processor"] = nullptr;
  json added = json::array();
  for (size_t i = 0; i < types.size(); ++i) {
    const int32_t t = types[i];
    if (t != kControl && t != kUserDefined && t != kUnknown) continue;
    if (model == "llama" && t == kUnknown) {
      added.push_back({{"id", i}, {"content", tokens[i]}, {"single_word", false}, {"lstrip", false},
                       {"rstrip", false}, {"normalized", false}, {"special", true}});
      continue;
    }
    if (t == kUnknown) continue;
    added.push_back({{"id", i}, {"content", tokens[i]}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                     {"normalized", false}, {"special", t == kControl}});
  }
  tj["added_tokens"] = added;
  json vocab = json::object();
  for (size_t i = 0; i < n; ++i) vocab[tokens[i]] = i;

  if (model == "gpt2") {
    std::string pre = "gpt-2";
    if (const GgufValue* v = md.find("tokenizer.ggml.pre")) {
      LOOM_ASSIGN_OR_RETURN(pre, v->as_string("tokenizer.ggml.pre"));
    }
    if (pre == "default" || pre == "llama3") pre = pre == "llama3" ? "llama-bpe" : "gpt-2";
    const KnownPreTokenizer* known = nullptr;
    for (const auto& k : known_pre_tokenizers())
      if (pre == k.name) known = &k;
    if (!known)
      return unsupported(file.path() + ": tokenizer.ggml.pre '" + pre + "' is not one loom knows (" + known_names() + ")");
    LOOM_ASSIGN_OR_RETURN(std::vector<std::string> merges, md.strings("tokenizer.ggml.merges", true));
    tj["normalizer"] = known->normalizer;
    tj["pre_tokenizer"] = known->pre_tokenizer;
    tj["decoder"] = known->decoder;
    tj["model"] = {{"type", "BPE"},          {"dropout", nullptr},       {"unk_token", nullptr},
                   {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
                   {"fuse_unk", false},      {"byte_fallback", false},   {"ignore_merges", known->ignore_merges},
                   {"vocab", vocab},         {"merges", merges}};
  } else if (model == "llama") {
    LOOM_ASSIGN_OR_RETURN(std::vector<float> scores, md.numbers<float>("tokenizer.ggml.scores", as_d));
    if (scores.size() != n)
      return parse_error(file.path() + ": tokenizer.ggml.scores has " + std::to_string(scores.size()) + " entries for " +
                         std::to_string(n) + " tokens");
    LOOM_ASSIGN_OR_RETURN(std::optional<int64_t> unk, md.id("tokenizer.ggml.unknown_token_id", n));
    bool prefix = true;
    if (const GgufValue* v = md.find("tokenizer.ggml.add_space_prefix")) {
      LOOM_ASSIGN_OR_RETURN(prefix, v->as_bool("tokenizer.ggml.add_space_prefix"));
    }
    // Merges, when the file carries them (loom writes them), else derived from the scores.
    std::vector<std::string> merges;
    if (md.find("tokenizer.ggml.merges")) {
      LOOM_ASSIGN_OR_RETURN(merges, md.strings("tokenizer.ggml.merges", true));
    } else {
      merges = merges_from_scores(tokens, scores, types);
    }
    tj["normalizer"] = spm_normalizer(prefix);
    tj["pre_tokenizer"] = nullptr;
    tj["decoder"] = spm_decoder(prefix);
    tj["model"] = {{"type", "BPE"},
                   {"dropout", nullptr},
                   {"unk_token", unk ? json(tokens[static_cast<size_t>(*unk)]) : json(nullptr)},
                   {"continuing_subword_prefix", nullptr},
                   {"end_of_word_suffix", nullptr},
                   {"fuse_unk", true},
                   {"byte_fallback", true},
                   {"ignore_merges", false},
                   {"vocab", vocab},
                   {"merges", merges}};
  } else {
    return unsupported(file.path() + ": tokenizer.ggml.model '" + model + "' (loom reads gpt2 and llama)");
  }

  LOOM_ASSIGN_OR_RETURN(std::optional<int64_t> bos, md.id("tokenizer.ggml.bos_token_id", n));
  LOOM_ASSIGN_OR_RETURN(std::optional<int64_t> eos, md.id("tokenizer.ggml.eos_token_id", n));
  if (bos) cfg["bos_token"] = tokens[static_cast<size_t>(*bos)];
  if (eos) cfg["eos_token"] = tokens[static_cast<size_t>(*eos)];
  // llama.cpp's defaults when the file does not say: BOS for SentencePiece models only.
  LOOM_ASSIGN_OR_RETURN(std::optional<bool> add_bos, md.flag("tokenizer.ggml.add_bos_token"));
  LOOM_ASSIGN_OR_RETURN(std::optional<bool> add_eos, md.flag("tokenizer.ggml.add_eos_token"));
  const bool want_bos = add_bos.value_or(model == "llama");
  if (want_bos && !bos) return not_found(file.path() + ": add_bos_token is set but tokenizer.ggml.bos_token_id is missing");
  cfg["add_bos_token"] = want_bos;
  cfg["add_eos_token"] = add_eos.value_or(false) && eos.has_value();
  if (const GgufValue* v = md.find("tokenizer.chat_template")) {
    LOOM_ASSIGN_OR_RETURN(std::string tmpl, v->as_string("tokenizer.chat_template"));
    cfg["chat_template"] = tmpl;
  }
  return out;
}

Result<std::shared_ptr<Tokenizer>> Tokenizer::from_gguf(const std::string& gguf_path) {
  LOOM_ASSIGN_OR_RETURN(std::shared_ptr<io::GgufFile> file, io::GgufFile::open(gguf_path));
  LOOM_ASSIGN_OR_RETURN(GgufTokenizerJson j, tokenizer_json_from_gguf(*file));
  LOOM_ASSIGN_OR_RETURN(std::shared_ptr<Tokenizer> t, from_json_string(j.tokenizer.dump(), gguf_path + " (tokenizer.ggml.*)"));
  LOOM_RETURN_IF_ERROR(t->apply_config(std::move(j.config), gguf_path + " (tokenizer.ggml.*)"));
  return t;
}

bool Tokenizer::exists_at(const std::string& model_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(model_path, ec)) return fs::exists(fs::path(model_path) / "tokenizer.json", ec);
  if (!Checkpoint::is_gguf_file(model_path)) return false;
  auto file = io::GgufFile::open(model_path);
  if (!file.ok()) return false;
  const io::GgufValue* model = file.value()->find_value("tokenizer.ggml.model");
  return model && !(model->is_string() && std::get<std::string>(model->value) == "none");
}

Result<std::vector<std::pair<std::string, io::GgufValue>>> gguf_tokenizer_metadata(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path tp = fs::path(dir) / "tokenizer.json";
  LOOM_ASSIGN_OR_RETURN(std::string text, read_text(tp));
  json tj = json::parse(text, nullptr, false);
  if (tj.is_discarded() || !tj.is_object() || !tj.contains("model") || !tj["model"].is_object())
    return parse_error(tp.string() + ": not a tokenizer.json");
  json cfg = json::object();
  if (fs::exists(fs::path(dir) / "tokenizer_config.json")) {
    LOOM_ASSIGN_OR_RETURN(std::string ctext, read_text(fs::path(dir) / "tokenizer_config.json"));
    cfg = json::parse(ctext, nullptr, false);
    if (cfg.is_discarded() || !cfg.is_object()) return parse_error(dir + "/tokenizer_config.json: not a JSON object");
  }
  // Ids come from the tokenizer itself, so added tokens beyond the model vocabulary count too.
  LOOM_ASSIGN_OR_RETURN(std::shared_ptr<Tokenizer> tok, Tokenizer::from_dir(dir));
  const json& m = tj["model"];
  if (m.value("type", "") != "BPE")
    return unsupported(tp.string() + ": model type '" + m.value("type", "") + "' has no GGUF form loom writes (BPE)");
  const int32_t n = tok->id_limit();
  std::vector<std::string> tokens(static_cast<size_t>(n));
  std::vector<int32_t> types(static_cast<size_t>(n), kNormal);
  std::vector<bool> seen(static_cast<size_t>(n), false);
  for (auto& [piece, id] : m["vocab"].items()) {
    const int64_t i = id.get<int64_t>();
    if (i < 0 || i >= n) return parse_error(tp.string() + ": vocab id " + std::to_string(i) + " out of range");
    tokens[static_cast<size_t>(i)] = piece;
    seen[static_cast<size_t>(i)] = true;
  }
  for (const json& a : tj.value("added_tokens", json::array())) {
    const int64_t i = a.value("id", -1);
    if (i < 0 || i >= n) continue;
    tokens[static_cast<size_t>(i)] = a.value("content", "");
    seen[static_cast<size_t>(i)] = true;
    types[static_cast<size_t>(i)] = a.value("special", false) ? kControl : kUserDefined;
  }
  for (int32_t i = 0; i < n; ++i)
    if (!seen[static_cast<size_t>(i)]) {
      tokens[static_cast<size_t>(i)] = "[PAD" + std::to_string(i) + "]";
      types[static_cast<size_t>(i)] = kUnused;
    }

  std::vector<std::pair<std::string, GgufValue>> md;
  const bool spm_prefixed = tj["normalizer"].is_object() && tj["normalizer"] == spm_normalizer(true);
  const bool spm_unprefixed = tj["normalizer"].is_object() && tj["normalizer"] == spm_normalizer(false);
  // Gemma's files add a Split on " " that cannot fire: the normalizer has turned every
  // space into "▁" before the pre-tokenizer runs, so it is SentencePiece all the same.
  const json& pre = tj["pre_tokenizer"];
  const bool inert_pre = pre.is_null() || (pre.is_object() && pre.value("type", "") == "Split" &&
                                           pre.contains("pattern") && pre["pattern"] == json{{"String", " "}} &&
                                           !pre.value("invert", false));
  const bool spm = m.value("byte_fallback", false) && (spm_prefixed || spm_unprefixed) && inert_pre;
  if (spm) {
    md.emplace_back("tokenizer.ggml.model", GgufValue::string("llama"));
    md.emplace_back("tokenizer.ggml.add_space_prefix", GgufValue::boolean(spm_prefixed));
    // SentencePiece BPE merges by piece score; a piece's score is minus the rank of
    // the first merge producing it, so the merges derived back follow the same order.
    std::vector<float> scores(static_cast<size_t>(n), 0.0f);
    std::unordered_map<std::string, size_t> rank;
    const json& merges = m.value("merges", json::array());
    for (size_t r = 0; r < merges.size(); ++r) {
      std::string l, rr;
      if (merges[r].is_string()) {
        const std::string s = merges[r].get<std::string>();
        const size_t sp = s.find(' ');
        l = s.substr(0, sp);
        rr = sp == std::string::npos ? "" : s.substr(sp + 1);
      } else if (merges[r].is_array() && merges[r].size() == 2) {
        l = merges[r][0].get<std::string>();
        rr = merges[r][1].get<std::string>();
      }
      rank.emplace(l + rr, r);
    }
    for (int32_t i = 0; i < n; ++i) {
      const std::string& t = tokens[static_cast<size_t>(i)];
      if (t.size() == 6 && t.rfind("<0x", 0) == 0 && t.back() == '>' && types[static_cast<size_t>(i)] == kNormal)
        types[static_cast<size_t>(i)] = kByte;
      auto it = rank.find(t);
      scores[static_cast<size_t>(i)] = it == rank.end() ? 0.0f : -static_cast<float>(it->second + 1);
    }
    if (auto unk = m.find("unk_token"); unk != m.end() && unk->is_string())
      if (auto id = tok->token_to_id(unk->get<std::string>())) {
        types[static_cast<size_t>(*id)] = kUnknown;
        md.emplace_back("tokenizer.ggml.unknown_token_id", GgufValue::u32(static_cast<uint32_t>(*id)));
      }
    md.emplace_back("tokenizer.ggml.tokens", GgufValue::strings(tokens));
    md.emplace_back("tokenizer.ggml.scores", GgufValue::f32s(scores));
    // The scores give a piece one rank, but a tokenizer.json may rank the merges
    // producing the same piece apart (Gemma's runs of "▁"): the merges go along,
    // under the key llama.cpp reads only for gpt2 files, so loom reads back exactly.
    md.emplace_back("tokenizer.ggml.merges", GgufValue::strings(merge_strings(m)));
  } else {
    const KnownPreTokenizer* known = nullptr;
    for (const auto& k : known_pre_tokenizers())
      if (same_split(tj["pre_tokenizer"], k.pre_tokenizer) && tj["normalizer"] == k.normalizer) known = &k;
    if (!known)
      return unsupported(tp.string() + ": its pre-tokenizer and normalizer match none of llama.cpp's that loom knows (" +
                         known_names() + ")");
    md.emplace_back("tokenizer.ggml.model", GgufValue::string("gpt2"));
    md.emplace_back("tokenizer.ggml.pre", GgufValue::string(known->name));
    md.emplace_back("tokenizer.ggml.tokens", GgufValue::strings(tokens));
    md.emplace_back("tokenizer.ggml.merges", GgufValue::strings(merge_strings(m)));
  }
  md.emplace_back("tokenizer.ggml.token_type", GgufValue::i32s(types));
  if (auto b = tok->bos_token_id()) md.emplace_back("tokenizer.ggml.bos_token_id", GgufValue::u32(static_cast<uint32_t>(*b)));
  if (auto e = tok->eos_token_id()) md.emplace_back("tokenizer.ggml.eos_token_id", GgufValue::u32(static_cast<uint32_t>(*e)));
  // Whether encode adds BOS/EOS, as the checkpoint's tokenizer does it.
  LOOM_ASSIGN_OR_RETURN(Encoding probe, tok->encode("a", true));
  const bool adds_bos = tok->bos_token_id() && !probe.ids.empty() && probe.ids.front() == *tok->bos_token_id();
  const bool adds_eos = tok->eos_token_id() && probe.ids.size() > 1 && probe.ids.back() == *tok->eos_token_id();
  md.emplace_back("tokenizer.ggml.add_bos_token", GgufValue::boolean(adds_bos));
  md.emplace_back("tokenizer.ggml.add_eos_token", GgufValue::boolean(adds_eos));
  const auto& templates = tok->chat_templates();
  if (auto it = templates.find("default"); it != templates.end())
    md.emplace_back("tokenizer.chat_template", GgufValue::string(it->second));
  return md;
}

}  // namespace loom
