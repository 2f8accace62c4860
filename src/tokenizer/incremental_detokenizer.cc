#include "loom/tokenizer/incremental_detokenizer.h"

#include "tokenizer/tokenizer_impl.h"

namespace loom {

IncrementalDetokenizer::IncrementalDetokenizer(std::shared_ptr<const Tokenizer> tokenizer, bool skip_special_tokens,
                                               const std::vector<int32_t>& context)
    : tok_(std::move(tokenizer)), skip_special_(skip_special_tokens) {
  // A few context tokens are enough for the decoder to see "not the first token".
  size_t keep = std::min<size_t>(context.size(), 4);
  ids_.assign(context.end() - keep, context.end());
  read_offset_ = ids_.size();
  prefix_text_ = decode_window(0, read_offset_);
}

std::string IncrementalDetokenizer::decode_window(size_t begin, size_t end) const {
  const tok::TokenizerImpl& impl = tok_->impl();
  std::vector<std::string> tokens;
  throw_if_error(impl.ids_to_tokens(ids_.data() + begin, end - begin, skip_special_, &tokens));
  std::string text;
  throw_if_error(impl.decode_tokens(tokens, &text));
  return text;
}

static bool ends_with_replacement(const std::string& s) {
  return s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0;
}

std::string IncrementalDetokenizer::push(int32_t id) {
  ids_.push_back(id);
  std::string text;
  try {
    text = decode_window(prefix_offset_, ids_.size());
  } catch (...) {
    ids_.pop_back();
    throw;
  }
  // Wait while nothing new appeared or the end may be an unfinished UTF-8 sequence.
  if (text.size() <= prefix_text_.size() || ends_with_replacement(text) ||
      text.compare(0, prefix_text_.size(), prefix_text_) != 0)
    return {};
  std::string delta = text.substr(prefix_text_.size());
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  prefix_text_ = decode_window(prefix_offset_, read_offset_);
  // Drop ids no window will look at again.
  if (prefix_offset_ > 64) {
    ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(prefix_offset_));
    read_offset_ -= prefix_offset_;
    prefix_offset_ = 0;
  }
  return delta;
}

std::string IncrementalDetokenizer::flush() {
  std::string text = decode_window(prefix_offset_, ids_.size());
  std::string delta;
  if (text.size() > prefix_text_.size() && text.compare(0, prefix_text_.size(), prefix_text_) == 0)
    delta = text.substr(prefix_text_.size());
  else if (text.compare(0, prefix_text_.size(), prefix_text_) != 0)
    delta = text;  // cannot happen for prefix-stable decoders; keep the text rather than lose it
  ids_.clear();
  prefix_offset_ = read_offset_ = 0;
  prefix_text_.clear();
  return delta;
}

}  // namespace loom
