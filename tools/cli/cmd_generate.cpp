// `mlxcel generate` (one prompt) and `mlxcel run` (interactive chat). Text streams to stdout;
// timing and memory go to stderr.
#include <sys/resource.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "runtime/loader.h"
#include "runtime/chat.h"
#include "runtime/generator.h"
#include "runtime/options.h"
#include "runtime/stop_strings.h"
#include "tokenizer/reasoning.h"
#include "tokenizer/streaming_decoder.h"
#include "tools/cli/command.h"

namespace mlxcel::cli {
namespace {

struct GenArgs {
  std::string model, prompt, system, output_ids, prompt_ids;
  std::int64_t max_tokens = 256;
  std::int64_t ctx_size = 0;
  bool no_chat_template = false, show_reasoning = false, ignore_eos = false, quiet = false;
  std::vector<std::string> stop;
  runtime::SamplingParams sampling;
  runtime::LoadOptions load;
};

void print_help(bool repl) {
  std::printf(
      repl ? "usage: mlxcel run MODEL_DIR [options]\n"
             "Interactive chat with the model's chat template. Commands: /clear, /exit.\n"
           : "usage: mlxcel generate -m MODEL_DIR -p TEXT [options]\n");
  std::printf(
      "  -m, --model DIR        MLX model folder\n"
      "%s"
      "  -n, --max-tokens N     tokens to generate (default 256)\n"
      "  --system TEXT          system message\n"
      "  --no-chat-template     encode the prompt as is\n"
      "  --show-reasoning       print <think> reasoning too\n"
      "  --stop TEXT            stop string (repeatable)\n"
      "  --ignore-eos           do not stop at end-of-sequence tokens\n"
      "  --ctx-size N           context length (default: the model's)\n"
      "  --output-ids FILE      write the prompt and generated token ids as JSON\n"
      "  --prompt-ids FILE      use the token ids in FILE (a JSON array) as the prompt\n"
      "%s%s",
      runtime::load_flags_help(), repl ? "" : "  -p, --prompt TEXT      prompt ('-' reads stdin; \\n and \\t are unescaped)\n",
      runtime::sampling_flags_help());
}

GenArgs parse(const std::vector<std::string>& args, bool repl) {
  GenArgs g;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) throw_error(ErrorCategory::kBadInput, a + " needs a value");
      return args[++i];
    };
    if (runtime::parse_sampling_flag(args, i, g.sampling)) continue;
    if (runtime::parse_load_flag(args, i, g.load)) continue;
    if (a == "-m" || a == "--model") g.model = value();
    else if (!repl && (a == "-p" || a == "--prompt")) g.prompt = value();
    else if (a == "-n" || a == "--max-tokens") g.max_tokens = runtime::parse_int_flag(a, value(), 1, 1 << 30);
    else if (a == "--system") g.system = value();
    else if (a == "--no-chat-template") g.no_chat_template = true;
    else if (a == "--show-reasoning") g.show_reasoning = true;
    else if (a == "--stop") g.stop.push_back(value());
    else if (a == "--ignore-eos") g.ignore_eos = true;
    else if (a == "--ctx-size") g.ctx_size = runtime::parse_int_flag(a, value(), 16, 1 << 24);
    else if (a == "--output-ids") g.output_ids = value();
    else if (!repl && a == "--prompt-ids") g.prompt_ids = value();
    else if (a == "-q" || a == "--quiet") g.quiet = true;
    else if (a == "-h" || a == "--help") {
      print_help(repl);
      std::exit(0);
    } else if (repl && g.model.empty() && a[0] != '-') g.model = a;
    else throw_error(ErrorCategory::kBadInput, "unknown option " + a + " (see --help)");
  }
  if (g.model.empty()) throw_error(ErrorCategory::kBadInput, "a model folder is required (-m DIR)");
  if (!repl && g.prompt.empty() && g.prompt_ids.empty())
    throw_error(ErrorCategory::kBadInput, "a prompt is required (-p TEXT or --prompt-ids FILE)");
  return g;
}

