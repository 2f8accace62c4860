#include "loom/runtime/shared_packs.h"

#include <map>
#include <mutex>
#include <set>
#include <tuple>

#include "loom/core/cpu_features.h"
#include "loom/runtime/packed_weights_cache.h"

namespace loom::runtime {
namespace {

// A tensor is its data, dtype and shape (a view of the same bytes with another shape
// is another weight); the ISA is in the key because the layout is chosen per ISA.
using Key = std::tuple<const void*, DType, Shape, const void*, DType, cpu::Isa>;

struct Slot {
  std::mutex mu;  // held while packing, so a second reader waits for the first copy
  std::weak_ptr<const cpu::PackedLinear> packed;
};

std::mutex g_mu;
std::map<Key, std::shared_ptr<Slot>>& slots() {
  static std::map<Key, std::shared_ptr<Slot>> m;
  return m;
}

}  // namespace

Result<std::shared_ptr<const cpu::PackedLinear>> shared_packed_linear(const Tensor& weight, const Tensor* bias) {
  const Key key{weight.data(), weight.dtype(), weight.shape(), bias ? bias->data() : nullptr,
                bias ? bias->dtype() : DType::kF32, cpu::active_isa()};
  std::shared_ptr<Slot> slot;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto& m = slots();
    // Slots of copies nobody holds any more (their model is gone) are dropped here:
    // a later tensor at the same address is not the same weight.
    for (auto it = m.begin(); it != m.end();) {
      it = it->second.use_count() == 1 && it->second->packed.expired() ? m.erase(it) : std::next(it);
    }
    auto& s = m[key];
    if (!s) s = std::make_shared<Slot>();
    slot = s;
  }
  std::lock_guard<std::mutex> lock(slot->mu);
  if (auto held = slot->packed.lock()) return held;
  LOOM_ASSIGN_OR_RETURN(cpu::PackedLinear packed, pack_through_cache(weight, bias));
  auto shared = std::make_shared<const cpu::PackedLinear>(std::move(packed));
  slot->packed = shared;
  return shared;
}

std::vector<cpu::ByteRange> live_packed_weights() {
  std::vector<std::shared_ptr<Slot>> held;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    for (const auto& [key, slot] : slots()) held.push_back(slot);
  }
  std::vector<cpu::ByteRange> ranges;
  std::set<const void*> seen;
  for (const auto& slot : held) {
    // A slot being packed holds its mutex until the copy is there; its weights are
    // not live yet, so it is skipped rather than waited for.
    std::unique_lock<std::mutex> lock(slot->mu, std::try_to_lock);
    if (!lock.owns_lock()) continue;
    const std::shared_ptr<const cpu::PackedLinear> p = slot->packed.lock();
    if (!p || p->streamed_weight_bytes() == 0 || !seen.insert(p->streamed_weights()).second) continue;
    ranges.push_back({p->streamed_weights(), p->streamed_weight_bytes()});
  }
  return ranges;
}

}  // namespace loom::runtime
