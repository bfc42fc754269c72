// `mlxcel generate` (one prompt) and `mlxcel run` (interactive chat). Text streams to stdout;
// timing and memory go to stderr.
#include <signal.h>
#include <sys/resource.h>

#include <cerrno>
#include <csignal>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "platform/memory_plan.h"
#include "runtime/loader.h"
#include "runtime/chat.h"
#include "runtime/generator.h"
#include "runtime/options.h"
#include "runtime/stop_strings.h"
#include "tokenizer/reasoning.h"
#include "tokenizer/streaming_decoder.h"
#include "tools/cli/args.h"
#include "tools/cli/command.h"

namespace mlxcel::cli {
namespace {

// Set by SIGINT in `mlxcel run`: the answer being generated stops at the next token and the
// chat goes on (llama.cpp's and Ollama's REPLs behave so). A signal handler can only talk
// through a flag like this one.
volatile std::sig_atomic_t g_interrupted = 0;
extern "C" void on_sigint(int) { g_interrupted = 1; }

struct GenArgs {
  std::string model, prompt, system, output_ids, prompt_ids;
  std::int64_t max_tokens = 256;
  std::int64_t ctx_size = 0;
  bool no_chat_template = false, show_reasoning = false, ignore_eos = false, quiet = false;
  std::vector<std::string> stop;
  runtime::SamplingParams sampling;
  LoadArgs load;
  MemoryArgs memory;
};

// Returns false when --help was printed.
bool parse(const std::vector<std::string>& args, bool repl, GenArgs& g) {
  auto app_owner =
      make_app(repl ? "run" : "generate",
               repl ? "Interactive chat with the model's chat template.\n"
                      "In the chat: /clear resets the conversation, /exit (or Ctrl-D) quits,\n"
                      "Ctrl-C stops the answer being written."
                    : "Generates text for one prompt: the text goes to stdout, timing to stderr.");
  CLI::App& app = *app_owner;
  ModelArg model_arg;
  add_model_option(app, model_arg);
  if (!repl) {
    app.add_option("-p,--prompt", g.prompt, "prompt ('-' reads stdin; \\n and \\t are unescaped)")
        ->type_name("TEXT");
    app.add_option("--prompt-ids", g.prompt_ids,
                   "use the token ids in FILE (a JSON array) as the prompt")
        ->type_name("FILE");
  }
  app.add_option("-n,--max-tokens", g.max_tokens, "tokens to generate (default 256)")
      ->type_name("N")
      ->check(in_range(1, 1 << 30));
  app.add_option("-c,--ctx-size", g.ctx_size,
                 "context length (default: the model's, at most 32768)")
      ->type_name("N")
      ->check(in_range(16, 1 << 24));
  app.add_option("--system", g.system, "system message")->type_name("TEXT");
  app.add_flag("--no-chat-template", g.no_chat_template, "encode the prompt as is");
  app.add_flag("--show-reasoning", g.show_reasoning, "print <think> reasoning too");
  app.add_option("--stop", g.stop, "stop string (repeatable)")
      ->type_name("TEXT")
      ->allow_extra_args(false);
  app.add_flag("--ignore-eos", g.ignore_eos, "do not stop at end-of-sequence tokens");
  app.add_option("--output-ids", g.output_ids, "write the prompt and generated token ids as JSON")
      ->type_name("FILE");
  app.add_flag("-q,--quiet", g.quiet, "no timing line on stderr");
  add_load_options(app, g.load);
  add_memory_options(app, g.memory);
  add_sampling_options(app, g.sampling);
  if (!parse_args(app, args)) return false;
  g.model = model_arg.resolve();
  if (!repl && g.prompt.empty() && g.prompt_ids.empty() && !g.memory.estimate)
    throw_error(ErrorCategory::kBadInput, "a prompt is required (-p TEXT or --prompt-ids FILE)");
  ensure_seed(g.sampling);
  g.load.apply();
  return true;
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

// The context the engine uses: --ctx-size, else the model's (at most 32768), else 4096.
std::int64_t engine_ctx(const GenArgs& g, std::int64_t model_ctx) {
  return g.ctx_size > 0 ? g.ctx_size
                        : (model_ctx > 0 ? std::min<std::int64_t>(model_ctx, 32768) : 4096);
}

// Before loading: --estimate-memory prints the plan (returns false); a GPU this build has no code
// for, or a model that does not fit, is refused unless --force.
bool preflight(const GenArgs& g) {
  const platform::ModelShape shape = platform::read_model_shape(g.model);
  return check_memory(g.model, engine_ctx(g, shape.context_length), 1, g.load.load, g.memory);
}

Engine open_engine(const GenArgs& g) {
  auto lm =
      runtime::load_model(g.model, g.load.load);  // first: its errors name the folder and files
  Engine e{std::move(lm), runtime::ChatFormatter::load(g.model), nullptr, 0};
  e.ctx = engine_ctx(g, e.lm.model->config().context_length());
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
                                 if (eos || g_interrupted) return false;
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
    const double pp = res.prefill_seconds > 0
                          ? (res.prompt_tokens - res.cached_prompt_tokens) / res.prefill_seconds
                          : 0;
    const double tg = res.decode_seconds > 0 && res.tokens.size() > 1
                          ? (res.tokens.size() - 1) / res.decode_seconds
                          : 0;
    std::fprintf(
        stderr,
        "prompt: %lld tokens (%lld cached), %.1f tok/s | generation: %zu tokens, %.1f tok/s "
        "| finish: %s | peak memory: %.0f MiB | device peak: %.0f MiB%s\n",
        static_cast<long long>(res.prompt_tokens), static_cast<long long>(res.cached_prompt_tokens),
        pp, res.tokens.size(), tg, res.finish_reason.c_str(), peak_rss_mib(),
        // Bytes the backend allocated at its high-water mark: what `inspect --ctx` estimates.
        e.lm.backend->memory_stats().peak / 1048576.0,
        // Sampling draws a fresh seed per run; printing it lets the user replay a run (--seed).
        g.sampling.greedy() ? "" : (" | seed " + std::to_string(*g.sampling.seed)).c_str());
  }
  return answer;
}

int cmd_generate(const std::vector<std::string>& args) {
  GenArgs g;
  if (!parse(args, false, g)) return 0;
  std::string prompt_text = unescape(g.prompt);
  if (!preflight(g)) return 0;
  if (prompt_text == "-") prompt_text.assign(std::istreambuf_iterator<char>(std::cin), {});
  Engine e = open_engine(g);
  std::vector<std::int32_t> prompt;
  bool in_reasoning = false;
  if (!g.prompt_ids.empty()) {
    std::ifstream f(g.prompt_ids);
    if (!f) throw_error(ErrorCategory::kBadInput, g.prompt_ids + ": cannot open");
    auto j = nlohmann::json::parse(f, nullptr, false);
    if (!j.is_array())
      throw_error(ErrorCategory::kBadInput, g.prompt_ids + ": not a JSON array of token ids");
    for (const auto& v : j) {
      if (!v.is_number_integer())
        throw_error(ErrorCategory::kBadInput, g.prompt_ids + ": not a JSON array of token ids");
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
  GenArgs g;
  if (!parse(args, true, g)) return 0;
  if (!preflight(g)) return 0;
  Engine e = open_engine(g);
  if (!e.fmt.has_template())
    throw_error(ErrorCategory::kBadInput,
                g.model + " has no chat template; use `mlxcel generate --no-chat-template`");
  nlohmann::json messages = nlohmann::json::array();
  if (!g.system.empty()) messages.push_back({{"role", "system"}, {"content", g.system}});
  std::fprintf(stderr, "mlxcel run: %s (%s). /clear resets, /exit quits.\n", g.model.c_str(),
               e.lm.model->config().model_type.c_str());
  // No SA_RESTART: a Ctrl-C at the prompt interrupts the read, so the prompt can be shown again.
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  std::string line;
  while (true) {
    g_interrupted = 0;
    std::fputs(">>> ", stdout);
    std::fflush(stdout);
    if (!std::getline(std::cin, line)) {
      if (!g_interrupted) break;
      std::cin.clear();
      clearerr(stdin);
      std::fputs("\n(use /exit or Ctrl-D to quit)\n", stdout);
      continue;
    }
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
      if (g_interrupted) std::fputs("(stopped)\n", stdout);
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
