#include "loom/tokenizer/tokenizer.h"

#include "loom/io/checkpoint.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "loom/core/logging.h"
#include "loom/core/thread_pool.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace loom {
namespace tok {

const std::string* TokenizerImpl::id_to_token(int32_t id) const {
  if (const AddedToken* t = added.token(id)) return &t->content;
  return model->id_to_token(id);
}

Status TokenizerImpl::encode(std::string_view text, bool add_special_tokens, Encoding* out) const {
  size_t bad = uni::find_invalid_utf8(text);
  if (bad != std::string_view::npos)
    return invalid_argument("encode: input is not valid UTF-8 (byte " + std::to_string(bad) + ")");
  if (text.size() >= UINT32_MAX) return invalid_argument("encode: input longer than 4 GiB");

  EncodingData enc;
  bool done = false;
  if (byte_level_plan && use_fast_path) done = encode_byte_level(text, enc);
  if (!done) {
    enc = EncodingData();
    LOOM_RETURN_IF_ERROR(encode_general(text, enc));
  }

  // Char offsets (what the library's bindings report): byte → char index, where an end
  // inside a char maps to that char's index and an end at the text's end to the count.
  bool ascii = true;
  for (char c : text) ascii &= static_cast<unsigned char>(c) < 0x80;
  if (ascii) {
    enc.offsets = enc.byte_offsets;
  } else {
    std::vector<uint32_t> char_of(text.size());
    uint32_t ci = 0;
    for (size_t i = 0; i < text.size();) {
      int len = uni::utf8_len(static_cast<unsigned char>(text[i]));
      for (int k = 0; k < len; ++k) char_of[i + k] = ci;
      i += len;
      ++ci;
    }
    enc.offsets.resize(enc.byte_offsets.size());
    for (size_t i = 0; i < enc.byte_offsets.size(); ++i) {
      auto o = enc.byte_offsets[i];
      if (o.first >= text.size()) {
        enc.offsets[i] = o;
        continue;
      }
      size_t e = o.second < text.size() ? char_of[o.second] : char_of[o.second - 1] + 1;
      enc.offsets[i] = {char_of[o.first], e};
    }
  }
  enc.special_tokens_mask.assign(enc.ids.size(), 0);
  enc.type_ids.assign(enc.ids.size(), 0);
  if (post_processor) post_processor->process(enc, add_special_tokens);

  out->ids = std::move(enc.ids);
  out->tokens = std::move(enc.tokens);
  out->offsets = std::move(enc.offsets);
  out->byte_offsets = std::move(enc.byte_offsets);
  out->special_tokens_mask = std::move(enc.special_tokens_mask);
  out->type_ids = std::move(enc.type_ids);
  return Status::Ok();
}

Status TokenizerImpl::encode_general(std::string_view text, EncodingData& enc) const {
  PreTokenizedString pts;
  LOOM_RETURN_IF_ERROR(added.extract_and_normalize(text, normalizer.get(), pts));
  if (pre_tokenizer) LOOM_RETURN_IF_ERROR(pre_tokenizer->pre_tokenize(pts));
  for (Split& s : pts.splits) {
    if (s.has_tokens) continue;
    LOOM_RETURN_IF_ERROR(model->tokenize(s.normalized.get(), s.tokens));
    s.has_tokens = true;
  }
  size_t n = 0;
  for (const Split& s : pts.splits) n += s.tokens.size();
  enc.ids.reserve(n + 4);
  enc.tokens.reserve(n + 4);
  enc.byte_offsets.reserve(n + 4);
  for (Split& s : pts.splits) {
    for (Token& t : s.tokens) {
      enc.ids.push_back(t.id);
      if (t.own_value) {
        enc.tokens.push_back(std::move(t.value));
      } else {
        const std::string* v = model->id_to_token(t.id);
        enc.tokens.push_back(v ? *v : std::string());
      }
      auto r = s.normalized.original_range(t.start, t.end);
      enc.byte_offsets.push_back({r.first, r.second});
    }
  }
  return Status::Ok();
}

bool TokenizerImpl::encode_byte_level(std::string_view text, EncodingData& enc) const {
  const ByteLevelPlan& plan = *byte_level_plan;
  const auto& table = ByteLevelTable::get();
  auto char_start = [&](size_t b) {
    while (b > 0 && (static_cast<unsigned char>(text[b]) & 0xC0) == 0x80) --b;
    return b;
  };
  auto emit_added = [&](int32_t id, size_t s, size_t e) {
    enc.ids.push_back(id);
    enc.tokens.emplace_back(text.substr(s, e - s));
    enc.byte_offsets.push_back({s, e});
  };
  std::vector<AddedVocabulary::Piece> outer, inner;
  std::vector<std::pair<uint32_t, uint32_t>> ranges, next;
  std::string mapped;
  std::vector<uint32_t> src;
  std::vector<Token> tokens;

  added.find_pieces(text, false, &outer);
  if (outer.empty() && !text.empty()) outer.push_back({-1, 0, text.size()});
  for (const auto& piece : outer) {
    if (piece.id >= 0) {
      emit_added(piece.id, piece.start, piece.end);
      continue;
    }
    std::string_view seg = text.substr(piece.start, piece.end - piece.start);
    if (plan.nfc) {
      for (size_t i = 0; i < seg.size();) {
        int len;
        char32_t c = uni::decode(seg.data() + i, &len);
        if (!uni::nfc_inert(c)) return false;
        i += len;
      }
    }
    inner.clear();
    if (added.has_normalized_tokens()) added.find_pieces(seg, true, &inner);
    if (inner.empty()) inner.push_back({-1, 0, seg.size()});
    for (const auto& sub : inner) {
      size_t base = piece.start + sub.start;
      if (sub.id >= 0) {
        emit_added(sub.id, base, piece.start + sub.end);
        continue;
      }
      ranges.assign(1, {static_cast<uint32_t>(base), static_cast<uint32_t>(piece.start + sub.end)});
      for (const auto& st : plan.stages) {
        next.clear();
        for (auto [rs, re] : ranges) {
          std::string_view part = text.substr(rs, re - rs);
          MatchList m = st.re ? st.re->find_matches(part) : find_literal(part, st.literal);
          if (st.invert)
            for (auto& x : m) x.second = !x.second;
          for (const auto& [r, remove] : apply_split_behavior(m, st.behavior))
            if (!remove && r.second > r.first) next.push_back({rs + r.first, rs + r.second});
        }
        ranges.swap(next);
      }
      for (auto [rs, re] : ranges) {
        mapped.clear();
        src.clear();
        for (uint32_t b = rs; b < re; ++b) {
          const std::string& m = table.byte_to_utf8[static_cast<unsigned char>(text[b])];
          mapped += m;
          src.insert(src.end(), m.size(), b);
        }
        tokens.clear();
        if (!model->tokenize(mapped, tokens).ok()) return false;
        for (const Token& t : tokens) {
          enc.ids.push_back(t.id);
          if (t.own_value) {
            enc.tokens.push_back(t.value);
          } else {
            const std::string* v = model->id_to_token(t.id);
            enc.tokens.push_back(v ? *v : std::string());
          }
          size_t first = char_start(src[t.start]);
          size_t last = char_start(src[t.end - 1]);
          enc.byte_offsets.push_back({first, last + uni::utf8_len(static_cast<unsigned char>(text[last]))});
        }
      }
    }
  }
  return true;
}

void set_fast_path_for_testing(const Tokenizer& t, bool enabled) {
  const_cast<TokenizerImpl&>(t.impl()).use_fast_path = enabled;
}

bool has_fast_path(const Tokenizer& t) { return t.impl().byte_level_plan.has_value(); }

std::optional<ByteLevelPlan> detect_byte_level_plan(const json& j) {
  auto type_of = [](const json& x) -> std::string {
    return x.is_object() && x.contains("type") && x["type"].is_string() ? x["type"].get<std::string>() : "";
  };
  const json& model = j["model"];
  if (!model.is_object() || !(type_of(model) == "BPE" || (!model.contains("type") && model.contains("merges"))))
    return std::nullopt;
  ByteLevelPlan plan;
  const json& norm = j.contains("normalizer") ? j["normalizer"] : json();
  if (!norm.is_null()) {
    std::string t = type_of(norm);
    if (t == "NFC") {
      plan.nfc = true;
    } else if (!(t == "Sequence" && norm.contains("normalizers") && norm["normalizers"].is_array() &&
                 norm["normalizers"].empty())) {
      return std::nullopt;
    }
  }
  const json& pre = j.contains("pre_tokenizer") ? j["pre_tokenizer"] : json();
  std::vector<const json*> items;
  if (type_of(pre) == "Sequence" && pre.contains("pretokenizers") && pre["pretokenizers"].is_array()) {
    for (const auto& p : pre["pretokenizers"]) items.push_back(&p);
  } else if (pre.is_object()) {
    items.push_back(&pre);
  }
  if (items.empty() || type_of(*items.back()) != "ByteLevel") return std::nullopt;
  auto flag = [](const json& x, const char* k, bool d) { return x.contains(k) && x[k].is_boolean() ? x[k].get<bool>() : d; };
  const json& bl = *items.back();
  if (flag(bl, "add_prefix_space", true)) return std::nullopt;
  for (size_t i = 0; i + 1 < items.size(); ++i) {
    const json& sp = *items[i];
    if (type_of(sp) != "Split" || !sp.contains("pattern") || !sp["pattern"].is_object()) return std::nullopt;
    ByteLevelPlan::Stage st;
    const json& pat = sp["pattern"];
    if (pat.contains("String") && pat["String"].is_string()) {
      st.literal = pat["String"].get<std::string>();
    } else if (pat.contains("Regex") && pat["Regex"].is_string()) {
      auto re = Regex::compile(pat["Regex"].get<std::string>());
      if (!re.ok()) return std::nullopt;
      st.re = re.value();
    } else {
      return std::nullopt;
    }
    std::string b = sp.contains("behavior") && sp["behavior"].is_string() ? sp["behavior"].get<std::string>() : "Isolated";
    if (b == "Removed") st.behavior = SplitBehavior::kRemoved;
    else if (b == "Isolated") st.behavior = SplitBehavior::kIsolated;
    else if (b == "MergedWithPrevious") st.behavior = SplitBehavior::kMergedWithPrevious;
    else if (b == "MergedWithNext") st.behavior = SplitBehavior::kMergedWithNext;
    else if (b == "Contiguous") st.behavior = SplitBehavior::kContiguous;
    else return std::nullopt;
    st.invert = flag(sp, "invert", false);
    plan.stages.push_back(std::move(st));
  }
  if (flag(bl, "use_regex", true)) {
    ByteLevelPlan::Stage st;
    st.re = Regex::compile(R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)").value();
    st.behavior = SplitBehavior::kIsolated;
    st.invert = false;
    plan.stages.push_back(std::move(st));
  }
  return plan;
}

Status TokenizerImpl::ids_to_tokens(const int32_t* ids, size_t n, bool skip_special,
                                    std::vector<std::string>* out) const {
  out->clear();
  out->reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string* t = id_to_token(ids[i]);
    if (!t)
      return out_of_range("decode: id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                          " is not in the vocabulary (size " + std::to_string(id_limit) + ")");
    if (skip_special && added.is_special(*t)) continue;
    out->push_back(*t);
  }
  return Status::Ok();
}

Status TokenizerImpl::decode_tokens(std::vector<std::string>& tokens, std::string* out) const {
  out->clear();
  if (decoder) {
    LOOM_RETURN_IF_ERROR(decoder->decode_chain(tokens));
    for (const auto& t : tokens) *out += t;
  } else {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i) out->push_back(' ');
      *out += tokens[i];
    }
  }
  return Status::Ok();
}

