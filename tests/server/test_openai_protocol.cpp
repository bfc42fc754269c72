#include <gtest/gtest.h>

#include "server/openai_protocol.h"

using namespace mlxcel::server;
using json = nlohmann::json;

namespace {
ApiError expect_400(const std::string& body, bool chat = true) {
  try {
    json j = parse_body(body);
    if (chat) parse_chat_request(j);
    else parse_completion_request(j);
  } catch (const ApiException& e) {
    EXPECT_EQ(e.error.status, 400);
    EXPECT_EQ(e.error.body()["error"]["type"], "invalid_request_error");
    return e.error;
  }
  ADD_FAILURE() << "accepted: " << body;
  return {};
}
}  // namespace

TEST(OpenAiProtocol, ParsesAFullChatRequest) {
  json b = {
      {"model", "m"},
      {"messages", {{{"role", "system"}, {"content", "be brief"}},
                    {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "hi "}},
                                                    {{"type", "text"}, {"text", "there"}}}}}}},
      {"max_completion_tokens", 7},
      {"temperature", 0},
      {"top_p", 0.9},
      {"top_k", 40},
      {"min_p", 0.05},
      {"seed", 3},
      {"stop", {"\n\n", "END"}},
      {"stream", true},
      {"stream_options", {{"include_usage", true}}},
      {"logprobs", true},
      {"top_logprobs", 3},
      {"logit_bias", {{"42", -100}}},
      {"response_format", {{"type", "json_object"}}},
      {"chat_template_kwargs", {{"enable_thinking", false}}}};
  auto r = parse_chat_request(b);
  EXPECT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[1]["content"], "hi there");
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_EQ(r.sampling.temperature, 0.0f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.9f);
  EXPECT_EQ(r.sampling.top_k, 40);
  EXPECT_EQ(*r.sampling.seed, 3u);
  EXPECT_EQ(r.stop.size(), 2u);
  EXPECT_TRUE(r.stream && r.include_usage && r.logprobs && r.json_mode);
  EXPECT_EQ(r.top_logprobs, 3);
  ASSERT_EQ(r.sampling.logit_bias.size(), 1u);
  EXPECT_EQ(r.sampling.logit_bias[0].first, 42);
  EXPECT_EQ(r.template_kwargs["enable_thinking"], false);
}

TEST(OpenAiProtocol, ToolCallArgumentsBecomeObjects) {
  json b = {{"messages",
             {{{"role", "assistant"},
               {"content", nullptr},
               {"tool_calls", {{{"id", "c1"}, {"type", "function"},
                                {"function", {{"name", "f"}, {"arguments", "{\"x\": 1}"}}}}}}},
              {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "2"}}}}};
  auto r = parse_chat_request(b);
  EXPECT_EQ(r.messages[0]["tool_calls"][0]["function"]["arguments"]["x"], 1);
  EXPECT_EQ(r.messages[0]["content"], "");
}

TEST(OpenAiProtocol, RejectsInvalidUtf8InsideStrings) {
  for (const char* bad : {"{\"prompt\": \"a\xff\"}", "{\"prompt\": \"\xc0\xaf\"}",
                          "{\"prompt\": \"\xed\xa0\x80\"}", "{\"prompt\": \"\xf4\x90\x80\x80\"}",
                          "{\"prompt\": \"\xe2\x82\"}", "{\"prompt\": \"\x80\"}"})
    EXPECT_NE(expect_400(bad).message.find("UTF-8"), std::string::npos) << bad;
  // Valid multi-byte text (2, 3 and 4 bytes, the highest code point) passes.
  EXPECT_EQ(parse_body("{\"p\": \"\xc3\xa9\xe6\x9d\xb1\xf0\x9f\x9a\x80\xf4\x8f\xbf\xbf\"}")["p"].get<std::string>().size(), 13u);
}

TEST(OpenAiProtocol, RejectsBadInputNamingTheField) {
  EXPECT_NE(expect_400("{not json").message.find("not valid JSON"), std::string::npos);
  expect_400("[1,2]");
  expect_400("\"\xff\xfe\"");  // invalid UTF-8 is not JSON
  EXPECT_EQ(expect_400(R"({"messages": "hi"})").param, "messages");
  EXPECT_EQ(expect_400(R"({"messages": []})").param, "messages");
  EXPECT_EQ(expect_400(R"({})").param, "messages");
  EXPECT_EQ(expect_400(R"({"messages": [{"role": "wizard", "content": "x"}]})").param, "messages[0]");
  EXPECT_EQ(expect_400(R"({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"})").param,
            "temperature");
  EXPECT_EQ(expect_400(R"({"messages": [{"role": "user", "content": "x"}], "temperature": 9})").param,
            "temperature");
  EXPECT_EQ(expect_400(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": -5})").param,
            "max_tokens");
  EXPECT_EQ(expect_400(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0})").param,
            "max_tokens");
  EXPECT_EQ(expect_400(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 1.5})").param,
            "max_tokens");
  EXPECT_EQ(expect_400(R"({"messages": [{"role": "user", "content": "x"}], "stop": 3})").param, "stop");
  EXPECT_EQ(expect_400(R"({"messages": [{"role": "user", "content": "x"}], "n": 2})").param, "n");
  EXPECT_EQ(expect_400(R"({"messages": [{"role": "user", "content": "x"}], "top_p": 0})").param, "top_p");
  EXPECT_EQ(expect_400(R"({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"a": 1}})").param,
            "logit_bias");
  EXPECT_EQ(expect_400(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})").param,
            "messages[0].content");
  EXPECT_EQ(expect_400(R"({"messages": [{"role": "user", "content": "x"}], "stream": "yes"})").param,
            "stream");
  EXPECT_EQ(expect_400(R"({"prompt": {"a": 1}})", false).param, "prompt");
  EXPECT_EQ(expect_400(R"({"prompt": ["a", "b"]})", false).param, "prompt");
  EXPECT_EQ(expect_400(R"({"prompt": [1, -2]})", false).param, "prompt");
  EXPECT_EQ(expect_400(R"({"model": 5, "prompt": "x"})", false).param, "model");
}

