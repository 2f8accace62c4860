// The engine's constraint registry, built on first use: indexing the vocabulary
// takes a moment, which servers that never see a constrained request need not pay.
#include "serve/engine.h"

#include "loom/structured/token_vocabulary.h"

namespace loom::serve {

structured::ConstraintRegistry* Engine::constraints() {
  std::call_once(constraints_once_, [this] {
    if (model_.tokenizer)
      constraints_ = std::make_unique<structured::ConstraintRegistry>(
          structured::TokenVocabulary::from_tokenizer(*model_.tokenizer));
  });
  return constraints_.get();
}

}  // namespace loom::serve
