#include "server/openai_protocol.h"

#include <cmath>
#include <limits>

#include "tokenizer/bounded_json.h"

namespace mlxcel::server {
namespace {

using json = nlohmann::json;

[[noreturn]] void fail(const std::string& msg, const std::string& param) {
  throw ApiException{ApiError::bad_request(msg, param)};
}

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::binary: return "binary";
    case json::value_t::discarded: return "invalid";
    default: return "a number";
  }
}

// Optional typed field accessors: absent or null -> nullopt; wrong type -> 400.
std::optional<double> opt_number(const json& b, const char* key, double lo, double hi) {
  auto it = b.find(key);
  if (it == b.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) fail(std::string("'") + key + "' must be a number, got " + type_name(*it), key);
  double v = it->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi) {
    fail(std::string("'") + key + "' must be between " + json(lo).dump() + " and " +
             json(hi).dump() + ", got " + it->dump(),
         key);
  }
  return v;
}

std::optional<std::int64_t> opt_int(const json& b, const char* key, std::int64_t lo,
                                    std::int64_t hi) {
  auto it = b.find(key);
  if (it == b.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer() && !(it->is_number_float() && std::floor(it->get<double>()) == it->get<double>()))
    fail(std::string("'") + key + "' must be an integer, got " + type_name(*it), key);
  if (it->is_number_float()) {
    double d = it->get<double>();
    if (!std::isfinite(d) || d < static_cast<double>(lo) || d > static_cast<double>(hi))
      fail(std::string("'") + key + "' must be between " + std::to_string(lo) + " and " +
               std::to_string(hi) + ", got " + it->dump(),
           key);
    // 2^63 is the first double outside int64 (double(INT64_MAX) rounds up to it), so compare
    // against it rather than against `hi` converted to double.
    if (!std::isfinite(d) || d >= 9223372036854775808.0 || d < -9223372036854775808.0)
      fail(std::string("'") + key + "' must be between " + std::to_string(lo) + " and " +
               std::to_string(hi) + ", got " + it->dump(),
           key);
    return static_cast<std::int64_t>(d);
  }
  if (it->is_number_unsigned() && it->get<std::uint64_t>() > static_cast<std::uint64_t>(hi))
    fail(std::string("'") + key + "' must be at most " + std::to_string(hi) + ", got " + it->dump(), key);
  std::int64_t v = it->get<std::int64_t>();
  if (v < lo || v > hi)
    fail(std::string("'") + key + "' must be between " + std::to_string(lo) + " and " +
             std::to_string(hi) + ", got " + std::to_string(v),
         key);
  return v;
}

std::optional<bool> opt_bool(const json& b, const char* key) {
  auto it = b.find(key);
  if (it == b.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) fail(std::string("'") + key + "' must be a boolean, got " + type_name(*it), key);
  return it->get<bool>();
}

std::optional<std::string> opt_string(const json& b, const char* key) {
  auto it = b.find(key);
  if (it == b.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) fail(std::string("'") + key + "' must be a string, got " + type_name(*it), key);
  return it->get<std::string>();
}

