// BPE: merges applied lowest rank first (leftmost among equals), with byte_fallback,
// ignore_merges, continuing_subword_prefix, end_of_word_suffix and unk fusing exactly as
// `tokenizers` does them. Pieces are cached per thread.
#include <atomic>
#include <queue>

#include "loom/core/logging.h"
#include "tokenizer/components.h"
#include "tokenizer/model_factories.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"

namespace loom::tok {
namespace {

struct MergeInfo {
  uint32_t rank;
  int32_t new_id;
};

// (left id, right id) → merge, open addressing: BPE probes it for every adjacent pair,
// and node-based maps spend that time on cache misses.
class PairMap {
 public:
  void reserve(size_t n) { rehash(n * 2 + 16); }
  void set(uint64_t key, MergeInfo v) {
    if ((size_ + 1) * 2 > keys_.size()) rehash(keys_.size() * 2 + 16);
    size_t mask = keys_.size() - 1;
    for (size_t i = slot(key) & mask;; i = (i + 1) & mask) {
      if (keys_[i] == kEmpty) {
        keys_[i] = key;
        vals_[i] = v;
        ++size_;
        return;
      }
      if (keys_[i] == key) {
        vals_[i] = v;  // a repeated merge takes its later rank, like the library's map
        return;
      }
    }
  }
  const MergeInfo* find(uint64_t key) const {
    if (keys_.empty()) return nullptr;
    size_t mask = keys_.size() - 1;
    for (size_t i = slot(key) & mask;; i = (i + 1) & mask) {
      if (keys_[i] == key) return &vals_[i];
      if (keys_[i] == kEmpty) return nullptr;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~0ull;
  static size_t slot(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return static_cast<size_t>(k);
  }
  void rehash(size_t want) {
    size_t cap = 16;
    while (cap < want) cap <<= 1;
    if (cap <= keys_.size()) return;
    std::vector<uint64_t> old_keys = std::move(keys_);
    std::vector<MergeInfo> old_vals = std::move(vals_);
    keys_.assign(cap, kEmpty);
    vals_.assign(cap, MergeInfo{});
    size_ = 0;
    for (size_t i = 0; i < old_keys.size(); ++i)
      if (old_keys[i] != kEmpty) set(old_keys[i], old_vals[i]);
  }
  std::vector<uint64_t> keys_;
  std::vector<MergeInfo> vals_;
  size_t size_ = 0;
};

struct Piece {
  int32_t id;
  uint32_t len;
};

class Bpe final : public Model {
 public:
  Vocab vocab;
  PairMap merges;
  std::optional<std::string> unk_token;
  std::optional<std::string> prefix, suffix;
  bool fuse_unk = false, byte_fallback = false, ignore_merges = false;
  int32_t byte_ids[256];
  bool have_all_bytes = false;
  uint64_t instance = next_instance();

  Status tokenize(std::string_view piece, std::vector<Token>& out) const override {
    if (piece.empty()) return Status::Ok();
    // The cache holds the final answer for a piece (ignore_merges' whole-piece match
    // included), so a hit needs no vocabulary probe.
    Cache& cache = thread_cache();
    constexpr size_t kMaxCached = 256;
    const bool cacheable = piece.size() < kMaxCached;
    if (cacheable) {
      auto it = cache.map.find(piece);
      if (it != cache.map.end()) {
        emit(it->second, out);
        return Status::Ok();
      }
    }
    std::vector<Piece> word;
    std::optional<int32_t> whole = ignore_merges ? vocab.find(piece) : std::nullopt;
    if (whole) {
      word.push_back({*whole, static_cast<uint32_t>(piece.size())});
    } else {
      LOOM_RETURN_IF_ERROR(merge_word(piece, word));
    }
    emit(word, out);
    if (cacheable) {
      if (cache.map.size() >= kCacheCapacity) cache.map.clear();
      cache.map.emplace(std::string(piece), std::move(word));
    }
    return Status::Ok();
  }

  std::optional<int32_t> token_to_id(std::string_view t) const override { return vocab.find(t); }
  const std::string* id_to_token(int32_t id) const override { return vocab.token(id); }
  int32_t vocab_size() const override { return static_cast<int32_t>(vocab.size()); }
  int32_t id_limit() const override { return vocab.id_limit(); }

 private:
  static constexpr size_t kCacheCapacity = 10000;
  struct Cache {
    uint64_t owner = 0;
    std::unordered_map<std::string, std::vector<Piece>, StringHash, std::equal_to<>> map;
  };
  static uint64_t next_instance() {
    static std::atomic<uint64_t> counter{1};
    return counter++;
  }
  Cache& thread_cache() const {
    // One cache per thread per model; a thread switching models starts afresh.
    thread_local std::vector<Cache> caches;
    for (Cache& c : caches)
      if (c.owner == instance) return c;
    if (caches.size() >= 8) caches.erase(caches.begin());
    caches.push_back(Cache{instance, {}});
    return caches.back();
  }

  static void emit(const std::vector<Piece>& word, std::vector<Token>& out) {
    uint32_t off = 0;
    for (const Piece& p : word) {
      out.push_back({p.id, off, off + p.len, {}, false});
      off += p.len;
    }
  }

  Status merge_word(std::string_view w, std::vector<Piece>& word) const {
    word.reserve(w.size());
    bool have_unk = false;
    Piece unk{0, 0};
    std::string buf;
    for (size_t i = 0; i < w.size();) {
      size_t len = uni::utf8_len(static_cast<unsigned char>(w[i]));
      bool first = i == 0, last = i + len >= w.size();
      std::string_view s = w.substr(i, len);
      if ((!first && prefix) || (last && suffix)) {
        buf.clear();
        if (!first && prefix) buf += *prefix;
        buf += s;
        if (last && suffix) buf += *suffix;
        s = buf;
      }
      i += len;
      if (auto id = vocab.find(s)) {
        if (have_unk) {
          word.push_back(unk);
          have_unk = false;
        }
        word.push_back({*id, static_cast<uint32_t>(len)});
        continue;
      }
      if (byte_fallback) {
        bool all = true;
        for (unsigned char b : s) all &= byte_ids[b] >= 0;
        if (all) {
          // The library does not flush a pending unk here; kept.
          for (unsigned char b : s) word.push_back({byte_ids[b], 1});
          continue;
        }
      }
      if (unk_token) {
        auto unk_id = vocab.find(*unk_token);
        if (!unk_id) return invalid_argument("BPE: unk_token \"" + *unk_token + "\" is not in the vocabulary");
        if (have_unk && fuse_unk) {
          unk.len += static_cast<uint32_t>(len);
        } else {
          if (have_unk) word.push_back(unk);
          unk = {*unk_id, static_cast<uint32_t>(len)};
          have_unk = true;
        }
      }
    }
    if (have_unk) word.push_back(unk);
    merge_all(word);
    return Status::Ok();
  }

  void merge_all(std::vector<Piece>& word) const {
    size_t n = word.size();
    if (n < 2) return;
    std::vector<int32_t> prev(n), next(n);
    for (size_t i = 0; i < n; ++i) {
      prev[i] = static_cast<int32_t>(i) - 1;
      next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
    }
    struct Cand {
      uint32_t rank;
      uint32_t pos;
      int32_t new_id;
      bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::vector<Cand> heap_storage;
    heap_storage.reserve(n);
    std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> queue(std::greater<Cand>(), std::move(heap_storage));
    auto lookup = [&](int32_t a, int32_t b) -> const MergeInfo* {
      return merges.find((uint64_t(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b));
    };
    for (size_t i = 0; i + 1 < n; ++i)
      if (const MergeInfo* m = lookup(word[i].id, word[i + 1].id)) queue.push({m->rank, static_cast<uint32_t>(i), m->new_id});
    while (!queue.empty()) {
      Cand top = queue.top();
      queue.pop();
      uint32_t pos = top.pos;
      if (word[pos].len == 0 || next[pos] < 0) continue;
      int32_t right = next[pos];
      const MergeInfo* m = lookup(word[pos].id, word[right].id);
      if (!m || m->new_id != top.new_id) continue;
      word[pos].id = top.new_id;
      word[pos].len += word[right].len;
      word[right].len = 0;
      next[pos] = next[right];
      if (next[right] >= 0) prev[next[right]] = static_cast<int32_t>(pos);
      if (prev[pos] >= 0) {
        if (const MergeInfo* pm = lookup(word[prev[pos]].id, word[pos].id))
          queue.push({pm->rank, static_cast<uint32_t>(prev[pos]), pm->new_id});
      }
      if (next[pos] >= 0) {
        if (const MergeInfo* nm = lookup(word[pos].id, word[next[pos]].id)) queue.push({nm->rank, pos, nm->new_id});
      }
    }
    size_t k = 0;
    for (size_t i = 0; i < n; ++i)
      if (word[i].len != 0) word[k++] = word[i];
    word.resize(k);
  }
};

}  // namespace

Result<std::unique_ptr<Model>> make_bpe(const json& j, const std::string& path, ModelTables* tables) {
  auto m = std::make_unique<Bpe>();
  LOOM_ASSIGN_OR_RETURN(auto entries, read_vocab_entries(j, path, tables));
  m->vocab.reserve(entries.size());
  for (auto& [token, id] : entries) m->vocab.add(std::move(token), id);
  LOOM_ASSIGN_OR_RETURN(m->unk_token, read_opt_string(j, path, "unk_token"));
  LOOM_ASSIGN_OR_RETURN(m->prefix, read_opt_string(j, path, "continuing_subword_prefix"));
  LOOM_ASSIGN_OR_RETURN(m->suffix, read_opt_string(j, path, "end_of_word_suffix"));
  LOOM_ASSIGN_OR_RETURN(m->fuse_unk, read_bool(j, path, "fuse_unk", false));
  LOOM_ASSIGN_OR_RETURN(m->byte_fallback, read_bool(j, path, "byte_fallback", false));
  LOOM_ASSIGN_OR_RETURN(m->ignore_merges, read_bool(j, path, "ignore_merges", false));
  auto dit = j.find("dropout");
  if (dit != j.end() && !dit->is_null()) {
    if (!dit->is_number()) return field_error(field_path(path, "dropout"), "expected a number or null");
    double d = dit->get<double>();
    if (d < 0.0 || d > 1.0) return field_error(field_path(path, "dropout"), "must be in [0, 1]");
    // Dropout is a training-time regularizer; inference uses the deterministic merges.
    if (d > 0.0) log_warn(path + ".dropout = " + std::to_string(d) + " is ignored: loom encodes deterministically");
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    auto id = m->vocab.find(name);
    m->byte_ids[b] = id ? *id : -1;
  }

  const size_t prefix_len = m->prefix ? m->prefix->size() : 0;
  std::string merged;
  // Merge i of left + right; its errors name it (built only for an error: 515k merges).
  auto add_merge = [&](size_t i, std::string_view a, std::string_view b) -> Status {
    auto where = [&] { return field_path(path, "merges") + "[" + std::to_string(i) + "]"; };
    auto ia = m->vocab.find(a);
    if (!ia) return field_error(where(), "token \"" + std::string(a) + "\" is not in the vocabulary");
    auto ib = m->vocab.find(b);
    if (!ib) return field_error(where(), "token \"" + std::string(b) + "\" is not in the vocabulary");
    if (b.size() < prefix_len)
      return field_error(where(), "token \"" + std::string(b) + "\" is shorter than continuing_subword_prefix");
    merged.assign(a).append(b.substr(prefix_len));
    auto in = m->vocab.find(merged);
    if (!in) return field_error(where(), "merged token \"" + merged + "\" is not in the vocabulary");
    m->merges.set((uint64_t(static_cast<uint32_t>(*ia)) << 32) | static_cast<uint32_t>(*ib), {static_cast<uint32_t>(i), *in});
    return Status::Ok();
  };
  auto add_string_merge = [&](size_t i, const std::string& s) -> Status {
    const size_t sp = s.find(' ');
    if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
      return field_error(field_path(path, "merges") + "[" + std::to_string(i) + "]", "expected \"left right\", got \"" + s + "\"");
    return add_merge(i, std::string_view(s).substr(0, sp), std::string_view(s).substr(sp + 1));
  };
  auto other_merge = [&](size_t i) {
    return field_error(field_path(path, "merges") + "[" + std::to_string(i) + "]", "expected \"left right\" or [left, right]");
  };
  if (tables && tables->has_merges) {
    m->merges.reserve(tables->merges.size());
    for (size_t i = 0; i < tables->merges.size(); ++i) {
      const ModelTables::Merge& e = tables->merges[i];
      if (e.kind == ModelTables::Merge::kString) LOOM_RETURN_IF_ERROR(add_string_merge(i, e.left));
      else if (e.kind == ModelTables::Merge::kPair) LOOM_RETURN_IF_ERROR(add_merge(i, e.left, e.right));
      else return other_merge(i);
    }
    tables->merges.clear();
  } else if (auto mit = j.find("merges"); mit != j.end() && !mit->is_null()) {
    if (!mit->is_array()) return field_error(field_path(path, "merges"), "expected an array");
    m->merges.reserve(mit->size());
    for (size_t i = 0; i < mit->size(); ++i) {
      const json& e = (*mit)[i];
      if (e.is_string()) {
        LOOM_RETURN_IF_ERROR(add_string_merge(i, e.get_ref<const std::string&>()));
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        LOOM_RETURN_IF_ERROR(add_merge(i, e[0].get_ref<const std::string&>(), e[1].get_ref<const std::string&>()));
      } else {
        return other_merge(i);
      }
    }
  }
  return std::unique_ptr<Model>(std::move(m));
}

}  // namespace loom::tok
