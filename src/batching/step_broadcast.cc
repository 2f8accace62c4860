#include "loom/batching/step_broadcast.h"

#include <sys/mman.h>

#include <cstring>

namespace loom::batching {

namespace {

class Writer {
 public:
  template <typename T>
  void put(const T& v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out.insert(out.end(), p, p + sizeof(T));
  }
  template <typename T>
  void put_all(const std::vector<T>& v) {
    put<int64_t>(static_cast<int64_t>(v.size()));
    const auto* p = reinterpret_cast<const uint8_t*>(v.data());
    out.insert(out.end(), p, p + v.size() * sizeof(T));
  }
  std::vector<uint8_t> out;
};

class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& b) : b_(b) {}
  template <typename T>
  Status get(T* v) {
    if (pos_ + sizeof(T) > b_.size()) return truncated();
    std::memcpy(v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status::Ok();
  }
  template <typename T>
  Status get_all(std::vector<T>* v) {
    int64_t n = 0;
    LOOM_RETURN_IF_ERROR(get(&n));
    if (n < 0 || pos_ + static_cast<size_t>(n) * sizeof(T) > b_.size()) return truncated();
    v->resize(static_cast<size_t>(n));
    std::memcpy(v->data(), b_.data() + pos_, static_cast<size_t>(n) * sizeof(T));
    pos_ += static_cast<size_t>(n) * sizeof(T);
    return Status::Ok();
  }
  bool done() const { return pos_ == b_.size(); }

 private:
  Status truncated() const {
    return parse_error("tensor-parallel step plan: truncated at byte " + std::to_string(pos_) + " of " +
                       std::to_string(b_.size()));
  }
  const std::vector<uint8_t>& b_;
  size_t pos_ = 0;
};

}  // namespace

std::vector<uint8_t> encode_step_broadcast(const StepBroadcast& p) {
  Writer w;
  w.put<uint8_t>(p.stop);
  if (p.stop) return std::move(w.out);
  w.put<uint8_t>(p.all_token_rows);
  w.put<uint8_t>(static_cast<uint8_t>(p.kv_format.k));
  w.put<uint8_t>(static_cast<uint8_t>(p.kv_format.v));
  w.put<uint8_t>(static_cast<uint8_t>((p.kv_format.rotate_k ? 1 : 0) | (p.kv_format.rotate_v ? 2 : 0)));
  w.put(p.kv_id);
  w.put(p.kv_bytes);
  w.put(p.page_size);
  w.put<int64_t>(static_cast<int64_t>(p.sequences.size()));
  for (const StepBroadcastSequence& s : p.sequences) {
    w.put_all(s.tokens);
    w.put(s.past_len);
    w.put<uint8_t>(s.all_rows);
    w.put<int64_t>(static_cast<int64_t>(s.k_pages.size()));
    for (size_t l = 0; l < s.k_pages.size(); ++l) {
      w.put_all(s.k_pages[l]);
      w.put_all(s.v_pages[l]);
    }
  }
  return std::move(w.out);
}

