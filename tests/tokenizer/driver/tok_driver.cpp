// Test driver: reads one JSON request per line on stdin, writes one JSON reply per line on
// stdout. The Python tests start it once and send the whole corpus through it.
//   {"op":"load","dir":D} | {"op":"load","tokenizer_json":P,"config":C}
//   {"op":"load","vocab":V,"merges":M,"config":C} | {"op":"load","tiktoken":T,"config":C}
//   {"op":"encode","text":S | "b64":B,"add_special":bool}       -> {"ids":[...]}
//   {"op":"decode","ids":[...],"skip_special":bool}            -> {"text":S}
//   {"op":"stream","ids":[...],"skip_special":bool}            -> {"chunks":[...]}
//   {"op":"render","template":S,"messages":[...],"tools":X,"add_generation_prompt":b,
//    "extra":{...},"bos_token":S,"eos_token":S}                -> {"text":S} | {"error":S}
//   {"op":"reasoning","chunks":[...],"start":S,"end":S,"starts_in_reasoning":b}
//                                                              -> {"reasoning":S,"content":S}
#include <iostream>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/reasoning.h"
#include "tokenizer/streaming_decoder.h"
#include "tokenizer/tokenizer.h"

using mlxcel::Tokenizer;
using ojson = nlohmann::ordered_json;

static std::string b64(const std::string& in) {
  std::string out;
  int buf = 0, bits = 0;
  for (char c : in) {
    int v = c >= 'A' && c <= 'Z' ? c - 'A'
            : c >= 'a' && c <= 'z' ? c - 'a' + 26
            : c >= '0' && c <= '9' ? c - '0' + 52
            : c == '+' ? 62 : c == '/' ? 63 : -1;
    if (v < 0) continue;
    buf = (buf << 6) | v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((buf >> bits) & 0xFF));
    }
  }
  return out;
}

int main() {
  std::optional<Tokenizer> tok;
  std::string line;
  while (std::getline(std::cin, line)) {
    ojson reply;
    try {
      ojson req = ojson::parse(line);
      std::string op = req.value("op", "");
      auto s = [&](const char* k) { return req.contains(k) ? req[k].get<std::string>() : std::string(); };
      if (op == "load") {
        if (req.contains("dir")) tok = Tokenizer::load(s("dir"));
        else if (req.contains("tokenizer_json")) tok = Tokenizer::from_tokenizer_json(s("tokenizer_json"), s("config"));
        else if (req.contains("vocab")) tok = Tokenizer::from_vocab_merges(s("vocab"), s("merges"), s("config"));
        else tok = Tokenizer::from_tiktoken(s("tiktoken"), s("config"));
        reply["vocab_size"] = tok->vocab_size();
      } else if (op == "encode") {
        std::string text = req.contains("b64") ? b64(s("b64")) : s("text");
        reply["ids"] = tok->encode(text, req.value("add_special", true));
      } else if (op == "decode") {
        auto ids = req["ids"].get<std::vector<int32_t>>();
        reply["text"] = tok->decode(ids, req.value("skip_special", false));
      } else if (op == "stream") {
        mlxcel::StreamingDecoder sd(*tok, req.value("skip_special", false));
        ojson chunks = ojson::array();
        for (auto id : req["ids"].get<std::vector<int32_t>>()) chunks.push_back(sd.push(id));
        chunks.push_back(sd.flush());
        reply["chunks"] = chunks;
      } else if (op == "render") {
        auto t = mlxcel::ChatTemplate::from_source(s("template"), s("bos_token"), s("eos_token"));
        reply["text"] = t.render(req.value("messages", ojson::array()), req.value("tools", ojson()),
                                 req.value("add_generation_prompt", false), req.value("extra", ojson::object()));
      } else if (op == "reasoning") {
        mlxcel::ReasoningSplitter rs(req.value("start", "<think>"), req.value("end", "</think>"),
                                     req.value("starts_in_reasoning", false));
        std::string r, c;
        for (const auto& ch : req["chunks"]) {
          auto d = rs.push(ch.get<std::string>());
          r += d.reasoning;
          c += d.content;
        }
        auto d = rs.flush();
        reply["reasoning"] = r + d.reasoning;
        reply["content"] = c + d.content;
      } else {
        reply["error"] = "unknown op " + op;
      }
    } catch (const std::exception& e) {
      reply["error"] = e.what();
    }
    std::cout << reply.dump(-1, ' ', false, ojson::error_handler_t::replace) << "\n" << std::flush;
  }
  return 0;
}
