#include "server/http_server.h"

#include <sys/socket.h>

#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>

#include <httplib.h>

#include "core/error.h"
#include "core/log.h"
#include "runtime/loader.h"
#include "runtime/chat.h"
#include "runtime/options.h"
#include "server/api_error.h"
#include "server/engine.h"
#include "server/openai_protocol.h"
#include "server/peer_watch.h"
#include "tokenizer/reasoning.h"

namespace mlxcel::server {
namespace {

using json = nlohmann::json;

httplib::Server* g_server = nullptr;
void on_signal(int) {
  if (g_server) g_server->stop();
}

std::string random_id(const char* prefix) {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  static const char* hex = "0123456789abcdef";
  std::string s = prefix;
  for (int i = 0; i < 24; ++i) s += hex[rng() % 16];
  return s;
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(e.body().dump(), "application/json");
}

struct Server {
  ServerOptions opts;
  runtime::LoadedModel lm;
  std::unique_ptr<runtime::ChatFormatter> fmt;
  ServerMetrics metrics;
  std::unique_ptr<Engine> engine;
  std::int64_t created = std::time(nullptr);

  // Builds the engine request from a parsed OpenAI request (tokenizes on this HTTP thread).
  std::shared_ptr<EngineRequest> make_request(const GenerationRequest& g, std::string* prompt_text) {
    auto r = std::make_shared<EngineRequest>();
    bool in_reasoning = false;
    if (g.endpoint == Endpoint::kChat) {
      std::string rendered;
      try {
        r->prompt = fmt->encode_chat(g.messages, g.tools, g.template_kwargs, &rendered);
      } catch (const Error& e) {
        throw ApiException{ApiError::bad_request(std::string("chat template: ") + e.what(), "messages")};
      }
      in_reasoning = ReasoningSplitter::prompt_opens_reasoning(rendered, fmt->reasoning_markers());
      r->split_reasoning = true;
      if (prompt_text) *prompt_text = rendered;
    } else {
      r->prompt = g.prompt_is_ids ? g.prompt_ids : fmt->encode_raw(g.prompt_text);
      if (prompt_text) *prompt_text = g.prompt_is_ids ? fmt->tokenizer().decode(g.prompt_ids) : g.prompt_text;
    }
    r->starts_in_reasoning = in_reasoning;
    r->sampling = g.sampling;
    r->stop = g.stop;
    r->top_logprobs = g.logprobs ? g.top_logprobs : -1;
    r->json_object = g.json_mode;
    const std::int64_t n = static_cast<std::int64_t>(r->prompt.size());
    if (n == 0)
      throw ApiException{ApiError::bad_request("the prompt is empty (it encodes to no tokens)",
                                               g.endpoint == Endpoint::kChat ? "messages" : "prompt")};
    const std::int64_t ctx = engine->ctx_size();
    if (n >= ctx)
      throw ApiException{ApiError::bad_request(
          "the prompt has " + std::to_string(n) + " tokens but the context holds " +
              std::to_string(ctx) + "; shorten the messages or raise --ctx-size",
          g.endpoint == Endpoint::kChat ? "messages" : "prompt")};
    if (g.max_tokens) {
      if (*g.max_tokens > ctx)
        throw ApiException{ApiError::bad_request(
            "max_tokens " + std::to_string(*g.max_tokens) + " exceeds the context (" +
                std::to_string(ctx) + " tokens)",
            "max_tokens")};
      r->max_tokens = *g.max_tokens;
    }
    r->deadline = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(static_cast<std::int64_t>(opts.timeout_s * 1000));
    return r;
  }

  void check_model(const GenerationRequest& g) {
    if (!g.model.empty() && g.model != opts.model_id)
      throw ApiException{ApiError::not_found("the model '" + g.model + "' does not exist; this server serves '" +
                                                 opts.model_id + "' (GET /v1/models)",
                                             "model")};
  }