Result<StepBroadcast> decode_step_broadcast(const std::vector<uint8_t>& bytes) {
  Reader r(bytes);
  StepBroadcast p;
  uint8_t flag = 0;
  LOOM_RETURN_IF_ERROR(r.get(&flag));
  p.stop = flag != 0;
  if (p.stop) return p;
  LOOM_RETURN_IF_ERROR(r.get(&flag));
  p.all_token_rows = flag != 0;
  LOOM_RETURN_IF_ERROR(r.get(&flag));
  p.kv_format.k = static_cast<DType>(flag);
  LOOM_RETURN_IF_ERROR(r.get(&flag));
  p.kv_format.v = static_cast<DType>(flag);
  LOOM_RETURN_IF_ERROR(r.get(&flag));
  p.kv_format.rotate_k = (flag & 1) != 0;
  p.kv_format.rotate_v = (flag & 2) != 0;
  if (!graph::kv_dtype_supported(p.kv_format.k) || !graph::kv_dtype_supported(p.kv_format.v))
    return parse_error("tensor-parallel step plan: bad KV cache types");
  LOOM_RETURN_IF_ERROR(r.get(&p.kv_id));
  LOOM_RETURN_IF_ERROR(r.get(&p.kv_bytes));
  LOOM_RETURN_IF_ERROR(r.get(&p.page_size));
  int64_t n = 0;
  LOOM_RETURN_IF_ERROR(r.get(&n));
  if (n < 0 || n > static_cast<int64_t>(bytes.size())) return parse_error("tensor-parallel step plan: bad sequence count");
  p.sequences.resize(static_cast<size_t>(n));
  for (StepBroadcastSequence& s : p.sequences) {
    LOOM_RETURN_IF_ERROR(r.get_all(&s.tokens));
    LOOM_RETURN_IF_ERROR(r.get(&s.past_len));
    LOOM_RETURN_IF_ERROR(r.get(&flag));
    s.all_rows = flag != 0;
    int64_t layers = 0;
    LOOM_RETURN_IF_ERROR(r.get(&layers));
    if (layers < 0 || layers > static_cast<int64_t>(bytes.size())) return parse_error("tensor-parallel step plan: bad layer count");
    s.k_pages.resize(static_cast<size_t>(layers));
    s.v_pages.resize(static_cast<size_t>(layers));
    for (int64_t l = 0; l < layers; ++l) {
      LOOM_RETURN_IF_ERROR(r.get_all(&s.k_pages[static_cast<size_t>(l)]));
      LOOM_RETURN_IF_ERROR(r.get_all(&s.v_pages[static_cast<size_t>(l)]));
    }
  }
  if (!r.done()) return parse_error("tensor-parallel step plan: trailing bytes");
  return p;
}

MirroredKvStore::~MirroredKvStore() { unmap(); }

void MirroredKvStore::unmap() {
  if (base_) munmap(base_, bytes_);
  base_ = nullptr;
  bytes_ = 0;
}

Status MirroredKvStore::bind(const StepBroadcast& plan) {
  if (!base_ || plan.kv_id != id_ || plan.kv_bytes != bytes_) {
    unmap();
    // Address space up front, RAM only for the pages written (as rank 0's pool).
    void* p = mmap(nullptr, plan.kv_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
      return resource_exhausted("tensor parallelism: cannot map a KV cache of " + std::to_string(plan.kv_bytes) + " bytes");
    base_ = p;
    bytes_ = plan.kv_bytes;
    id_ = plan.kv_id;
  }
  page_size_ = plan.page_size;
  format_ = plan.kv_format;
  num_layers_ = plan.sequences.empty() ? 0 : static_cast<int>(plan.sequences[0].k_pages.size());
  k_.clear();
  v_.clear();
  auto* base = static_cast<char*>(base_);
  auto resolve = [&](const std::vector<int64_t>& offsets, std::vector<void*>* out) -> Status {
    out->clear();
    for (int64_t off : offsets) {
      if (off < -1 || (off >= 0 && static_cast<uint64_t>(off) >= bytes_))
        return out_of_range("tensor-parallel step plan: KV page offset " + std::to_string(off) + " outside the " +
                            std::to_string(bytes_) + "-byte cache");
      out->push_back(off < 0 ? nullptr : base + off);
    }
    return Status::Ok();
  };
  for (const StepBroadcastSequence& s : plan.sequences) {
    if (static_cast<int>(s.k_pages.size()) != num_layers_)
      return parse_error("tensor-parallel step plan: sequences with different layer counts");
    for (int l = 0; l < num_layers_; ++l) {
      k_.emplace_back();
      v_.emplace_back();
      LOOM_RETURN_IF_ERROR(resolve(s.k_pages[static_cast<size_t>(l)], &k_.back()));
      LOOM_RETURN_IF_ERROR(resolve(s.v_pages[static_cast<size_t>(l)], &v_.back()));
    }
  }
  return Status::Ok();
}

graph::KvPageTable MirroredKvStore::pages(int layer, int seq) {
  const size_t i = static_cast<size_t>(seq) * static_cast<size_t>(num_layers_) + static_cast<size_t>(layer);
  if (layer < 0 || layer >= num_layers_ || seq < 0 || i >= k_.size())
    throw Error(out_of_range("tensor-parallel KV store: no pages for layer " + std::to_string(layer) + ", sequence " +
                             std::to_string(seq)));
  graph::KvPageTable t;
  t.k_pages = k_[i].data();
  t.v_pages = v_[i].data();
  t.num_pages = static_cast<int64_t>(k_[i].size());
  t.page_size = page_size_;
  t.format = format_;
  return t;
}

}  // namespace loom::batching
