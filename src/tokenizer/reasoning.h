#pragma once
// Splits generated text into reasoning and answer: text between the start marker (<think>) and
// the end marker (</think>) is reasoning. Streaming: push() chunks as they are decoded; a marker
// split across chunks is held back until it is complete. Whitespace right after the end marker
// is dropped from the answer. starts_in_reasoning is for prompts that already end inside a
// reasoning block (DeepSeek-R1's generation prompt ends with "<think>\n").
#include <string>
#include <string_view>

namespace mlxcel {

struct ReasoningDelta {
  std::string reasoning;
  std::string content;
};

struct ReasoningMarkers {
  std::string start = "<think>";
  std::string end = "</think>";
};

class ReasoningSplitter {
 public:
  explicit ReasoningSplitter(std::string start = "<think>", std::string end = "</think>",
                             bool starts_in_reasoning = false);
  // Markers a chat template uses (gpt-oss harmony channels, else <think>/</think>).
  static ReasoningMarkers markers_for_template(std::string_view template_source);
  // Whether a rendered prompt leaves the model inside an open reasoning block.
  static bool prompt_opens_reasoning(std::string_view prompt, const ReasoningMarkers& m);

  ReasoningDelta push(std::string_view chunk);
  ReasoningDelta flush();
  bool in_reasoning() const { return in_reasoning_; }

 private:
  void emit(ReasoningDelta& d, std::string_view s);
  std::string start_, end_, buf_;
  bool in_reasoning_;
  bool strip_ws_ = false;
};

}  // namespace mlxcel