  void handle_generation(const httplib::Request& req, httplib::Response& res, Endpoint ep) {
    GenerationRequest g;
    std::shared_ptr<EngineRequest> r;
    std::string echo_text;  // completions with echo: the prompt, sent before the completion
    try {
      json body = parse_body(req.body);
      g = ep == Endpoint::kChat ? parse_chat_request(body, opts.sampling)
                                : parse_completion_request(body, opts.sampling);
      check_model(g);
      r = make_request(g, g.echo ? &echo_text : nullptr);
      if (!engine->submit(r)) {
        metrics.requests_rejected_total.add();
        return send_error(res, ApiError::too_many_requests(
                                   "the server is busy: all slots and the queue are full; retry later"));
      }
    } catch (const ApiException& e) {
      metrics.requests_rejected_total.add();
      return send_error(res, e.error);
    } catch (const Error& e) {
      metrics.requests_rejected_total.add();
      return send_error(res, ApiError::from_error(e));
    }
    const std::string id = random_id(ep == Endpoint::kChat ? "chatcmpl-" : "cmpl-");
    const std::int64_t created_at = std::time(nullptr);
    const std::string model = opts.model_id;
    const auto& tok = fmt->tokenizer();
    auto lp_info = [&tok](const std::vector<TokenInfo>& ts) {
      std::vector<TokenLogprobInfo> out;
      for (const auto& t : ts) {
        TokenLogprobInfo i;
        i.token = tok.decode(std::vector<std::int32_t>{t.id});
        i.logprob = t.logprob;
        for (const auto& x : t.top) i.top.emplace_back(tok.decode(std::vector<std::int32_t>{x.id}), x.logprob);
        out.push_back(std::move(i));
      }
      return out;
    };
    const bool want_lp = g.logprobs;
    auto watch = std::make_shared<PeerWatch>(req.local_addr, req.local_port, req.remote_addr, req.remote_port);

    if (!g.stream) {
      std::string content = echo_text, reasoning, finish;
      std::vector<TokenLogprobInfo> lps;
      Usage usage;
      while (true) {
        auto ev = r->events.pop(std::chrono::milliseconds(200));
        // Nothing is written until the end: notice a client that left (queued or generating).
        if (watch->closed_throttled()) {
          engine->cancel(r);
          return;
        }
        if (!ev) continue;
        if (ev->kind == EngineEvent::Kind::kError) {
          return send_error(res, ev->error_status == 503 ? ApiError::unavailable(ev->error_message)
                                                         : ApiError::internal(ev->error_message));
        }
        if (ev->kind == EngineEvent::Kind::kDone) {
          finish = ev->finish_reason;
          usage = {ev->prompt_tokens, ev->completion_tokens, ev->cached_tokens};
          break;
        }
        content += ev->content;
        reasoning += ev->reasoning;
        if (want_lp) {
          auto v = lp_info(ev->tokens);
          lps.insert(lps.end(), v.begin(), v.end());
        }
      }
      json out = ep == Endpoint::kChat
                     ? chat_response(id, created_at, model, content, reasoning, finish, usage, want_lp ? &lps : nullptr)
                     : completion_response(id, created_at, model, content, finish, usage, want_lp ? &lps : nullptr);
      res.set_content(out.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
      return;
    }

    const bool include_usage = g.include_usage;
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, r, id, created_at, model, ep, include_usage, want_lp, lp_info, watch, echo_text,
         first = true](std::size_t, httplib::DataSink& sink) mutable {
          auto write = [&](const std::string& s) {
            if (!sink.write(s.data(), s.size())) {
              engine->cancel(r);
              return false;
            }
            return true;
          };
          if (first && ep == Endpoint::kChat) {
            std::string role = "assistant";
            if (!write(sse_event(chat_chunk(id, created_at, model, &role, "", "", "", nullptr)))) return false;
          }
          if (first && !echo_text.empty()) {
            if (!write(sse_event(completion_chunk(id, created_at, model, echo_text, "", nullptr)))) return false;
          }
          first = false;
          while (true) {
            auto ev = r->events.pop(std::chrono::milliseconds(200));
            // A write to a vanished client can still succeed (it only fills the socket buffer),
            // so look at the connection itself too.
            if (watch->closed_throttled() || (!ev && !sink.is_writable())) {
              engine->cancel(r);
              return false;
            }
            if (!ev) continue;
            if (ev->kind == EngineEvent::Kind::kError) {
              ApiError e = ev->error_status == 503 ? ApiError::unavailable(ev->error_message)
                                                   : ApiError::internal(ev->error_message);
              write(sse_event(e.body()));
              write(sse_done());
              sink.done();
              return true;
            }
            if (ev->kind == EngineEvent::Kind::kDone) {
              json last = ep == Endpoint::kChat
                              ? chat_chunk(id, created_at, model, nullptr, "", "", ev->finish_reason, nullptr)
                              : completion_chunk(id, created_at, model, "", ev->finish_reason, nullptr);
              if (!write(sse_event(last))) return false;
              if (include_usage) {
                Usage u{ev->prompt_tokens, ev->completion_tokens, ev->cached_tokens};
                write(sse_event(usage_chunk(id, created_at, model,
                                            ep == Endpoint::kChat ? "chat.completion.chunk" : "text_completion", u)));
              }
              write(sse_done());
              sink.done();
              return true;
            }
            std::vector<TokenLogprobInfo> lps;
            if (want_lp) lps = lp_info(ev->tokens);
            json chunk = ep == Endpoint::kChat
                             ? chat_chunk(id, created_at, model, nullptr, ev->content, ev->reasoning, "",
                                          want_lp ? &lps : nullptr)
                             : completion_chunk(id, created_at, model, ev->content, "", want_lp ? &lps : nullptr);
            if (!write(sse_event(chunk))) return false;
            return true;  // httplib calls again for the next event
          }
        },
        [this, r](bool success) {
          if (!success) engine->cancel(r);
        });
  }
};

void set_cors(const ServerOptions& o, const httplib::Request& req, httplib::Response& res) {
  if (o.cors_origins.empty()) return;
  std::string origin = req.get_header_value("Origin");
  for (const auto& allowed : o.cors_origins) {
    if (allowed == "*" || allowed == origin) {
      res.set_header("Access-Control-Allow-Origin", allowed == "*" ? "*" : origin);
      res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
      res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
      return;
    }
  }
}

}  // namespace

