#pragma once
// Incremental detokenization for generation: push ids one at a time and get the text they add.
// Text is held back while it ends in an incomplete UTF-8 character or byte-fallback sequence
// (decoded as U+FFFD), so no chunk ever splits a character; the concatenation of every push()
// and the final flush() equals Tokenizer::decode of all ids. Each push decodes only a short
// window (the ids since the last emitted chunk, plus that chunk as context), so cost per token
// stays constant. One StreamingDecoder per generation stream; not shared between threads.
#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace mlxcel {

class StreamingDecoder {
 public:
  explicit StreamingDecoder(Tokenizer tokenizer, bool skip_special_tokens = false);
  std::string push(int32_t id);
  // Returns whatever is still held back and resets the stream.
  std::string flush();
  void reset();

 private:
  std::string decode_range(size_t b, size_t e) const;
  Tokenizer tok_;
  bool skip_special_;
  std::vector<int32_t> ids_;
  size_t ctx_ = 0, read_ = 0;
  std::string prefix_text_;  // decode of ids_[ctx_, read_)
  std::string emitted_;
};

}  // namespace mlxcel