Result<std::unique_ptr<TokenizerImpl>> parse_tokenizer_json(std::string_view text, const std::string& name) {
  ModelTables tables;
  LOOM_ASSIGN_OR_RETURN(json j, parse_json_like_serde(text, name, &tables));
  auto ctx = [&](const Status& s) { return Status(s.code(), name + ": " + s.message()); };
  if (!j.is_object()) return parse_error(name + ": expected a JSON object");
  auto impl = std::make_unique<TokenizerImpl>();
  auto get = [&](const char* key) -> const json& {
    static const json null_json;
    auto it = j.find(key);
    return it == j.end() ? null_json : *it;
  };
  if (!j.contains("model")) return parse_error(name + ": model: missing");
  auto model = make_model(j["model"], "model", &tables);
  if (!model.ok()) return ctx(model.status());
  impl->model = std::move(model).value();
  auto norm = make_normalizer(get("normalizer"), "normalizer");
  if (!norm.ok()) return ctx(norm.status());
  impl->normalizer = std::move(norm).value();
  auto pre = make_pre_tokenizer(get("pre_tokenizer"), "pre_tokenizer");
  if (!pre.ok()) return ctx(pre.status());
  impl->pre_tokenizer = std::move(pre).value();
  auto post = make_post_processor(get("post_processor"), "post_processor");
  if (!post.ok()) return ctx(post.status());
  impl->post_processor = std::move(post).value();
  auto dec = make_decoder(get("decoder"), "decoder");
  if (!dec.ok()) return ctx(dec.status());
  impl->decoder = std::move(dec).value();
  for (const char* k : {"truncation", "padding"}) {
    if (!get(k).is_null())
      log_warn(name + ": " + k + " is set; loom ignores it (lengths are the caller's business)");
  }

  std::vector<std::pair<AddedToken, int64_t>> added;
  const json& at = get("added_tokens");
  if (!at.is_null()) {
    if (!at.is_array()) return parse_error(name + ": added_tokens: expected an array");
    for (size_t i = 0; i < at.size(); ++i) {
      std::string p = "added_tokens[" + std::to_string(i) + "]";
      const json& e = at[i];
      if (!e.is_object()) return parse_error(name + ": " + p + ": expected an object");
      AddedToken t;
      auto content = read_string(e, p, "content");
      if (!content.ok()) return ctx(content.status());
      t.content = content.value();
      auto b = [&](const char* key, bool fallback, bool* dst) -> Status {
        auto v = read_bool(e, p, key, fallback);
        if (!v.ok()) return ctx(v.status());
        *dst = v.value();
        return Status::Ok();
      };
      LOOM_RETURN_IF_ERROR(b("single_word", false, &t.single_word));
      LOOM_RETURN_IF_ERROR(b("lstrip", false, &t.lstrip));
      LOOM_RETURN_IF_ERROR(b("rstrip", false, &t.rstrip));
      LOOM_RETURN_IF_ERROR(b("special", false, &t.special));
      LOOM_RETURN_IF_ERROR(b("normalized", !t.special, &t.normalized));
      auto id = read_int(e, p, "id", int64_t{-1});
      if (!id.ok()) return ctx(id.status());
      added.push_back({std::move(t), id.value()});
    }
  }
  impl->added.add_tokens(added, *impl->model, impl->normalizer.get());

  int32_t limit = impl->model->id_limit();
  int32_t extra = 0;
  for (const auto& [content, id] : impl->added.map()) {
    limit = std::max(limit, id + 1);
    if (!impl->model->token_to_id(content)) ++extra;
  }
  impl->id_limit = limit;
  impl->byte_level_plan = detect_byte_level_plan(j);
  impl->vocab_size = impl->model->vocab_size() + extra;
  return impl;
}

}  // namespace tok

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