void parse_common(const json& b, GenerationRequest& r, const runtime::SamplingParams& defaults) {
  if (!b.is_object()) fail("the request body must be a JSON object", "");
  if (auto m = opt_string(b, "model")) r.model = *m;
  auto& s = r.sampling;
  s = defaults;
  if (auto v = opt_number(b, "temperature", 0.0, 2.0)) s.temperature = static_cast<float>(*v);
  if (auto v = opt_number(b, "top_p", 0.0, 1.0)) {
    if (*v <= 0.0) fail("'top_p' must be greater than 0", "top_p");
    s.top_p = static_cast<float>(*v);
  }
  if (auto v = opt_int(b, "top_k", -1, 1 << 20)) s.top_k = *v < 0 ? 0 : static_cast<int>(*v);
  if (auto v = opt_number(b, "min_p", 0.0, 1.0)) s.min_p = static_cast<float>(*v);
  if (auto v = opt_number(b, "presence_penalty", -2.0, 2.0)) s.presence_penalty = static_cast<float>(*v);
  if (auto v = opt_number(b, "frequency_penalty", -2.0, 2.0)) s.frequency_penalty = static_cast<float>(*v);
  if (auto v = opt_number(b, "repetition_penalty", 0.0, 10.0)) {
    if (*v <= 0.0) fail("'repetition_penalty' must be greater than 0", "repetition_penalty");
    s.repetition_penalty = static_cast<float>(*v);
  }
  if (auto v = opt_int(b, "seed", std::numeric_limits<std::int64_t>::min(),
                       std::numeric_limits<std::int64_t>::max()))
    s.seed = static_cast<std::uint64_t>(*v);
  auto mt = opt_int(b, "max_tokens", 1, std::numeric_limits<std::int64_t>::max());
  auto mct = opt_int(b, "max_completion_tokens", 1, std::numeric_limits<std::int64_t>::max());
  if (mct) r.max_tokens = mct;
  else if (mt) r.max_tokens = mt;
  if (auto it = b.find("stop"); it != b.end() && !it->is_null()) {
    if (it->is_string()) {
      r.stop.push_back(it->get<std::string>());
    } else if (it->is_array()) {
      if (it->size() > 16) fail("'stop' may hold at most 16 strings", "stop");
      for (const auto& x : *it) {
        if (!x.is_string()) fail("'stop' must be a string or an array of strings", "stop");
        r.stop.push_back(x.get<std::string>());
      }
    } else {
      fail("'stop' must be a string or an array of strings, got " + std::string(type_name(*it)), "stop");
    }
    for (const auto& st : r.stop)
      if (st.empty()) fail("'stop' strings must not be empty", "stop");
  }
  if (auto v = opt_bool(b, "stream")) r.stream = *v;
  if (auto it = b.find("stream_options"); it != b.end() && !it->is_null()) {
    if (!it->is_object()) fail("'stream_options' must be an object", "stream_options");
    if (auto v = opt_bool(*it, "include_usage")) r.include_usage = *v;
  }
  (void)opt_int(b, "n", 1, 1);  // one choice per request
  if (auto it = b.find("logit_bias"); it != b.end() && !it->is_null()) {
    if (!it->is_object()) fail("'logit_bias' must be an object mapping token ids to numbers", "logit_bias");
    for (auto kv = it->begin(); kv != it->end(); ++kv) {
      std::size_t used = 0;
      long long id = -1;
      try {
        id = std::stoll(kv.key(), &used);
      } catch (...) {
        used = 0;
      }
      if (used != kv.key().size() || id < 0 || id > std::numeric_limits<std::int32_t>::max())
        fail("'logit_bias' keys must be token ids, got \"" + kv.key() + "\"", "logit_bias");
      if (!kv->is_number() || std::fabs(kv->get<double>()) > 100.0)
        fail("'logit_bias' values must be numbers in [-100, 100]", "logit_bias");
      s.logit_bias.emplace_back(static_cast<std::int32_t>(id), kv->get<float>());
    }
  }
  if (auto it = b.find("response_format"); it != b.end() && !it->is_null()) {
    if (!it->is_object() || !it->contains("type") || !(*it)["type"].is_string())
      fail("'response_format' must be an object with a string 'type'", "response_format");
    std::string t = (*it)["type"];
    if (t == "json_object" || t == "json_schema") r.json_mode = true;
    else if (t != "text")
      fail("'response_format.type' must be text, json_object or json_schema, got \"" + t + "\"",
           "response_format");
  }
}