const char* server_help() {
  return "usage: mlxcel-server -m MODEL_DIR [options]   (also: mlxcel serve ...)\n"
         "  -m, --model DIR          MLX model folder\n"
         "  --alias NAME             model id clients send (default: the folder name)\n"
         "  --host ADDR              bind address (default 127.0.0.1)\n"
         "  --port N                 port (default 8080)\n"
         "  -c, --ctx-size N         context tokens per slot (default: min(model, 8192))\n"
         "  -np, --parallel N        concurrent sequences (default 4)\n"
         "  --max-queue N            requests waiting beyond the slots before 429 (default 64)\n"
         "  --timeout S              per-request limit in seconds (default 600)\n"
         "  --api-key KEY            require 'Authorization: Bearer KEY' (all routes but /health)\n"
         "  --api-key-file FILE      read the key from FILE\n"
         "  --cors-origins LIST      comma-separated allowed origins ('*' for any)\n"
         "  --no-metrics             disable GET /metrics\n"
         "  --max-body-bytes N       largest request body (default 8 MiB)\n"
         "  --numerics fast|mlx      fast: fp32 accumulation (default); mlx: MLX CPU bit for bit\n"
         "  --debug-step-delay-ms N  testing aid: sleep N ms after every engine step\n"
         "sampling defaults for requests that leave a field out (requests override them):\n"
         "  --temp T (default 1, as OpenAI)  --top-p P  --top-k K  --min-p M  --seed S\n"
         "  --repeat-penalty R  --repeat-last-n N  --presence-penalty X  --frequency-penalty X\n";
}

ServerOptions parse_server_args(const std::vector<std::string>& args) {
  ServerOptions o;
  o.sampling = openai_sampling_defaults();
  using runtime::parse_int_flag;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) throw_error(ErrorCategory::kBadInput, a + " needs a value");
      return args[++i];
    };
    if (runtime::parse_load_flag(args, i, o.load)) continue;
    if (runtime::parse_sampling_flag(args, i, o.sampling)) continue;
    if (a == "-m" || a == "--model") o.model_dir = value();
    else if (a == "--alias") o.model_id = value();
    else if (a == "--host") o.host = value();
    else if (a == "--port") o.port = static_cast<int>(parse_int_flag(a, value(), 0, 65535));
    else if (a == "-c" || a == "--ctx-size") o.ctx_size = parse_int_flag(a, value(), 16, 1 << 24);
    else if (a == "-np" || a == "--parallel") o.parallel = static_cast<int>(parse_int_flag(a, value(), 1, 1024));
    else if (a == "--max-queue") o.max_queue = static_cast<std::size_t>(parse_int_flag(a, value(), 0, 1 << 20));
    else if (a == "--timeout") o.timeout_s = runtime::parse_float_flag(a, value());
    else if (a == "--api-key") o.api_key = value();
    else if (a == "--api-key-file") {
      std::string path = value();
      std::ifstream f(path);
      if (!f) throw_error(ErrorCategory::kBadInput, "--api-key-file: cannot read " + path);
      std::getline(f, o.api_key);
      while (!o.api_key.empty() && std::isspace(static_cast<unsigned char>(o.api_key.back()))) o.api_key.pop_back();
      if (o.api_key.empty()) throw_error(ErrorCategory::kBadInput, "--api-key-file: " + path + " is empty");
    } else if (a == "--cors-origins") {
      std::stringstream ss(value());
      std::string item;
      while (std::getline(ss, item, ','))
        if (!item.empty()) o.cors_origins.push_back(item);
    } else if (a == "--metrics") o.metrics = true;
    else if (a == "--no-metrics") o.metrics = false;
    else if (a == "--debug-step-delay-ms") o.debug_step_delay_ms = parse_int_flag(a, value(), 0, 10000);
    else if (a == "--max-body-bytes") o.max_body_bytes = static_cast<std::size_t>(parse_int_flag(a, value(), 1024, 1ll << 32));
    else if (a == "-h" || a == "--help") {
      std::fputs(server_help(), stdout);
      std::exit(0);
    } else throw_error(ErrorCategory::kBadInput, "unknown option " + a + " (see --help)");
  }
  if (o.model_dir.empty()) throw_error(ErrorCategory::kBadInput, "a model folder is required (-m DIR)");
  if (o.model_id.empty()) o.model_id = std::filesystem::path(o.model_dir).filename().string();
  if (o.model_id.empty()) o.model_id = std::filesystem::path(o.model_dir).parent_path().filename().string();
  if (o.timeout_s <= 0) throw_error(ErrorCategory::kBadInput, "--timeout must be positive");
  o.sampling.validate(std::numeric_limits<std::int32_t>::max());
  return o;
}

