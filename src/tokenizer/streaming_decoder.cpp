#include "tokenizer/streaming_decoder.h"

#include "tokenizer/tokenizer_impl.h"

namespace mlxcel {

namespace {
bool ends_with_replacement(const std::string& s) {
  return s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0;
}
}  // namespace

StreamingDecoder::StreamingDecoder(Tokenizer tokenizer, bool skip_special_tokens)
    : tok_(std::move(tokenizer)), skip_special_(skip_special_tokens) {}

void StreamingDecoder::reset() {
  ids_.clear();
  ctx_ = read_ = 0;
  prefix_text_.clear();
  emitted_.clear();
}

std::string StreamingDecoder::decode_range(size_t b, size_t e) const {
  return tok_.impl_->decode(ids_.data() + b, e - b, skip_special_);
}

std::string StreamingDecoder::push(int32_t id) {
  ids_.push_back(id);
  std::string text = decode_range(ctx_, ids_.size());
  if (text.size() <= prefix_text_.size() || ends_with_replacement(text)) return {};
  std::string add;
  if (text.compare(0, prefix_text_.size(), prefix_text_) == 0) {
    add = text.substr(prefix_text_.size());
  } else {
    // The window's context changed how earlier text decodes: fall back to the whole stream.
    std::string full = decode_range(0, ids_.size());
    if (full.size() <= emitted_.size() || full.compare(0, emitted_.size(), emitted_) != 0) return {};
    add = full.substr(emitted_.size());
  }
  emitted_ += add;
  ctx_ = read_;
  read_ = ids_.size();
  prefix_text_ = decode_range(ctx_, read_);
  return add;
}

std::string StreamingDecoder::flush() {
  std::string full = decode_range(0, ids_.size());
  std::string rest;
  if (full.size() > emitted_.size() && full.compare(0, emitted_.size(), emitted_) == 0)
    rest = full.substr(emitted_.size());
  reset();
  return rest;
}

}  // namespace mlxcel
