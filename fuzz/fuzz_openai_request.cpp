// libFuzzer target: any request body given to the OpenAI request layer (parse_body, then the chat
// and completion parsers) is either accepted or refused with an ApiException (a 4xx); nothing else
// escapes, and accepted requests can be dumped back (no value too deep to serialize).
#include <cstddef>
#include <cstdint>
#include <string>

#include "server/openai_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace mlxcel::server;
  const std::string body(reinterpret_cast<const char*>(data), size);
  nlohmann::json j;
  try {
    j = parse_body(body);
  } catch (const ApiException& e) {
    if (e.error.status < 400 || e.error.status >= 500) __builtin_trap();
    return 0;
  }
  for (int ep = 0; ep < 2; ++ep) {
    try {
      GenerationRequest g = ep == 0 ? parse_chat_request(j) : parse_completion_request(j);
      (void)g.messages.dump();
      (void)g.tools.dump();
      (void)g.template_kwargs.dump();
      if (g.max_tokens && *g.max_tokens < 1) __builtin_trap();
    } catch (const ApiException& e) {
      if (e.error.status < 400 || e.error.status >= 500) __builtin_trap();
    }
  }
  return 0;
}