int run_server(const ServerOptions& opts) {
  std::signal(SIGPIPE, SIG_IGN);
  httplib::Server http;
  Server s;
  s.opts = opts;
  std::atomic<bool> loading{true};

  const std::size_t threads = static_cast<std::size_t>(opts.parallel) + opts.max_queue + 8;
  http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http.set_payload_max_length(opts.max_body_bytes);
  http.set_read_timeout(30, 0);
  http.set_write_timeout(30, 0);
  http.set_keep_alive_max_count(1000);

  http.set_pre_routing_handler([&](const httplib::Request& req, httplib::Response& res) {
    set_cors(opts, req, res);
    if (req.method == "OPTIONS") {
      res.status = 204;
      return httplib::Server::HandlerResponse::Handled;
    }
    if (!opts.api_key.empty() && req.path != "/health") {
      if (req.get_header_value("Authorization") != "Bearer " + opts.api_key) {
        send_error(res, ApiError::unauthorized("missing or wrong API key: send 'Authorization: Bearer <key>'"));
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    if (loading.load() && req.path != "/health") {
      send_error(res, ApiError::unavailable("the model is still loading"));
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  http.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty()) return;
    ApiError e;
    e.status = res.status;
    if (res.status == 413) e = ApiError::bad_request("the request body is too large (--max-body-bytes)");
    else if (res.status == 404) e = {404, "invalid_request_error", "no such route", {}, "not_found"};
    else if (res.status == 405) e = {405, "invalid_request_error", "method not allowed", {}, {}};
    else e.message = "HTTP error " + std::to_string(res.status);
    e.status = res.status;
    res.set_content(e.body().dump(), "application/json");
  });
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    ApiError e = ApiError::internal("internal error");
    try {
      std::rethrow_exception(ep);
    } catch (const Error& err) {
      e = ApiError::from_error(err);
    } catch (const std::exception& ex) {
      e = ApiError::internal(ex.what());
    }
    send_error(res, e);
  });

  http.Get("/health", [&](const httplib::Request&, httplib::Response& res) {
    if (loading.load()) {
      res.status = 503;
      res.set_content(R"({"status":"loading"})", "application/json");
    } else if (!s.engine->healthy()) {
      res.status = 503;
      res.set_content(json{{"status", "unhealthy"}, {"reason", s.engine->unhealthy_reason()}}.dump(), "application/json");
    } else {
      res.set_content(json{{"status", "ok"}, {"slots_active", s.engine->active_slots()},
                           {"slots_total", opts.parallel}, {"queued", s.engine->queued()}}.dump(),
                      "application/json");
    }
  });
  http.Get("/v1/models", [&](const httplib::Request&, httplib::Response& res) {
    json m = {{"id", opts.model_id}, {"object", "model"}, {"created", s.created}, {"owned_by", "mlxcel"},
              {"context_length", s.engine->ctx_size()}};
    res.set_content(json{{"object", "list"}, {"data", json::array({m})}}.dump(), "application/json");
  });
  http.Get("/metrics", [&](const httplib::Request&, httplib::Response& res) {
    if (!opts.metrics) return send_error(res, {404, "invalid_request_error", "metrics are disabled", {}, {}});
    res.set_content(s.metrics.render(), "text/plain; version=0.0.4");
  });
  http.Post("/tokenize", [&](const httplib::Request& req, httplib::Response& res) {
    try {
      json b = parse_body(req.body);
      if (!b.contains("content") || !b["content"].is_string())
        throw ApiException{ApiError::bad_request("'content' must be a string", "content")};
      bool special = b.value("add_special", true);
      auto ids = s.fmt->tokenizer().encode(b["content"].get<std::string>(), special);
      res.set_content(json{{"tokens", ids}}.dump(), "application/json");
    } catch (const ApiException& e) {
      send_error(res, e.error);
    }
  });
  http.Post("/detokenize", [&](const httplib::Request& req, httplib::Response& res) {
    try {
      json b = parse_body(req.body);
      if (!b.contains("tokens") || !b["tokens"].is_array())
        throw ApiException{ApiError::bad_request("'tokens' must be an array of token ids", "tokens")};
      std::vector<std::int32_t> ids;
      const auto vocab = s.lm.model->config().vocab_size;
      for (const auto& t : b["tokens"]) {
        if (!t.is_number_integer() || t.get<std::int64_t>() < 0 || t.get<std::int64_t>() >= vocab)
          throw ApiException{ApiError::bad_request("'tokens' must hold ids in [0, " + std::to_string(vocab) + ")", "tokens")};
        ids.push_back(t.get<std::int32_t>());
      }
      res.set_content(json{{"content", s.fmt->tokenizer().decode(ids)}}.dump(-1, ' ', false, json::error_handler_t::replace),
                      "application/json");
    } catch (const ApiException& e) {
      send_error(res, e.error);
    }
  });
  http.Post("/v1/chat/completions", [&](const httplib::Request& req, httplib::Response& res) {
    s.handle_generation(req, res, Endpoint::kChat);
  });
  http.Post("/v1/completions", [&](const httplib::Request& req, httplib::Response& res) {
    s.handle_generation(req, res, Endpoint::kCompletion);
  });

  // The packaged cpp-httplib listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG, fixed when
  // the shared library was built): a burst of concurrent clients overflows the accept queue and
  // sees resets or 1 s SYN retries. Keep the socket the library binds and listen again with the
  // system maximum (Linux updates the backlog of a listening socket).
  int listen_fd = -1;
  http.set_socket_options([&listen_fd](socket_t sock) {
    httplib::default_socket_options(sock);
    listen_fd = static_cast<int>(sock);
  });
  if (!http.bind_to_port(opts.host, opts.port)) {
    throw_error(ErrorCategory::kBadInput,
                "cannot listen on " + opts.host + ":" + std::to_string(opts.port) + " (in use or not permitted)");
  }
  if (listen_fd >= 0 && ::listen(listen_fd, SOMAXCONN) != 0)
    LOG_WARN("could not raise the listen backlog; bursts of connections may be refused");
  std::thread listener([&] { http.listen_after_bind(); });
  g_server = &http;
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::fprintf(stderr, "mlxcel-server: loading %s\n", opts.model_dir.c_str());
  try {
    s.lm = runtime::load_model(opts.model_dir, opts.load);
    s.fmt = std::make_unique<runtime::ChatFormatter>(runtime::ChatFormatter::load(opts.model_dir));
    EngineOptions eo;
    eo.parallel = opts.parallel;
    std::int64_t mctx = s.lm.model->config().context_length();
    eo.ctx_size = opts.ctx_size > 0 ? opts.ctx_size : (mctx > 0 ? std::min<std::int64_t>(mctx, 8192) : 4096);
    eo.max_queue = opts.max_queue;
    eo.prefill_chunk = opts.prefill_chunk;
    eo.eos_ids = s.fmt->eos_ids(s.lm.eos_ids);
    eo.debug_step_delay = std::chrono::milliseconds(opts.debug_step_delay_ms);
    s.engine = std::make_unique<Engine>(*s.lm.model, *s.fmt, eo, s.metrics);
  } catch (...) {
    http.stop();
    listener.join();
    g_server = nullptr;
    throw;
  }
  loading.store(false);
  std::fprintf(stderr, "mlxcel-server: serving '%s' on http://%s:%d (%d slots x %lld tokens)\n",
               opts.model_id.c_str(), opts.host.c_str(), opts.port,
               opts.parallel, static_cast<long long>(s.engine->ctx_size()));
  listener.join();
  g_server = nullptr;
  s.engine->stop();
  return 0;
}

}  // namespace mlxcel::server