static Result<std::string> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return not_found(path + ": cannot open");
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return io_error(path + ": read failed");
  return ss.str();
}

Result<std::shared_ptr<Tokenizer>> Tokenizer::from_json_string(std::string_view json_text, const std::string& name) {
  LOOM_ASSIGN_OR_RETURN(auto impl, tok::parse_tokenizer_json(json_text, name));
  std::shared_ptr<Tokenizer> t(new Tokenizer());
  t->impl_ = std::move(impl);
  return t;
}

Result<std::shared_ptr<Tokenizer>> Tokenizer::from_file(const std::string& path) {
  LOOM_ASSIGN_OR_RETURN(std::string text, read_file(path));
  return from_json_string(text, path);
}

Result<std::shared_ptr<Tokenizer>> Tokenizer::from_path(const std::string& file_or_dir) {
  std::error_code ec;
  if (std::filesystem::is_directory(file_or_dir, ec)) return from_dir(file_or_dir);
  if (Checkpoint::is_gguf_file(file_or_dir)) return from_gguf(file_or_dir);
  return from_file(file_or_dir);
}

Result<Encoding> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  Encoding e;
  LOOM_RETURN_IF_ERROR(impl_->encode(text, add_special_tokens, &e));
  return e;
}

Result<std::vector<Encoding>> Tokenizer::encode_batch(const std::vector<std::string>& texts, bool add_special_tokens,
                                                      ThreadPool* pool) const {
  std::vector<Encoding> out(texts.size());
  std::vector<Status> status(texts.size());
  ThreadPool& p = pool ? *pool : ThreadPool::global();
  p.parallel_for(static_cast<int64_t>(texts.size()), [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) status[i] = impl_->encode(texts[i], add_special_tokens, &out[i]);
  });
  for (size_t i = 0; i < status.size(); ++i)
    if (!status[i].ok()) return status[i].with_context("encode_batch[" + std::to_string(i) + "]");
  return out;
}

