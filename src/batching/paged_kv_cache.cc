#include "loom/batching/paged_kv_cache.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <string>

#include "loom/models/model.h"

namespace loom::batching {

KvCacheLayout KvCacheLayout::from_model(const models::Model& model) {
  KvCacheLayout l;
  l.num_layers = model.num_layers();
  l.num_kv_heads = model.num_kv_heads();
  l.head_dim = model.head_dim();
  for (const auto& a : model.module().settings().layers) l.sliding_window.push_back(a.sliding_window);
  return l;
}

namespace {

struct Grouping {
  std::vector<int64_t> windows;
  std::vector<std::vector<int>> layers;
};

// Full-attention layers first (group 0), then one group per distinct window.
Grouping group_layers(const KvCacheLayout& l) {
  if (l.num_layers <= 0 || l.num_kv_heads <= 0 || l.head_dim <= 0)
    throw Error(invalid_argument("paged KV cache: the model has no layers or no KV heads"));
  if (static_cast<int>(l.sliding_window.size()) != l.num_layers)
    throw Error(invalid_argument("paged KV cache: " + std::to_string(l.sliding_window.size()) +
                                 " sliding_window entries for " + std::to_string(l.num_layers) + " layers"));
  std::map<int64_t, std::vector<int>> by_window;
  for (int i = 0; i < l.num_layers; ++i) {
    const int64_t w = l.sliding_window[static_cast<size_t>(i)];
    if (w < 0) throw Error(invalid_argument("paged KV cache: layer " + std::to_string(i) + " has a negative window"));
    by_window[w].push_back(i);
  }
  Grouping g;
  for (auto& [w, layers] : by_window) {  // std::map: window 0 (full) comes first
    g.windows.push_back(w);
    g.layers.push_back(layers);
  }
  return g;
}

std::vector<int> layer_counts(const KvCacheLayout& l) {
  std::vector<int> n;
  for (const auto& layers : group_layers(l).layers) n.push_back(static_cast<int>(layers.size()));
  return n;
}

}  // namespace

PagedKvCache::PagedKvCache(const KvCacheLayout& layout, const PagedKvCacheOptions& o)
    : layout_(layout),
      page_size_(o.page_size),
      max_step_tokens_(std::max<int64_t>(1, o.max_step_tokens)),
      pool_(KvPageShape{o.page_size, layout.num_kv_heads, layout.head_dim, o.kv_format},
            o.page_size > 0 ? o.num_pages : 0, layer_counts(layout)) {
  const Grouping g = group_layers(layout_);
  layer_group_.assign(static_cast<size_t>(layout_.num_layers), 0);
  layer_index_.assign(static_cast<size_t>(layout_.num_layers), 0);
  for (size_t gi = 0; gi < g.windows.size(); ++gi) {
    groups_.push_back(Group{g.windows[gi], g.layers[gi]});
    for (size_t i = 0; i < g.layers[gi].size(); ++i) {
      layer_group_[static_cast<size_t>(g.layers[gi][i])] = static_cast<int>(gi);
      layer_index_[static_cast<size_t>(g.layers[gi][i])] = static_cast<int>(i);
    }
  }
  const bool has_sliding = std::any_of(groups_.begin(), groups_.end(), [](const Group& gr) { return gr.window > 0; });
  if (o.block_sharing && !has_sliding) {
    uint64_t salt = o.salt;
    while (salt == 0) salt = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
    prefix_ = std::make_unique<PrefixCache>(page_size_, salt);
  }
  if (o.swap_pages > 0) swap_ = std::make_unique<HostSwapPool>(pool_.shape(), o.swap_pages, o.swap_path);
}

void PagedKvCache::init_tables(SequenceKv& s) const {
  if (s.tables.size() != groups_.size()) {
    s.tables.assign(groups_.size(), {});
    s.first_live.assign(groups_.size(), 0);
  }
}

int64_t PagedKvCache::available_pages() const {
  int64_t cached = prefix_ ? prefix_->num_parked() * pool_.pages_per_block(0) : 0;
  return pool_.free_pages() + cached;
}

int64_t PagedKvCache::max_fit(const SequenceKv& s, int64_t start, int64_t count) const {
  const int64_t extra_pages = available_pages() / layout_.num_layers;  // a logical page costs one page per layer
  const int64_t max_end = (s.num_pages + extra_pages) * page_size_;
  return std::clamp<int64_t>(max_end - start, 0, count);
}

void PagedKvCache::evict_for(int64_t pages) {
  while (prefix_ && pool_.free_pages() < pages) {
    const BlockId b = prefix_->evict_oldest();
    if (b == kNoBlock) break;
    pool_.free(b);
    ++stats_.evicted_blocks;
  }
}

int64_t PagedKvCache::max_fit_free(const SequenceKv& s, int64_t start, int64_t count) const {
  const int64_t max_end = (s.num_pages + pool_.free_pages() / layout_.num_layers) * page_size_;
  return std::clamp<int64_t>(max_end - start, 0, count);
}

bool PagedKvCache::ensure(SequenceKv& s, int64_t end, bool may_evict) {
  init_tables(s);
  const int64_t add = ceil_pages(end) - s.num_pages;
  if (add <= 0) return true;
  const int64_t need = add * layout_.num_layers;
  if ((may_evict ? available_pages() : pool_.free_pages()) < need) return false;
  if (may_evict) evict_for(need);
  if (pool_.free_pages() < need) return false;
  for (int64_t p = 0; p < add; ++p)
    for (size_t g = 0; g < groups_.size(); ++g) s.tables[g].push_back(pool_.allocate(static_cast<int>(g)).value());
  s.num_pages += add;
  return true;
}

void PagedKvCache::release_block(BlockId b) {
  if (pool_.release(b) != 0) return;
  if (prefix_ && prefix_->contains(b)) prefix_->park(b);
  else pool_.free(b);
}

void PagedKvCache::trim(SequenceKv& s, int64_t end) {
  init_tables(s);
  const int64_t keep = ceil_pages(std::max<int64_t>(0, end));
  if (keep >= s.num_pages) return;
  // The reverse of ensure()'s order (page by page, group by group): pages just
  // given by ensure() go back to the pool's free list exactly as they came.
  for (int64_t p = s.num_pages - 1; p >= keep; --p) {
    for (size_t g = groups_.size(); g-- > 0;) {
      const BlockId b = s.tables[g][static_cast<size_t>(p)];
      if (b != kNoBlock) release_block(b);
    }
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    s.tables[g].resize(static_cast<size_t>(keep));
    s.first_live[g] = std::min(s.first_live[g], keep);
  }
  s.num_pages = keep;
  if (s.registered > keep) {
    s.registered = keep;
    s.keys.resize(static_cast<size_t>(keep));
  }
}

void PagedKvCache::release(SequenceKv& s) {
  init_tables(s);
  // Last blocks first, so a cached chain's head is parked last and evicted last;
  // in the reverse of ensure()'s order, as trim().
  for (int64_t p = s.num_pages - 1; p >= 0; --p) {
    for (size_t g = groups_.size(); g-- > 0;) {
      const BlockId b = s.tables[g][static_cast<size_t>(p)];
      if (b != kNoBlock) release_block(b);
    }
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    s.tables[g].clear();
    s.first_live[g] = 0;
  }
  s.num_pages = 0;
  s.keys.clear();
  s.registered = 0;
}

void PagedKvCache::drop_out_of_window(SequenceKv& s, int64_t next_position) {
  init_tables(s);
  for (size_t g = 0; g < groups_.size(); ++g) {
    const int64_t w = groups_[g].window;
    if (w == 0) continue;
    const int64_t first_needed = next_position - w + 1;  // the lowest position a future query reads
    const int64_t drop_to = std::min(s.num_pages, std::max<int64_t>(0, first_needed) / page_size_);
    for (int64_t p = s.first_live[g]; p < drop_to; ++p) {
      BlockId& b = s.tables[g][static_cast<size_t>(p)];
      if (b != kNoBlock) release_block(b);
      b = kNoBlock;
    }
    s.first_live[g] = std::max(s.first_live[g], drop_to);
  }
}

int64_t sliding_ring_pages(int64_t window, int64_t page_size, int64_t max_step_tokens) {
  // Live between steps: pages from the one holding next_position - window + 1 up
  // to the one holding next_position - 1; a step then adds up to max_step_tokens.
  return (window - 1 + std::max<int64_t>(1, max_step_tokens) + page_size - 1) / page_size + 1;
}

int64_t PagedKvCache::sliding_ring_pages(int64_t window) const {
  return batching::sliding_ring_pages(window, page_size_, max_step_tokens_);
}

KvFootprint kv_footprint(const KvCacheLayout& layout, int64_t length, int64_t page_size, int64_t max_step_tokens,
                         const graph::KvFormat& format) {
  if (page_size <= 0) throw Error(invalid_argument("kv_footprint: page_size must be positive"));
  const Grouping g = group_layers(layout);
  const int64_t logical = (std::max<int64_t>(0, length) + page_size - 1) / page_size;
  KvFootprint f;
  for (size_t gi = 0; gi < g.windows.size(); ++gi) {
    const int64_t w = g.windows[gi];
    const int64_t held = w == 0 ? logical : std::min(logical, sliding_ring_pages(w, page_size, max_step_tokens));
    f.paged_pages += held * static_cast<int64_t>(g.layers[gi].size());
  }
  f.full_pages = logical * layout.num_layers;
  const int64_t page_bytes = static_cast<int64_t>(KvPageShape{page_size, layout.num_kv_heads, layout.head_dim, format}.page_bytes());
  f.paged_bytes = f.paged_pages * page_bytes;
  f.full_bytes = f.full_pages * page_bytes;
  return f;
}

int64_t PagedKvCache::pages_for_length(int64_t length) const {
  const int64_t logical = ceil_pages(length);
  int64_t pages = 0;
  for (const Group& g : groups_) {
    const int64_t held = g.window == 0 ? logical : std::min(logical, sliding_ring_pages(g.window));
    pages += held * static_cast<int64_t>(g.layers.size());
  }
  return pages;
}

int64_t PagedKvCache::held_pages(const SequenceKv& s) const {
  int64_t n = 0;
  for (size_t g = 0; g < s.tables.size(); ++g)
    for (BlockId b : s.tables[g]) n += b != kNoBlock ? static_cast<int64_t>(groups_[g].layers.size()) : 0;
  return n;
}

int64_t PagedKvCache::match_prefix(SequenceKv& s, const std::vector<int32_t>& tokens) {
  init_tables(s);
  if (!prefix_ || s.num_pages != 0 || tokens.empty()) return 0;
  const int64_t max_blocks = (static_cast<int64_t>(tokens.size()) - 1) / page_size_;
  uint64_t prev = 0;
  BlockId parent = kNoBlock;
  for (int64_t j = 0; j < max_blocks; ++j) {
    const int32_t* t = tokens.data() + j * page_size_;
    const uint64_t key = prefix_->block_key(prev, t);
    const BlockId b = prefix_->find(key, t, parent);
    if (b == kNoBlock) break;
    prefix_->unpark(b);
    pool_.retain(b);
    s.tables[0].push_back(b);
    s.keys.push_back(key);
    ++s.num_pages;
    ++s.registered;
    ++stats_.prefix_hit_blocks;
    prev = key;
    parent = b;
  }
  return s.num_pages * page_size_;
}

void PagedKvCache::register_blocks(SequenceKv& s, const std::vector<int32_t>& tokens, int64_t num_computed) {
  if (!prefix_) return;
  init_tables(s);
  const int64_t full = std::min(num_computed / page_size_, s.num_pages);
  for (int64_t j = s.registered; j < full; ++j) {
    const int32_t* t = tokens.data() + j * page_size_;
    const uint64_t prev = j > 0 ? s.keys[static_cast<size_t>(j - 1)] : 0;
    const BlockId parent = j > 0 ? s.tables[0][static_cast<size_t>(j - 1)] : kNoBlock;
    const uint64_t key = prefix_->block_key(prev, t);
    BlockId& own = s.tables[0][static_cast<size_t>(j)];
    const BlockId got = prefix_->insert(key, t, parent, own);
    if (got != own) {
      prefix_->unpark(got);
      pool_.retain(got);
      release_block(own);
      own = got;
      ++stats_.dedup_blocks;
    }
    s.keys.push_back(key);
    s.registered = j + 1;
  }
}

bool PagedKvCache::fork(const SequenceKv& src, SequenceKv& dst, int64_t num_computed) {
  if (src.swapped || dst.num_pages != 0 || num_computed <= 0) return false;
  init_tables(dst);
  const int64_t pages = ceil_pages(num_computed);
  if (pages > src.num_pages) return false;
  const bool partial = num_computed % page_size_ != 0;
  int64_t need = 0;
  if (partial)
    for (size_t g = 0; g < groups_.size(); ++g)
      if (src.tables[g][static_cast<size_t>(pages - 1)] != kNoBlock) need += static_cast<int64_t>(groups_[g].layers.size());
  if (available_pages() < need) return false;
  evict_for(need);
  if (pool_.free_pages() < need) return false;
  const size_t k_bytes = pool_.shape().k_bytes(), v_bytes = pool_.shape().v_bytes();
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (int64_t p = 0; p < pages; ++p) {
      const BlockId b = src.tables[g][static_cast<size_t>(p)];
      if (b == kNoBlock || !(partial && p == pages - 1)) {
        if (b != kNoBlock) pool_.retain(b);
        dst.tables[g].push_back(b);
        continue;
      }
      const BlockId copy = pool_.allocate(static_cast<int>(g)).value();
      for (int i = 0; i < static_cast<int>(groups_[g].layers.size()); ++i) {
        std::memcpy(pool_.k_page(copy, i), pool_.k_page(b, i), k_bytes);
        std::memcpy(pool_.v_page(copy, i), pool_.v_page(b, i), v_bytes);
      }
      dst.tables[g].push_back(copy);
    }
    dst.first_live[g] = std::min(src.first_live[g], pages);
  }
  dst.num_pages = pages;
  dst.registered = std::min(src.registered, num_computed / page_size_);
  dst.keys.assign(src.keys.begin(), src.keys.begin() + dst.registered);
  return true;
}

