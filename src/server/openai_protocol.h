#pragma once
// The OpenAI wire format: request parsing with strict type checks (every problem is a 400 naming
// the field), and builders for the response objects and stream chunks of /v1/chat/completions
// and /v1/completions. No model or HTTP code here, so it is testable on its own.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/sampler.h"
#include "server/api_error.h"

namespace mlxcel::server {

enum class Endpoint : std::uint8_t { kChat = 0, kCompletion = 1 };

struct GenerationRequest {
  Endpoint endpoint = Endpoint::kChat;
  std::string model;                  // as sent ("" when absent)
  nlohmann::json messages;            // chat: normalized [{role, content(string), ...}]
  nlohmann::json tools;               // chat: array or null
  std::string prompt_text;            // completion: text prompt
  std::vector<std::int32_t> prompt_ids;  // completion: token-id prompt
  bool prompt_is_ids = false;
  runtime::SamplingParams sampling;
  std::optional<std::int64_t> max_tokens;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;
  bool logprobs = false;
  int top_logprobs = 0;
  bool json_mode = false;             // response_format json_object / json_schema
  nlohmann::json template_kwargs = nlohmann::json::object();  // chat_template_kwargs
  bool echo = false;
};

// The server's sampling defaults (`mlxcel-server --temp ...`) for fields a request leaves out;
// the temperature defaults to OpenAI's 1.0.
runtime::SamplingParams openai_sampling_defaults();

// Throws ApiException (400) naming the first offending field. Fields the body leaves out take
// their value from `defaults`.
GenerationRequest parse_chat_request(const nlohmann::json& body,
                                     const runtime::SamplingParams& defaults = openai_sampling_defaults());
GenerationRequest parse_completion_request(const nlohmann::json& body,
                                           const runtime::SamplingParams& defaults = openai_sampling_defaults());

// Deepest nesting of arrays and objects a request may use (tool schemas nest a dozen levels).
inline constexpr int kMaxRequestJsonDepth = 128;

// Parses a request body; malformed JSON, nesting beyond kMaxRequestJsonDepth, numbers outside
// double's range or a non-object are a 400 with the parser's message.
nlohmann::json parse_body(const std::string& body);
// Parses JSON text with the same depth bound; nullopt (and the reason in `error`) on failure.
std::optional<nlohmann::json> parse_json_bounded(const std::string& text,
                                                 std::string* error = nullptr);

struct Usage {
  std::int64_t prompt_tokens = 0;
  std::int64_t completion_tokens = 0;
  std::int64_t cached_tokens = 0;
  nlohmann::json json() const;
};

struct TokenLogprobInfo {
  std::string token;
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;
};

// Full (non-streaming) responses.
nlohmann::json chat_response(const std::string& id, std::int64_t created, const std::string& model,
                             const std::string& content, const std::string& reasoning,
                             const std::string& finish_reason, const Usage& usage,
                             const std::vector<TokenLogprobInfo>* logprobs);
nlohmann::json completion_response(const std::string& id, std::int64_t created,
                                   const std::string& model, const std::string& text,
                                   const std::string& finish_reason, const Usage& usage,
                                   const std::vector<TokenLogprobInfo>* logprobs);

// Stream chunks. `finish_reason` empty -> null. Role is sent in the first chat chunk only.
nlohmann::json chat_chunk(const std::string& id, std::int64_t created, const std::string& model,
                          const std::string* role, const std::string& content,
                          const std::string& reasoning, const std::string& finish_reason,
                          const std::vector<TokenLogprobInfo>* logprobs);
nlohmann::json completion_chunk(const std::string& id, std::int64_t created,
                                const std::string& model, const std::string& text,
                                const std::string& finish_reason,
                                const std::vector<TokenLogprobInfo>* logprobs);
// The final usage-only chunk of stream_options.include_usage (empty choices).
nlohmann::json usage_chunk(const std::string& id, std::int64_t created, const std::string& model,
                           const std::string& object, const Usage& usage);

// "data: <json>\n\n" and the terminator "data: [DONE]\n\n".
std::string sse_event(const nlohmann::json& j);
inline const char* sse_done() { return "data: [DONE]\n\n"; }

}  // namespace mlxcel::server