std::string content_to_text(const json& content, std::size_t index) {
  if (content.is_null()) return {};
  if (content.is_string()) return content.get<std::string>();
  std::string where = "messages[" + std::to_string(index) + "].content";
  if (!content.is_array()) fail("'" + where + "' must be a string or an array of content parts", where);
  std::string text;
  for (const auto& part : content) {
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      fail("each part of '" + where + "' must be an object with a 'type'", where);
    std::string t = part["type"];
    if (t == "text") {
      if (!part.contains("text") || !part["text"].is_string())
        fail("a text part of '" + where + "' needs a string 'text'", where);
      text += part["text"].get<std::string>();
    } else {
      fail("content part type '" + t + "' is not supported by this text-only model (in " + where + ")",
           where);
    }
  }
  return text;
}

// Byte offset of the first invalid UTF-8 sequence (overlong forms, surrogates and code points
// above U+10FFFF are invalid, RFC 3629), or npos when `s` is valid.
std::size_t invalid_utf8_at(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  std::size_t i = 0;
  while (i < n) {
    const unsigned c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len = 0;
    unsigned lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) { len = 3; lo = 0xA0; }
    else if (c == 0xED) { len = 3; hi = 0x9F; }
    else if (c >= 0xE1 && c <= 0xEF) len = 3;
    else if (c == 0xF0) { len = 4; lo = 0x90; }
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else if (c == 0xF4) { len = 4; hi = 0x8F; }
    else return i;
    if (i + len > n) return i;
    if (p[i + 1] < lo || p[i + 1] > hi) return i;
    for (std::size_t k = 2; k < len; ++k)
      if (p[i + k] < 0x80 || p[i + k] > 0xBF) return i;
    i += len;
  }
  return std::string::npos;
}

}  // namespace

std::optional<json> parse_json_bounded(const std::string& text, std::string* error) {
  // Copying, dumping and converting a JSON value recurse once per level, so nesting is bounded
  // while parsing (tokenizer/bounded_json.h: linear time, unlike nlohmann's callback parser).
  return json_util::parse_bounded(text, kMaxRequestJsonDepth, error);
}

json parse_body(const std::string& body) {
  // JSON text exchanged between systems must be UTF-8 (RFC 8259 section 8.1); the parser does not
  // check string contents, and invalid bytes would otherwise surface later as a 500.
  if (std::size_t at = invalid_utf8_at(body); at != std::string::npos)
    throw ApiException{ApiError::bad_request("request body is not valid UTF-8 (invalid byte sequence at offset " +
                                             std::to_string(at) + ")")};
  std::string error;
  auto j = parse_json_bounded(body, &error);
  if (!j) throw ApiException{ApiError::bad_request("request body is not valid JSON: " + error)};
  if (!j->is_object())
    throw ApiException{ApiError::bad_request("the request body must be a JSON object")};
  return std::move(*j);
}

GenerationRequest parse_chat_request(const json& b, const runtime::SamplingParams& defaults) {
  GenerationRequest r;
  r.endpoint = Endpoint::kChat;
  parse_common(b, r, defaults);
  auto it = b.find("messages");
  if (it == b.end()) fail("'messages' is required", "messages");
  if (!it->is_array()) fail("'messages' must be an array, got " + std::string(type_name(*it)), "messages");
  if (it->empty()) fail("'messages' must not be empty", "messages");
  r.messages = json::array();
  for (std::size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) fail("'" + where + "' must be an object", where);
    if (!m.contains("role") || !m["role"].is_string()) fail("'" + where + ".role' must be a string", where);
    std::string role = m["role"];
    if (role == "developer") role = "system";
    if (role != "system" && role != "user" && role != "assistant" && role != "tool")
      fail("'" + where + ".role' must be system, developer, user, assistant or tool, got \"" + role + "\"",
           where);
    json out = m;
    out["role"] = role;
    if (!m.contains("content") && !(role == "assistant" && m.contains("tool_calls")))
      fail("'" + where + ".content' is required", where);
    out["content"] = content_to_text(m.value("content", json(nullptr)), i);
    if (m.contains("tool_calls")) {
      if (!m["tool_calls"].is_array()) fail("'" + where + ".tool_calls' must be an array", where);
      // Templates expect arguments as objects; OpenAI sends them as JSON strings.
      for (auto& tc : out["tool_calls"]) {
        if (tc.is_object() && tc.contains("function") && tc["function"].is_object() &&
            tc["function"].contains("arguments") && tc["function"]["arguments"].is_string()) {
          auto parsed = parse_json_bounded(tc["function"]["arguments"].get<std::string>());
          if (parsed) tc["function"]["arguments"] = std::move(*parsed);
        }
      }
    }
    r.messages.push_back(out);
  }
  if (auto t = b.find("tools"); t != b.end() && !t->is_null()) {
    if (!t->is_array()) fail("'tools' must be an array", "tools");
    r.tools = *t;
  }
  if (auto v = opt_bool(b, "logprobs")) r.logprobs = *v;
  if (auto v = opt_int(b, "top_logprobs", 0, 20)) {
    r.top_logprobs = static_cast<int>(*v);
    if (!r.logprobs && *v > 0) fail("'top_logprobs' requires 'logprobs': true", "top_logprobs");
  }
  if (auto k = b.find("chat_template_kwargs"); k != b.end() && !k->is_null()) {
    if (!k->is_object()) fail("'chat_template_kwargs' must be an object", "chat_template_kwargs");
    r.template_kwargs = *k;
  }
  return r;
}