bool PagedKvCache::swap_out(SequenceKv& s) {
  init_tables(s);
  if (!swap_ || s.swapped) return false;
  int64_t need = 0;
  for (size_t g = 0; g < groups_.size(); ++g)
    for (BlockId b : s.tables[g])
      if (b != kNoBlock) need += static_cast<int64_t>(groups_[g].layers.size());
  std::vector<int32_t> host = swap_->allocate(need);
  if (static_cast<int64_t>(host.size()) != need) return false;
  const size_t k_bytes = pool_.shape().k_bytes(), v_bytes = pool_.shape().v_bytes();
  size_t next = 0;
  s.host.assign(groups_.size(), {});
  for (size_t g = 0; g < groups_.size(); ++g) {
    const size_t n = groups_[g].layers.size();
    s.host[g].assign(static_cast<size_t>(s.num_pages) * n, -1);
    for (int64_t p = 0; p < s.num_pages; ++p) {
      const BlockId b = s.tables[g][static_cast<size_t>(p)];
      if (b == kNoBlock) continue;
      for (size_t i = 0; i < n; ++i) {
        const int32_t hp = host[next++];
        std::memcpy(swap_->k(hp), pool_.k_page(b, static_cast<int>(i)), k_bytes);
        std::memcpy(swap_->v(hp), pool_.v_page(b, static_cast<int>(i)), v_bytes);
        s.host[g][static_cast<size_t>(p) * n + i] = hp;
      }
    }
  }
  const int64_t pages = s.num_pages;
  release(s);
  s.num_pages = pages;  // logical length kept; tables refilled by swap_in
  s.swapped = true;
  ++stats_.swapped_out;
  return true;
}