std::string unescape(const std::string& s) {
  std::string o;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size() && (s[i + 1] == 'n' || s[i + 1] == 't')) {
      o += s[i + 1] == 'n' ? '\n' : '\t';
      ++i;
    } else {
      o += s[i];
    }
  }
  return o;
}

double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024.0;
}

struct Engine {
  runtime::LoadedModel lm;
  runtime::ChatFormatter fmt;
  std::unique_ptr<runtime::KvBlockPool> pool;
  std::int64_t ctx = 0;
};

Engine open_engine(const GenArgs& g) {
  auto lm = runtime::load_model(g.model, g.load);  // first: its errors name the folder and files
  Engine e{std::move(lm), runtime::ChatFormatter::load(g.model), nullptr, 0};
  std::int64_t model_ctx = e.lm.model->config().context_length();
  e.ctx = g.ctx_size > 0 ? g.ctx_size : (model_ctx > 0 ? std::min<std::int64_t>(model_ctx, 32768) : 4096);
  e.pool = std::make_unique<runtime::KvBlockPool>(
      e.lm.model->kv_layout(runtime::blocks_for(e.ctx, 32), 32), &e.lm.model->backend());
  return e;
}

// Generates one reply; streams visible text to stdout. Returns the answer text (no reasoning).
std::string reply(Engine& e, const GenArgs& g, const std::vector<std::int32_t>& prompt,
                  bool in_reasoning, std::vector<std::int32_t>* ids_out) {
  runtime::GenerationConfig cfg;
  cfg.sampling = g.sampling;
  cfg.max_tokens = g.max_tokens;
  cfg.ignore_eos = g.ignore_eos;
  cfg.eos_ids = e.fmt.eos_ids(e.lm.eos_ids);
  StreamingDecoder detok(e.fmt.tokenizer(), true);
  const auto& mk = e.fmt.reasoning_markers();
  ReasoningSplitter split(mk.start, mk.end, in_reasoning);
  runtime::StopMatcher stops(g.stop);
  std::string answer;
  auto show = [&](const std::string& text) {
    ReasoningDelta d = split.push(text);
    if (g.show_reasoning && !d.reasoning.empty()) std::fputs(d.reasoning.c_str(), stdout);
    std::fputs(d.content.c_str(), stdout);
    answer += d.content;
    std::fflush(stdout);
  };
  auto res = runtime::generate(*e.lm.model, *e.pool, prompt, cfg,
                               [&](const runtime::SampleResult& r, bool eos) {
                                 if (eos) return false;
                                 auto m = stops.push(detok.push(r.token));
                                 show(m.emit);
                                 return !m.stopped;
                               });
  if (!stops.stopped()) show(detok.flush() + stops.flush());
  ReasoningDelta tail = split.flush();
  if (g.show_reasoning) std::fputs(tail.reasoning.c_str(), stdout);
  std::fputs(tail.content.c_str(), stdout);
  answer += tail.content;
  std::fputs("\n", stdout);
  std::fflush(stdout);
  if (ids_out) *ids_out = res.tokens;
  if (!g.quiet) {
    const double pp = res.prefill_seconds > 0 ? (res.prompt_tokens - res.cached_prompt_tokens) / res.prefill_seconds : 0;
    const double tg = res.decode_seconds > 0 && res.tokens.size() > 1
                          ? (res.tokens.size() - 1) / res.decode_seconds : 0;
    std::fprintf(stderr,
                 "prompt: %lld tokens (%lld cached), %.1f tok/s | generation: %zu tokens, %.1f tok/s "
                 "| finish: %s | peak memory: %.0f MiB\n",
                 static_cast<long long>(res.prompt_tokens), static_cast<long long>(res.cached_prompt_tokens),
                 pp, res.tokens.size(), tg, res.finish_reason.c_str(), peak_rss_mib());
  }
  return answer;
}

