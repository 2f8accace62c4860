// The engine's constraint registry and its compile threads, built on first use:
// indexing the vocabulary takes a moment, which servers that never see a constrained
// request need not pay.
#include "serve/engine.h"

#include "loom/structured/token_vocabulary.h"

namespace loom::serve {

structured::ConstraintRegistry* Engine::constraints() {
  std::call_once(constraints_once_, [this] {
    if (!model_.tokenizer) return;
    constraints_ = std::make_unique<structured::ConstraintRegistry>(
        structured::TokenVocabulary::from_tokenizer(*model_.tokenizer), options_.constraint_cache_bytes);
    ConstraintCompiler::Limits limits;
    limits.threads = options_.constraint_threads;
    limits.max_pending = options_.max_pending_constraints;
    limits.timeout_seconds = options_.constraint_timeout;
    limits.max_elements = options_.constraint_max_elements;
    constraint_compiler_ = std::make_unique<ConstraintCompiler>(constraints_.get(), limits);
    constraints_built_.store(constraints_.get(), std::memory_order_release);
  });
  return constraints_.get();
}

structured::ConstraintRegistry::Stats Engine::constraint_stats() const {
  // Published once constraints() has built the registry: null until a constrained request came.
  const structured::ConstraintRegistry* r = constraints_built_.load(std::memory_order_acquire);
  return r ? r->stats() : structured::ConstraintRegistry::Stats{};
}

ConstraintCompiler* Engine::constraint_compiler() {
  constraints();
  return constraint_compiler_.get();
}

}  // namespace loom::serve