int64_t PagedKvCache::swap_in_pages(const SequenceKv& s) const {
  int64_t need = 0;
  for (const auto& h : s.host)
    for (int32_t hp : h) need += hp >= 0;
  return need;
}

bool PagedKvCache::swap_in(SequenceKv& s) {
  if (!s.swapped) return true;
  const int64_t need = swap_in_pages(s);
  if (available_pages() < need) return false;
  evict_for(need);
  if (pool_.free_pages() < need) return false;
  init_tables(s);
  const size_t k_bytes = pool_.shape().k_bytes(), v_bytes = pool_.shape().v_bytes();
  for (size_t g = 0; g < groups_.size(); ++g) {
    const size_t n = groups_[g].layers.size();
    s.tables[g].assign(static_cast<size_t>(s.num_pages), kNoBlock);
    s.first_live[g] = s.num_pages;
    for (int64_t p = 0; p < s.num_pages; ++p) {
      if (s.host[g][static_cast<size_t>(p) * n] < 0) continue;
      const BlockId b = pool_.allocate(static_cast<int>(g)).value();
      for (size_t i = 0; i < n; ++i) {
        const int32_t hp = s.host[g][static_cast<size_t>(p) * n + i];
        std::memcpy(pool_.k_page(b, static_cast<int>(i)), swap_->k(hp), k_bytes);
        std::memcpy(pool_.v_page(b, static_cast<int>(i)), swap_->v(hp), v_bytes);
        swap_->free(hp);
      }
      s.tables[g][static_cast<size_t>(p)] = b;
      s.first_live[g] = std::min(s.first_live[g], p);
    }
  }
  s.host.clear();
  s.swapped = false;
  ++stats_.swapped_in;
  return true;
}