int cmd_generate(const std::vector<std::string>& args) {
  GenArgs g = parse(args, false);
  std::string prompt_text = unescape(g.prompt);
  if (prompt_text == "-") prompt_text.assign(std::istreambuf_iterator<char>(std::cin), {});
  Engine e = open_engine(g);
  std::vector<std::int32_t> prompt;
  bool in_reasoning = false;
  if (!g.prompt_ids.empty()) {
    std::ifstream f(g.prompt_ids);
    if (!f) throw_error(ErrorCategory::kBadInput, g.prompt_ids + ": cannot open");
    auto j = nlohmann::json::parse(f, nullptr, false);
    if (!j.is_array()) throw_error(ErrorCategory::kBadInput, g.prompt_ids + ": not a JSON array of token ids");
    for (const auto& v : j) {
      if (!v.is_number_integer()) throw_error(ErrorCategory::kBadInput, g.prompt_ids + ": not a JSON array of token ids");
      prompt.push_back(v.get<std::int32_t>());
    }
  } else if (!g.no_chat_template && e.fmt.has_template()) {
    nlohmann::json messages = nlohmann::json::array();
    if (!g.system.empty()) messages.push_back({{"role", "system"}, {"content", g.system}});
    messages.push_back({{"role", "user"}, {"content", prompt_text}});
    std::string rendered;
    prompt = e.fmt.encode_chat(messages, nullptr, nlohmann::json::object(), &rendered);
    in_reasoning = ReasoningSplitter::prompt_opens_reasoning(rendered, e.fmt.reasoning_markers());
  } else {
    prompt = e.fmt.encode_raw(prompt_text);
  }
  std::vector<std::int32_t> ids;
  reply(e, g, prompt, in_reasoning, &ids);
  if (!g.output_ids.empty()) {
    std::ofstream o(g.output_ids);
    o << nlohmann::json{{"prompt", prompt}, {"tokens", ids}}.dump() << "\n";
  }
  return 0;
}

int cmd_run(const std::vector<std::string>& args) {
  GenArgs g = parse(args, true);
  Engine e = open_engine(g);
  if (!e.fmt.has_template())
    throw_error(ErrorCategory::kBadInput, g.model + " has no chat template; use `mlxcel generate --no-chat-template`");
  nlohmann::json messages = nlohmann::json::array();
  if (!g.system.empty()) messages.push_back({{"role", "system"}, {"content", g.system}});
  std::fprintf(stderr, "mlxcel run: %s (%s). /clear resets, /exit quits.\n", g.model.c_str(),
               e.lm.model->config().model_type.c_str());
  std::string line;
  while (true) {
    std::fputs(">>> ", stdout);
    std::fflush(stdout);
    if (!std::getline(std::cin, line)) break;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/clear") {
      messages = nlohmann::json::array();
      if (!g.system.empty()) messages.push_back({{"role", "system"}, {"content", g.system}});
      std::fputs("(conversation cleared)\n", stdout);
      continue;
    }
    if (line.empty()) continue;
    messages.push_back({{"role", "user"}, {"content", line}});
    std::string rendered;
    try {
      auto prompt = e.fmt.encode_chat(messages, nullptr, nlohmann::json::object(), &rendered);
      bool in_r = ReasoningSplitter::prompt_opens_reasoning(rendered, e.fmt.reasoning_markers());
      std::string answer = reply(e, g, prompt, in_r, nullptr);
      messages.push_back({{"role", "assistant"}, {"content", answer}});
    } catch (const Error& err) {
      if (err.category() != ErrorCategory::kBadInput) throw;
      std::fprintf(stderr, "error: %s\n", err.what());
      messages.erase(messages.size() - 1);
    }
  }
  return 0;
}

}  // namespace

MLXCEL_COMMAND("generate", "generate text from a prompt", cmd_generate);
MLXCEL_COMMAND("run", "interactive chat with a model", cmd_run);

}  // namespace mlxcel::cli
