// Unigram (SentencePiece): Viterbi over the vocabulary trie with the unknown-piece
// penalty, fused unknowns and byte_fallback, as `tokenizers`' encode_optimized.
#include <cmath>

#include "tokenizer/components.h"
#include "tokenizer/model_factories.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"

namespace loom::tok {
namespace {

class Unigram final : public Model {
 public:
  std::vector<std::string> pieces;
  std::vector<double> scores;
  Vocab vocab;
  std::optional<int32_t> unk_id;
  bool byte_fallback = false;
  bool fuse_unk = true;
  double min_score = 0.0;
  // Byte trie: node → children via hash of (node << 8 | byte); `terminal` holds the piece id.
  std::unordered_map<uint64_t, uint32_t> edges;
  std::vector<int32_t> terminal{-1};

  void build_trie() {
    for (size_t id = 0; id < pieces.size(); ++id) {
      uint32_t node = 0;
      for (unsigned char c : pieces[id]) {
        uint64_t key = (uint64_t(node) << 8) | c;
        auto it = edges.find(key);
        if (it == edges.end()) {
          uint32_t child = static_cast<uint32_t>(terminal.size());
          terminal.push_back(-1);
          edges.emplace(key, child);
          node = child;
        } else {
          node = it->second;
        }
      }
      terminal[node] = 1;  // marks a piece end; the id comes from the vocab lookup
    }
  }

  Status tokenize(std::string_view s, std::vector<Token>& out) const override {
    if (s.empty()) return Status::Ok();
    constexpr double kUnkPenalty = 10.0;
    const double unk_score = min_score - kUnkPenalty;
    struct Node {
      int32_t id = 0;
      double score = 0.0;
      int64_t starts_at = -1;
    };
    size_t size = s.size();
    std::vector<Node> best(size + 1);
    for (size_t start = 0; start < size;) {
      double till_here = best[start].score;
      bool has_single = false;
      size_t mblen = uni::utf8_len(static_cast<unsigned char>(s[start]));
      uint32_t node = 0;
      for (size_t k = start; k < size; ++k) {
        auto it = edges.find((uint64_t(node) << 8) | static_cast<unsigned char>(s[k]));
        if (it == edges.end()) break;
        node = it->second;
        if (terminal[node] < 0) continue;
        size_t key_pos = k + 1;
        std::string_view tok = s.substr(start, key_pos - start);
        int32_t id = *vocab.find(tok);
        double cand = scores[id] + till_here;
        Node& t = best[key_pos];
        if (t.starts_at < 0 || cand > t.score) {
          t.score = cand;
          t.starts_at = static_cast<int64_t>(start);
          t.id = id;
        }
        if (!has_single && key_pos - start == mblen) has_single = true;
      }
      if (!has_single) {
        if (!unk_id) return invalid_argument("Unigram: text needs the unknown piece but the model has no unk_id");
        Node& t = best[start + mblen];
        double cand = unk_score + till_here;
        if (t.starts_at < 0 || cand > t.score) {
          t.score = cand;
          t.starts_at = static_cast<int64_t>(start);
          t.id = *unk_id;
        }
      }
      start += mblen;
    }
    // Walk back; consecutive unknowns fuse into one piece.
    std::vector<std::pair<size_t, size_t>> spans;
    size_t end = size;
    size_t fused_end = 0;
    bool fusing = false;
    while (end > 0) {
      const Node& n = best[end];
      size_t st = static_cast<size_t>(n.starts_at);
      if (fuse_unk && unk_id && n.id == *unk_id) {
        if (!fusing) {
          fusing = true;
          fused_end = end;
        }
      } else {
        if (fusing) {
          spans.push_back({end, fused_end});
          fusing = false;
        }
        spans.push_back({st, end});
      }
      end = st;
    }
    if (fusing) spans.push_back({0, fused_end});
    uint32_t offset = 0;
    for (size_t i = spans.size(); i-- > 0;) {
      std::string_view str = s.substr(spans[i].first, spans[i].second - spans[i].first);
      uint32_t len = static_cast<uint32_t>(str.size());
      auto id = vocab.find(str);
      if (id) {
        out.push_back({*id, offset, offset + len, std::string(str), true});
      } else {
        bool done = false;
        if (byte_fallback) {
          std::vector<int32_t> ids;
          for (unsigned char b : str) {
            char name[8];
            std::snprintf(name, sizeof(name), "<0x%02X>", b);
            auto bid = vocab.find(name);
            if (!bid) break;
            ids.push_back(*bid);
          }
          if (ids.size() == str.size()) {
            for (size_t k = 0; k < ids.size(); ++k) {
              char name[8];
              std::snprintf(name, sizeof(name), "<0x%02X>", static_cast<unsigned char>(str[k]));
              out.push_back({ids[k], offset, offset + len, name, true});
            }
            done = true;
          }
        }
        if (!done) {
          if (!unk_id) return invalid_argument("Unigram: unknown piece and no unk_id");
          out.push_back({*unk_id, offset, offset + len, std::string(str), true});
        }
      }
      offset += len;
    }
    return Status::Ok();
  }

  std::optional<int32_t> token_to_id(std::string_view t) const override { return vocab.find(t); }
  const std::string* id_to_token(int32_t id) const override {
    if (id < 0 || id >= static_cast<int32_t>(pieces.size())) return nullptr;
    return &pieces[id];
  }
  int32_t vocab_size() const override { return static_cast<int32_t>(pieces.size()); }
  int32_t id_limit() const override { return static_cast<int32_t>(pieces.size()); }
};

}  // namespace

Result<std::unique_ptr<Model>> make_unigram(const json& j, const std::string& path) {
  auto m = std::make_unique<Unigram>();
  LOOM_ASSIGN_OR_RETURN(const json* vocab, read_array(j, path, "vocab"));
  m->pieces.reserve(vocab->size());
  m->scores.reserve(vocab->size());
  m->min_score = INFINITY;
  for (size_t i = 0; i < vocab->size(); ++i) {
    const json& e = (*vocab)[i];
    if (!e.is_array() || e.size() != 2 || !e[0].is_string() || !e[1].is_number())
      return field_error(field_path(path, "vocab") + "[" + std::to_string(i) + "]", "expected [piece, score]");
    m->pieces.push_back(e[0].get<std::string>());
    double sc = e[1].get<double>();
    m->scores.push_back(sc);
    m->min_score = std::min(m->min_score, sc);
    m->vocab.add_if_absent(m->pieces.back(), static_cast<int32_t>(i));
  }
  LOOM_ASSIGN_OR_RETURN(int64_t unk, read_int(j, path, "unk_id", int64_t{-1}));
  if (unk >= static_cast<int64_t>(m->pieces.size())) return field_error(field_path(path, "unk_id"), "beyond the vocabulary");
  if (unk >= 0) m->unk_id = static_cast<int32_t>(unk);
  LOOM_ASSIGN_OR_RETURN(m->byte_fallback, read_bool(j, path, "byte_fallback", false));
  m->build_trie();
  return std::unique_ptr<Model>(std::move(m));
}

}  // namespace loom::tok