void PagedKvCache::discard_swap(SequenceKv& s) {
  if (!s.swapped) return;
  for (const auto& h : s.host)
    for (int32_t hp : h)
      if (hp >= 0) swap_->free(hp);
  s.host.clear();
  s.swapped = false;
  s.num_pages = 0;
}

void PagedKvCache::bind(StepKvView& view, const std::vector<const SequenceKv*>& seqs) const {
  const int L = layout_.num_layers;
  view.num_seqs_ = static_cast<int>(seqs.size());
  view.num_layers_ = L;
  view.page_size_ = page_size_;
  view.format_ = pool_.shape().format;
  view.memory_ = {pool_.storage().k(0), pool_.storage().bytes()};
  view.k_.clear();
  view.v_.clear();
  view.entries_.clear();
  for (const SequenceKv* s : seqs) {
    for (int l = 0; l < L; ++l) {
      const int g = layer_group_[static_cast<size_t>(l)];
      const int idx = layer_index_[static_cast<size_t>(l)];
      view.entries_.push_back({view.k_.size(), s->num_pages});
      for (int64_t p = 0; p < s->num_pages; ++p) {
        const BlockId b = s->tables.at(static_cast<size_t>(g))[static_cast<size_t>(p)];
        view.k_.push_back(b == kNoBlock ? nullptr : pool_.k_page(b, idx));
        view.v_.push_back(b == kNoBlock ? nullptr : pool_.v_page(b, idx));
      }
    }
  }
}

graph::KvPageTable StepKvView::pages(int layer, int seq) {
  if (layer < 0 || layer >= num_layers_ || seq < 0 || seq >= num_seqs_)
    throw Error(out_of_range("paged KV cache: no pages bound for layer " + std::to_string(layer) + ", sequence " +
                             std::to_string(seq) + " (" + std::to_string(num_seqs_) + " sequences in this step)"));
  const Entry& e = entries_[static_cast<size_t>(seq) * static_cast<size_t>(num_layers_) + static_cast<size_t>(layer)];
  graph::KvPageTable t;
  t.k_pages = k_.data() + e.offset;
  t.v_pages = v_.data() + e.offset;
  t.num_pages = e.count;
  t.page_size = page_size_;
  t.format = format_;
  return t;
}

}  // namespace loom::batching
