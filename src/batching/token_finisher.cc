#include "loom/batching/token_finisher.h"

#include <algorithm>

namespace loom::batching {

using generation::FinishReason;

TokenFinisher::TokenFinisher(std::vector<int32_t> eos_token_ids, std::vector<std::string> stop_strings,
                             int64_t max_new_tokens, TextStream* text)
    : eos_(std::move(eos_token_ids)),
      stop_strings_(std::move(stop_strings)),
      max_new_tokens_(max_new_tokens),
      text_(text),
      stops_(stop_strings_) {}

bool TokenFinisher::is_eos(int32_t id) const { return std::find(eos_.begin(), eos_.end(), id) != eos_.end(); }

Result<FinishReason> TokenFinisher::accept(int32_t id, int64_t generated, structured::ConstraintState* constraint,
                                           std::string& shown) {
  const bool eos = is_eos(id);
  if (constraint && !eos) LOOM_RETURN_IF_ERROR(constraint->accept_token(id));
  if (text_ && !eos) {
    LOOM_ASSIGN_OR_RETURN(std::string piece, text_->push(id));
    stops_.push(piece, shown);
  }
  if (eos) return FinishReason::kEos;
  if (stops_.stopped()) return FinishReason::kStopString;
  if (constraint && constraint->accepting() && !constraint->can_continue()) return FinishReason::kEos;
  if (generated >= max_new_tokens_) return FinishReason::kLength;
  return FinishReason::kNone;
}

Status TokenFinisher::finish(FinishReason reason, std::string& shown) {
  if (!text_ || reason == FinishReason::kStopString) return Status::Ok();
  LOOM_ASSIGN_OR_RETURN(std::string tail, text_->flush());
  // A stop string completed by the tail still cuts the text; the reason stays.
  stops_.push(tail, shown);
  stops_.flush(shown);
  return Status::Ok();
}

}  // namespace loom::batching
