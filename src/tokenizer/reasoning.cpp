#include "tokenizer/reasoning.h"

#include <algorithm>

namespace mlxcel {

ReasoningSplitter::ReasoningSplitter(std::string start, std::string end, bool starts_in_reasoning)
    : start_(std::move(start)), end_(std::move(end)), in_reasoning_(starts_in_reasoning) {}

ReasoningMarkers ReasoningSplitter::markers_for_template(std::string_view src) {
  if (src.find("<|channel|>") != std::string_view::npos && src.find("analysis") != std::string_view::npos)
    return {"<|channel|>analysis<|message|>", "<|end|><|start|>assistant<|channel|>final<|message|>"};
  return {};
}

bool ReasoningSplitter::prompt_opens_reasoning(std::string_view prompt, const ReasoningMarkers& m) {
  size_t s = prompt.rfind(m.start);
  if (s == std::string_view::npos) return false;
  size_t e = prompt.rfind(m.end);
  return e == std::string_view::npos || e < s;
}

void ReasoningSplitter::emit(ReasoningDelta& d, std::string_view s) {
  if (in_reasoning_) {
    d.reasoning.append(s);
    return;
  }
  if (strip_ws_) {
    size_t k = 0;
    while (k < s.size() && (s[k] == ' ' || s[k] == '\n' || s[k] == '\r' || s[k] == '\t')) ++k;
    s.remove_prefix(k);
    if (!s.empty()) strip_ws_ = false;
  }
  d.content.append(s);
}

ReasoningDelta ReasoningSplitter::push(std::string_view chunk) {
  ReasoningDelta d;
  buf_.append(chunk);
  while (true) {
    const std::string& marker = in_reasoning_ ? end_ : start_;
    size_t p = buf_.find(marker);
    if (p != std::string::npos) {
      emit(d, std::string_view(buf_).substr(0, p));
      buf_.erase(0, p + marker.size());
      if (in_reasoning_) strip_ws_ = true;
      in_reasoning_ = !in_reasoning_;
      continue;
    }
    // Hold back the longest tail that could still become the marker.
    size_t keep = 0;
    for (size_t n = std::min(marker.size() - 1, buf_.size()); n > 0; --n) {
      if (buf_.compare(buf_.size() - n, n, marker, 0, n) == 0) {
        keep = n;
        break;
      }
    }
    emit(d, std::string_view(buf_).substr(0, buf_.size() - keep));
    buf_.erase(0, buf_.size() - keep);
    return d;
  }
}

ReasoningDelta ReasoningSplitter::flush() {
  ReasoningDelta d;
  emit(d, buf_);
  buf_.clear();
  return d;
}

}  // namespace mlxcel