TEST(OpenAiProtocol, CompletionPromptForms) {
  auto a = parse_completion_request(json::parse(R"({"prompt": "hello", "max_tokens": 3, "logprobs": 2})"));
  EXPECT_EQ(a.prompt_text, "hello");
  EXPECT_TRUE(a.logprobs);
  EXPECT_EQ(a.top_logprobs, 2);
  auto b = parse_completion_request(json::parse(R"({"prompt": [1, 2, 3]})"));
  EXPECT_TRUE(b.prompt_is_ids);
  EXPECT_EQ(b.prompt_ids.size(), 3u);
  auto c = parse_completion_request(json::parse(R"({"prompt": ["one"]})"));
  EXPECT_EQ(c.prompt_text, "one");
  EXPECT_EQ(c.sampling.temperature, 1.0f);  // OpenAI default
}

TEST(OpenAiProtocol, ResponsesAndChunksHaveTheOpenAiShape) {
  Usage u{5, 3, 2};
  auto full = chat_response("id1", 100, "m", "answer", "thought", "stop", u, nullptr);
  EXPECT_EQ(full["object"], "chat.completion");
  EXPECT_EQ(full["choices"][0]["message"]["content"], "answer");
  EXPECT_EQ(full["choices"][0]["message"]["reasoning_content"], "thought");
  EXPECT_EQ(full["usage"]["total_tokens"], 8);
  EXPECT_EQ(full["usage"]["prompt_tokens_details"]["cached_tokens"], 2);
  std::string role = "assistant";
  auto first = chat_chunk("id1", 100, "m", &role, "", "", "", nullptr);
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  auto last = chat_chunk("id1", 100, "m", nullptr, "", "", "length", nullptr);
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  auto uc = usage_chunk("id1", 100, "m", "chat.completion.chunk", u);
  EXPECT_TRUE(uc["choices"].empty());
  std::string ev = sse_event(json{{"t", std::string("\xe4\xbd")}});  // half a UTF-8 char
  EXPECT_EQ(ev.rfind("data: ", 0), 0u);
  EXPECT_EQ(ev.substr(ev.size() - 2), "\n\n");
  EXPECT_FALSE(json::parse(ev.substr(6), nullptr, false).is_discarded());
  std::vector<TokenLogprobInfo> lps = {{"a", -0.5f, {{"a", -0.5f}, {"b", -1.0f}}}};
  auto cr = completion_response("c", 1, "m", "a", "length", u, &lps);
  EXPECT_EQ(cr["choices"][0]["logprobs"]["tokens"][0], "a");
  auto ch = chat_response("c", 1, "m", "a", "", "stop", u, &lps);
  EXPECT_EQ(ch["choices"][0]["logprobs"]["content"][0]["top_logprobs"].size(), 2u);
}

TEST(OpenAiProtocol, HostileNestingAndNumbersAre400s) {
  const std::string deep = std::string(28000, '[') + std::string(28000, ']');
  EXPECT_NE(expect_400(R"({"messages": [{"role": "user", "content": "x", "extra": )" + deep + "}]}")
                .message.find("deeper than 128"),
            std::string::npos);
  EXPECT_NE(expect_400(R"({"messages": [{"role": "user", "content": "x"}], "tools": )" + deep + "}")
                .message.find("deeper"),
            std::string::npos);
  // Nesting up to the limit is fine.
  const std::string ok = std::string(100, '[') + std::string(100, ']');
  EXPECT_NO_THROW(parse_chat_request(
      parse_body(R"({"messages": [{"role": "user", "content": "x"}], "tools": )" + ok + "}")));
  // Tool-call arguments are JSON text inside a string: a deep one stays a string.
  json args = json::parse(R"({"messages": [{"role": "assistant", "content": null, "tool_calls":
      [{"id": "c", "type": "function", "function": {"name": "f", "arguments": ""}}]}]})");
  args["messages"][0]["tool_calls"][0]["function"]["arguments"] = deep;
  GenerationRequest g = parse_chat_request(args);
  EXPECT_TRUE(g.messages[0]["tool_calls"][0]["function"]["arguments"].is_string());
  EXPECT_EQ(
      expect_400(
          R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 9223372036854775808.0})")
          .param,
      "max_tokens");
  EXPECT_EQ(
      expect_400(R"({"messages": [{"role": "user", "content": "x"}], "seed": -9.3e18})").param,
      "seed");
  EXPECT_NE(expect_400(R"({"messages": [{"role": "user", "content": "x"}], "temperature": 1e999})")
                .message.find("number overflow"),
            std::string::npos);
  expect_400(R"({"messages": [{"role": "user", "content": "x"}], "top_k": 1e400})");
}