GenerationRequest parse_completion_request(const json& b, const runtime::SamplingParams& defaults) {
  GenerationRequest r;
  r.endpoint = Endpoint::kCompletion;
  parse_common(b, r, defaults);
  auto it = b.find("prompt");
  if (it == b.end() || it->is_null()) fail("'prompt' is required", "prompt");
  const json* p = &*it;
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) p = &(*p)[0];
  if (p->is_string()) {
    r.prompt_text = p->get<std::string>();
  } else if (p->is_array()) {
    if (p->empty()) fail("'prompt' must not be empty", "prompt");
    for (const auto& x : *p) {
      if (x.is_string()) fail("batched prompts (several strings) are not supported; send one request each", "prompt");
      if (!x.is_number_integer() || x.get<std::int64_t>() < 0 ||
          x.get<std::int64_t>() > std::numeric_limits<std::int32_t>::max())
        fail("'prompt' must be a string or an array of token ids", "prompt");
      r.prompt_ids.push_back(x.get<std::int32_t>());
    }
    r.prompt_is_ids = true;
  } else {
    fail("'prompt' must be a string or an array of token ids, got " + std::string(type_name(*p)), "prompt");
  }
  if (auto v = opt_bool(b, "echo")) r.echo = *v;
  if (auto v = opt_int(b, "logprobs", 0, 20)) {
    r.logprobs = true;
    r.top_logprobs = static_cast<int>(*v);
  }
  if (b.contains("suffix") && !b["suffix"].is_null()) fail("'suffix' is not supported", "suffix");
  if (r.echo && r.logprobs)
    fail("'echo' together with 'logprobs' (prompt logprobs) is not supported; send one of them", "echo");
  (void)opt_int(b, "best_of", 1, 1);
  return r;
}

runtime::SamplingParams openai_sampling_defaults() {
  runtime::SamplingParams p;
  p.temperature = 1.0f;
  return p;
}

json Usage::json() const {
  nlohmann::json u = {{"prompt_tokens", prompt_tokens},
                      {"completion_tokens", completion_tokens},
                      {"total_tokens", prompt_tokens + completion_tokens}};
  u["prompt_tokens_details"] = {{"cached_tokens", cached_tokens}};
  return u;
}