Result<std::string> Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  LOOM_RETURN_IF_ERROR(impl_->ids_to_tokens(ids.data(), ids.size(), skip_special_tokens, &tokens));
  std::string out;
  LOOM_RETURN_IF_ERROR(impl_->decode_tokens(tokens, &out));
  return out;
}

int32_t Tokenizer::vocab_size() const { return impl_->vocab_size; }
int32_t Tokenizer::id_limit() const { return impl_->id_limit; }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (auto id = impl_->added.token_to_id(token)) return id;
  return impl_->model->token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  const std::string* t = impl_->id_to_token(id);
  if (!t) return std::nullopt;
  return *t;
}

bool Tokenizer::is_special_id(int32_t id) const {
  const std::string* t = impl_->id_to_token(id);
  return t && impl_->added.is_special(*t);
}

std::optional<int32_t> Tokenizer::bos_token_id() const { return impl_->bos_id; }
std::optional<int32_t> Tokenizer::eos_token_id() const { return impl_->eos_id; }
std::optional<std::string> Tokenizer::bos_token() const { return impl_->bos; }
std::optional<std::string> Tokenizer::eos_token() const { return impl_->eos; }
const nlohmann::json& Tokenizer::tokenizer_config() const { return impl_->config; }
const std::map<std::string, std::string>& Tokenizer::chat_templates() const { return impl_->chat_templates; }

}  // namespace loom
