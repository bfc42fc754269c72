// libFuzzer target: a chat template (from a model download) is parsed and rendered over a fixed
// conversation; it either renders or ends with an mlxcel::Error. The interpreter's limits (steps,
// output, nesting, integer overflow) must hold for any source.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "tokenizer/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using ojson = nlohmann::ordered_json;
  static const ojson messages = ojson::parse(R"([
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "hi <b>there</b>"},
    {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
      "function": {"name": "f", "arguments": {"x": [1, 2.5, null, true]}}}]},
    {"role": "tool", "content": "{\"ok\": 1}"}])");
  static const ojson tools = ojson::parse(R"([{"type": "function", "function": {"name": "f",
      "parameters": {"type": "object", "properties": {"x": {"type": "array"}}}}}])");
  const std::string src(reinterpret_cast<const char*>(data), size);
  try {
    auto t = mlxcel::ChatTemplate::from_source(src, "<s>", "</s>");
    (void)t.render(messages, tools, true, ojson{{"enable_thinking", false}});
  } catch (const mlxcel::Error&) {
  }
  return 0;
}