namespace {
json logprobs_json(const std::vector<TokenLogprobInfo>& lps) {
  json content = json::array();
  for (const auto& t : lps) {
    json top = json::array();
    for (const auto& [tok, lp] : t.top) {
      json bytes = json::array();
      for (unsigned char c : tok) bytes.push_back(c);
      top.push_back({{"token", tok}, {"logprob", lp}, {"bytes", bytes}});
    }
    json bytes = json::array();
    for (unsigned char c : t.token) bytes.push_back(c);
    content.push_back({{"token", t.token}, {"logprob", t.logprob}, {"bytes", bytes}, {"top_logprobs", top}});
  }
  return {{"content", content}};
}

json completion_logprobs_json(const std::vector<TokenLogprobInfo>& lps) {
  json tokens = json::array(), token_logprobs = json::array(), top = json::array();
  for (const auto& t : lps) {
    tokens.push_back(t.token);
    token_logprobs.push_back(t.logprob);
    json m = json::object();
    for (const auto& [tok, lp] : t.top) m[tok] = lp;
    top.push_back(m);
  }
  return {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top}};
}

json finish(const std::string& f) { return f.empty() ? json(nullptr) : json(f); }
}  // namespace

json chat_response(const std::string& id, std::int64_t created, const std::string& model,
                   const std::string& content, const std::string& reasoning,
                   const std::string& finish_reason, const Usage& usage,
                   const std::vector<TokenLogprobInfo>* logprobs) {
  json msg = {{"role", "assistant"}, {"content", content}};
  if (!reasoning.empty()) msg["reasoning_content"] = reasoning;
  json choice = {{"index", 0}, {"message", msg}, {"finish_reason", finish(finish_reason)}};
  choice["logprobs"] = logprobs ? logprobs_json(*logprobs) : json(nullptr);
  return {{"id", id},           {"object", "chat.completion"}, {"created", created},
          {"model", model},     {"choices", json::array({choice})},
          {"usage", usage.json()}};
}

json completion_response(const std::string& id, std::int64_t created, const std::string& model,
                         const std::string& text, const std::string& finish_reason,
                         const Usage& usage, const std::vector<TokenLogprobInfo>* logprobs) {
  json choice = {{"index", 0}, {"text", text}, {"finish_reason", finish(finish_reason)}};
  choice["logprobs"] = logprobs ? completion_logprobs_json(*logprobs) : json(nullptr);
  return {{"id", id},       {"object", "text_completion"}, {"created", created},
          {"model", model}, {"choices", json::array({choice})}, {"usage", usage.json()}};
}

json chat_chunk(const std::string& id, std::int64_t created, const std::string& model,
                const std::string* role, const std::string& content, const std::string& reasoning,
                const std::string& finish_reason, const std::vector<TokenLogprobInfo>* logprobs) {
  json delta = json::object();
  if (role) delta["role"] = *role;
  if (!content.empty() || (role && reasoning.empty())) delta["content"] = content;
  if (!reasoning.empty()) delta["reasoning_content"] = reasoning;
  json choice = {{"index", 0}, {"delta", delta}, {"finish_reason", finish(finish_reason)}};
  choice["logprobs"] = logprobs ? logprobs_json(*logprobs) : json(nullptr);
  return {{"id", id},       {"object", "chat.completion.chunk"}, {"created", created},
          {"model", model}, {"choices", json::array({choice})}};
}

json completion_chunk(const std::string& id, std::int64_t created, const std::string& model,
                      const std::string& text, const std::string& finish_reason,
                      const std::vector<TokenLogprobInfo>* logprobs) {
  json choice = {{"index", 0}, {"text", text}, {"finish_reason", finish(finish_reason)}};
  choice["logprobs"] = logprobs ? completion_logprobs_json(*logprobs) : json(nullptr);
  return {{"id", id},       {"object", "text_completion"}, {"created", created},
          {"model", model}, {"choices", json::array({choice})}};
}

json usage_chunk(const std::string& id, std::int64_t created, const std::string& model,
                 const std::string& object, const Usage& usage) {
  return {{"id", id},       {"object", object},           {"created", created},
          {"model", model}, {"choices", json::array()}, {"usage", usage.json()}};
}

std::string sse_event(const json& j) {
  // error_handler replace: a token that ends mid-UTF-8 never makes the stream invalid JSON.
  return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

}  // namespace mlxcel::server
