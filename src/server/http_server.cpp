#include "server/http_server.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>
#include <unordered_map>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "core/error.h"
#include "core/log.h"
#include "runtime/loader.h"
#include "runtime/chat.h"
#include "runtime/options.h"
#include "server/api_error.h"
#include "server/engine.h"
#include "server/openai_protocol.h"
#include "tokenizer/reasoning.h"

namespace mlxcel::server {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using Request = http::request<http::string_body>;
using Response = http::response<http::string_body>;

std::string random_id(const char* prefix) {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  static const char* hex = "0123456789abcdef";
  std::string s = prefix;
  for (int i = 0; i < 24; ++i) s += hex[rng() % 16];
  return s;
}

std::chrono::milliseconds ms(double seconds) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000.0));
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// "host:port", "[v6]:port", "host" -> lower-case host without the port.
std::string host_name(std::string_view host) {
  std::string h = lower(host);
  if (!h.empty() && h[0] == '[') {
    auto end = h.find(']');
    return end == std::string::npos ? h : h.substr(1, end - 1);
  }
  auto colon = h.find(':');
  if (colon != std::string::npos && h.find(':', colon + 1) == std::string::npos) h.resize(colon);
  return h;
}

bool is_loopback_name(const std::string& h) {
  return h == "localhost" || h == "127.0.0.1" || h == "::1" || h.rfind("127.", 0) == 0 ||
         (h.size() > 10 && h.compare(h.size() - 10, 10, ".localhost") == 0);
}

// An Origin such as "http://localhost:3000" -> "localhost".
std::string origin_host(std::string_view origin) {
  auto p = origin.find("://");
  if (p == std::string_view::npos) return {};
  std::string_view rest = origin.substr(p + 3);
  auto slash = rest.find('/');
  if (slash != std::string_view::npos) rest = rest.substr(0, slash);
  return host_name(rest);
}

ApiError event_error(const EngineEvent& ev) {
  if (ev.error_status == 503) return ApiError::unavailable(ev.error_message);
  if (ev.error_status == 400) return ApiError::bad_request(ev.error_message);
  return ApiError::internal(ev.error_message);
}

class Session;

// Everything the connections share: options, the model, the engine, the I/O context and the
// worker pool for the CPU-heavy parts of a request (JSON, chat template, tokenizer).
// Member order matters: sessions die with the io_context, and their destructors still use the
// engine, the counters and the registry, which are declared (so destroyed) before it.
struct App {
  ServerOptions opts;
  runtime::LoadedModel lm;
  std::unique_ptr<runtime::ChatFormatter> fmt;
  ServerMetrics metrics;
  std::unique_ptr<Engine> engine;
  std::int64_t created = std::time(nullptr);
  std::size_t prompt_byte_limit = std::numeric_limits<std::size_t>::max();
  std::atomic<bool> loading{true};
  std::atomic<bool> shutting_down{false};
  std::atomic<std::size_t> connections{0};
  std::mutex sessions_mu;
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions;

  asio::io_context ioc;
  std::unique_ptr<asio::thread_pool> workers;
  tcp::acceptor acceptor{ioc};

  void accept();
  void begin_shutdown();
  void watch_shutdown(Clock::time_point grace_end, bool engine_stopped);
  std::size_t busy_sessions();

  // Builds the engine request (chat template + tokenizer; runs on a worker thread).
  std::shared_ptr<EngineRequest> make_request(const GenerationRequest& g, std::string* prompt_text);
};

// One generation answered on a session. At namespace scope: clang (the rocm preset) does not
// consider a nested class with default member initializers default-constructible inside the
// enclosing class, so std::optional<Generation>::emplace() would not compile there.
struct Generation {
  Endpoint ep = Endpoint::kChat;
  bool stream = false, include_usage = false, want_lp = false;
  std::string id, model, echo_text;
  std::int64_t created = 0;
  std::string content, reasoning;
  std::vector<TokenLogprobInfo> lps;
};

// One TCP connection. All its handlers run on its strand. Requests are read one at a time and
// answered in order (pipelined requests wait in the read buffer); while a request is being
// answered the socket is watched, so a client that closes is noticed at once.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(App& app, tcp::socket sock)
      : app_(app), sock_(std::move(sock)), timer_(sock_.get_executor()) {}
  ~Session() {
    if (req_) app_.engine->cancel(req_);
    app_.connections.fetch_sub(1);
  }

  void start() {
    beast::error_code ec;
    sock_.set_option(tcp::no_delay(true), ec);  // SSE chunks and small responses go out at once
    wait_request();
  }

  // Shutdown: close at once when no request is being answered; otherwise the answer ends first.
  void on_shutdown() {
    if (!busy_) close();
  }
  bool busy() const { return busy_.load(); }
  asio::any_io_executor executor() { return sock_.get_executor(); }

 private:
  // ---- reading -----------------------------------------------------------------------------
  void wait_request() {
    if (app_.shutting_down.load()) return close();
    busy_ = false;
    arm(app_.opts.idle_timeout_s);
    if (filling_) {
      // The watch read still pending continues with the next request; if that request is
      // already in the buffer, stop the read so it is parsed now.
      beast::error_code ec;
      if (buf_.size() > 0) sock_.cancel(ec);
      return;
    }
    if (buf_.size() > 0) return read_header();
    // An idle keep-alive connection costs no thread and no buffer: wait until bytes arrive (or
    // the idle timeout passes).
    sock_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](beast::error_code ec) {
      if (self->closed_) return;
      if (ec) return self->close();
      if (!self->reading_) self->read_header();
    });
  }

  // While a request is answered, keep a read pending on the socket: end-of-stream or a reset
  // means the client left (its request is cancelled at once); bytes are the start of a pipelined
  // next request, kept in the read buffer (up to a bound) for when this answer is done.
  void watch_peer() {
    if (filling_ || closed_ || buf_.size() >= kMaxPipelined) return;
    filling_ = true;
    auto mb = buf_.prepare(4096);
    sock_.async_read_some(mb, [self = shared_from_this()](beast::error_code ec, std::size_t n) {
      self->filling_ = false;
      if (self->closed_) return;
      self->buf_.commit(n);
      if (ec == asio::error::operation_aborted && !self->busy_) return self->wait_request();
      if (ec) return self->peer_left();
      if (!self->busy_) {
        if (!self->reading_) self->read_header();
        return;
      }
      self->watch_peer();
    });
  }
  static constexpr std::size_t kMaxPipelined = 1u << 20;

  void read_header() {
    reading_ = true;
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(app_.opts.max_header_bytes));
    parser_->body_limit(app_.opts.max_body_bytes);
    // The whole request, headers and body, must arrive within the read timeout (slowloris).
    arm(app_.opts.read_timeout_s);
    http::async_read_header(
        sock_, buf_, *parser_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_header(ec); });
  }

  void on_header(beast::error_code ec) {
    if (ec) {
      reading_ = false;
      return on_read_error(ec);
    }
    busy_ = true;
    const auto& h = parser_->get();
    std::size_t fields = 0, content_lengths = 0;
    for (const auto& f : h) {
      ++fields;
      if (f.name() == http::field::content_length) ++content_lengths;
    }
    keep_alive_ = h.keep_alive();
    version_ = h.version();
    origin_ = std::string(h[http::field::origin]);
    if (fields > app_.opts.max_header_fields)
      return reject(431, "too many header fields (" + std::to_string(fields) + "; the limit is " +
                             std::to_string(app_.opts.max_header_fields) + ")");
    // Two Content-Length fields (even equal ones) or Content-Length with Transfer-Encoding are
    // how request smuggling starts (RFC 9112 6.3): refuse them.
    if (content_lengths > 1) return reject(400, "more than one Content-Length header");
    if (content_lengths == 1 && h.count(http::field::transfer_encoding) > 0)
      return reject(400, "both Content-Length and Transfer-Encoding are set");
    if (auto len = parser_->content_length(); len && *len > app_.opts.max_body_bytes)
      return reject(413, "the request body is " + std::to_string(*len) + " bytes; the limit is " +
                             std::to_string(app_.opts.max_body_bytes) + " (--max-body-bytes)");
    if (auto e = precheck(h)) return reject(*e);
    if (lower(h[http::field::expect]) == "100-continue") {
      auto msg = std::make_shared<std::string>("HTTP/1.1 100 Continue\r\n\r\n");
      asio::async_write(sock_, asio::buffer(*msg),
                        [self = shared_from_this(), msg](beast::error_code ec, std::size_t) {
                          if (ec) return self->close();
                          self->read_body();
                        });
      return;
    }
    read_body();
  }

  void read_body() {
    http::async_read(sock_, buf_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, std::size_t) {
                       self->reading_ = false;
                       if (ec) return self->on_read_error(ec);
                       self->timer_.cancel();
                       self->dispatch(self->parser_->release());
                     });
  }

  void on_read_error(beast::error_code ec) {
    if (ec == http::error::body_limit)
      return reject(413, "the request body is larger than " +
                             std::to_string(app_.opts.max_body_bytes) +
                             " bytes (--max-body-bytes)");
    if (ec == http::error::header_limit)
      return reject(431, "the request headers are larger than " +
                             std::to_string(app_.opts.max_header_bytes) + " bytes");
    if (ec == http::error::end_of_stream || ec == asio::error::eof ||
        ec == asio::error::operation_aborted || ec == asio::error::connection_reset ||
        ec == asio::error::bad_descriptor || closed_)
      return close();
    if (ec.category() == http::make_error_code(http::error::end_of_stream).category())
      return reject(400, std::string("malformed HTTP request: ") + ec.message());
    close();
  }

  // ---- checks before the body is read --------------------------------------------------------
  std::optional<ApiError> precheck(const http::request_header<>& h) {
    const ServerOptions& o = app_.opts;
    const std::string path(h.target().substr(0, h.target().find('?')));
    if (h.method() == http::verb::options) return std::nullopt;
    if (o.api_key.empty()) {
      // Without a key the server trusts whoever reaches it, so make sure a browser page cannot
      // reach it: a DNS-rebinding page sends a foreign Host, a cross-site page an Origin.
      if (!host_allowed(std::string(h[http::field::host])))
        return ApiError{
            403,
            "invalid_request_error",
            "Host '" + std::string(h[http::field::host]) +
                "' is not allowed: without --api-key only loopback host names are accepted "
                "(set --api-key, or list the name in --allowed-hosts)",
            {},
            "forbidden_host"};
      if (!origin_.empty() && !origin_allowed(origin_))
        return ApiError{403,
                        "invalid_request_error",
                        "Origin '" + origin_ +
                            "' is not allowed: set --api-key or list the origin in --cors-origins",
                        {},
                        "forbidden_origin"};
    } else if (path != "/health" && h[http::field::authorization] != "Bearer " + o.api_key) {
      return ApiError::unauthorized("missing or wrong API key: send 'Authorization: Bearer <key>'");
    }
    const Route r = route(path);
    if (r == Route::kNone)
      return ApiError{404, "invalid_request_error", "no such route: " + path, {}, "not_found"};
    const bool post = r == Route::kChat || r == Route::kCompletion || r == Route::kTokenize ||
                      r == Route::kDetokenize;
    if (h.method() != (post ? http::verb::post : http::verb::get)) {
      allow_ = post ? "POST, OPTIONS" : "GET, OPTIONS";
      return ApiError{405,
                      "invalid_request_error",
                      std::string(h.method_string()) + " is not allowed on " + path + "; use " +
                          (post ? "POST" : "GET"),
                      {},
                      "method_not_allowed"};
    }
    if (post) {
      // A JSON body is required: text/plain and form posts are what a browser may send
      // cross-site without a CORS preflight.
      const std::string ct = lower(h[http::field::content_type]);
      if (ct.rfind("application/json", 0) != 0)
        return ApiError{415,
                        "invalid_request_error",
                        "Content-Type must be application/json, got '" +
                            std::string(h[http::field::content_type]) + "'",
                        {},
                        "unsupported_media_type"};
    }
    if (app_.loading.load() && r != Route::kHealth)
      return ApiError::unavailable("the model is still loading");
    if (app_.shutting_down.load() && r != Route::kHealth)
      return ApiError::unavailable("the server is shutting down");
    return std::nullopt;
  }

  bool host_allowed(const std::string& host_header) const {
    const ServerOptions& o = app_.opts;
    if (!is_loopback_name(lower(o.host)) && o.allowed_hosts.empty())
      return true;                         // exposed on purpose
    if (host_header.empty()) return true;  // browsers always send Host; other clients may not
    const std::string h = host_name(host_header);
    if (is_loopback_name(h) || h == lower(o.host)) return true;
    for (const auto& a : o.allowed_hosts)
      if (a == "*" || lower(a) == h) return true;
    return false;
  }

  bool origin_allowed(const std::string& origin) const {
    for (const auto& a : app_.opts.cors_origins)
      if (a == "*" || a == origin) return true;
    return is_loopback_name(origin_host(origin));
  }

  enum class Route : std::uint8_t {
    kNone,
    kHealth,
    kModels,
    kMetrics,
    kChat,
    kCompletion,
    kTokenize,
    kDetokenize
  };
  static Route route(const std::string& path) {
    if (path == "/health") return Route::kHealth;
    if (path == "/v1/models") return Route::kModels;
    if (path == "/metrics") return Route::kMetrics;
    if (path == "/v1/chat/completions") return Route::kChat;
    if (path == "/v1/completions") return Route::kCompletion;
    if (path == "/tokenize") return Route::kTokenize;
    if (path == "/detokenize") return Route::kDetokenize;
    return Route::kNone;
  }

  // ---- answering -----------------------------------------------------------------------------
  void dispatch(Request req) {
    const std::string path(req.target().substr(0, req.target().find('?')));
    if (req.method() == http::verb::options) {
      Response res{http::status::no_content, req.version()};
      return send(std::move(res));
    }
    switch (route(path)) {
      case Route::kHealth:
        return send_json(health_status(), health_body());
      case Route::kModels: {
        json m = {{"id", app_.opts.model_id},
                  {"object", "model"},
                  {"created", app_.created},
                  {"owned_by", "mlxcel"},
                  {"context_length", app_.engine->ctx_size()}};
        return send_json(200, json{{"object", "list"}, {"data", json::array({m})}}.dump());
      }
      case Route::kMetrics: {
        if (!app_.opts.metrics)
          return send_error(ApiError{404, "invalid_request_error", "metrics are disabled", {}, {}});
        Response res{http::status::ok, version_};
        res.set(http::field::content_type, "text/plain; version=0.0.4");
        res.body() = app_.metrics.render();
        return send(std::move(res));
      }
      case Route::kTokenize:
      case Route::kDetokenize:
        return offload([self = shared_from_this(), body = std::move(req.body()),
                        tok = route(path) == Route::kTokenize] {
          return tok ? self->tokenize(body) : self->detokenize(body);
        });
      case Route::kChat:
        return start_generation(std::move(req.body()), Endpoint::kChat);
      case Route::kCompletion:
        return start_generation(std::move(req.body()), Endpoint::kCompletion);
      case Route::kNone:
        break;
    }
    send_error(ApiError{404, "invalid_request_error", "no such route", {}, "not_found"});
  }

  int health_status() const {
    if (app_.loading.load() || !app_.engine->healthy()) return 503;
    return 200;
  }
  std::string health_body() const {
    if (app_.loading.load()) return R"({"status":"loading"})";
    if (!app_.engine->healthy())
      return json{{"status", "unhealthy"}, {"reason", app_.engine->unhealthy_reason()}}.dump();
    return json{{"status", app_.shutting_down.load() ? "shutting_down" : "ok"},
                {"slots_active", app_.engine->active_slots()},
                {"slots_total", app_.opts.parallel},
                {"queued", app_.engine->queued()}}
        .dump();
  }

  struct Answer {
    int status = 200;
    std::string body;
  };

  // Runs `fn` on the worker pool and sends its answer from this connection's strand.
  template <typename Fn>
  void offload(Fn fn) {
    watch_peer();
    asio::post(*app_.workers, [self = shared_from_this(), fn = std::move(fn)]() mutable {
      Answer a;
      try {
        a = fn();
      } catch (const ApiException& e) {
        a = {e.error.status, e.error.body().dump()};
      } catch (const Error& e) {
        ApiError err = ApiError::from_error(e);
        a = {err.status, err.body().dump()};
      } catch (const std::exception& e) {
        ApiError err = ApiError::internal(e.what());
        a = {err.status, err.body().dump()};
      }
      asio::post(self->sock_.get_executor(), [self, a = std::move(a)]() mutable {
        if (self->closed_) return;
        self->send_json(a.status, std::move(a.body));
      });
    });
  }

  Answer tokenize(const std::string& body) {
    json b = parse_body(body);
    auto c = b.find("content");
    if (c == b.end() || !c->is_string())
      throw ApiException{ApiError::bad_request("'content' must be a string", "content")};
    bool special = true;
    if (auto s = b.find("add_special"); s != b.end() && !s->is_null()) {
      if (!s->is_boolean())
        throw ApiException{ApiError::bad_request("'add_special' must be a boolean", "add_special")};
      special = s->get<bool>();
    }
    auto ids = app_.fmt->tokenizer().encode(c->get<std::string>(), special);
    return {200, json{{"tokens", ids}}.dump()};
  }

  Answer detokenize(const std::string& body) {
    json b = parse_body(body);
    if (!b.contains("tokens") || !b["tokens"].is_array())
      throw ApiException{ApiError::bad_request("'tokens' must be an array of token ids", "tokens")};
    std::vector<std::int32_t> ids;
    const auto vocab = app_.lm.model->config().vocab_size;
    for (const auto& t : b["tokens"]) {
      if (!t.is_number_integer() ||
          (t.is_number_unsigned() && t.get<std::uint64_t>() >= static_cast<std::uint64_t>(vocab)) ||
          t.get<std::int64_t>() < 0 || t.get<std::int64_t>() >= vocab)
        throw ApiException{ApiError::bad_request(
            "'tokens' must hold ids in [0, " + std::to_string(vocab) + ")", "tokens")};
      ids.push_back(t.get<std::int32_t>());
    }
    return {200, json{{"content", app_.fmt->tokenizer().decode(ids)}}.dump(
                     -1, ' ', false, json::error_handler_t::replace)};
  }

  // ---- generation ----------------------------------------------------------------------------
  void start_generation(std::string body, Endpoint ep) {
    watch_peer();
    asio::post(*app_.workers, [self = shared_from_this(), body = std::move(body), ep]() mutable {
      GenerationRequest g;
      std::shared_ptr<EngineRequest> r;
      std::string echo_text;
      std::optional<ApiError> err;
      App& app = self->app_;
      try {
        json b = parse_body(body);
        body.clear();
        body.shrink_to_fit();
        g = ep == Endpoint::kChat ? parse_chat_request(b, app.opts.sampling)
                                  : parse_completion_request(b, app.opts.sampling);
        if (!g.model.empty() && g.model != app.opts.model_id)
          throw ApiException{ApiError::not_found("the model '" + g.model +
                                                     "' does not exist; this server serves '" +
                                                     app.opts.model_id + "' (GET /v1/models)",
                                                 "model")};
        if (self->closed_) return;
        r = app.make_request(g, g.echo ? &echo_text : nullptr);
        if (!app.engine->submit(r))
          err = ApiError::too_many_requests(
              "the server is busy: all slots and the queue are full; retry later");
      } catch (const ApiException& e) {
        err = e.error;
      } catch (const Error& e) {
        err = ApiError::from_error(e);
      } catch (const std::exception& e) {
        err = ApiError::internal(e.what());
      }
      if (err) app.metrics.requests_rejected_total.add();
      asio::post(self->sock_.get_executor(),
                 [self, g = std::move(g), r, echo_text = std::move(echo_text), err, ep]() mutable {
                   if (err) {
                     if (!self->closed_) self->send_error(*err);
                     return;
                   }
                   if (self->closed_) {
                     self->app_.engine->cancel(r);
                     return;
                   }
                   self->begin_answer(g, r, std::move(echo_text), ep);
                 });
    });
  }

  void begin_answer(const GenerationRequest& g, std::shared_ptr<EngineRequest> r,
                    std::string echo_text, Endpoint ep) {
    gen_.emplace();
    gen_->ep = ep;
    gen_->stream = g.stream;
    gen_->include_usage = g.include_usage;
    gen_->want_lp = g.logprobs;
    gen_->id = random_id(ep == Endpoint::kChat ? "chatcmpl-" : "cmpl-");
    gen_->created = std::time(nullptr);
    gen_->model = app_.opts.model_id;
    gen_->echo_text = std::move(echo_text);
    req_ = std::move(r);
    if (gen_->stream) {
      chunked_ = version_ >= 11;
      if (!chunked_) keep_alive_ = false;  // HTTP/1.0: the stream ends when the connection does
      std::string head =
          "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n";
      head += chunked_ ? "Transfer-Encoding: chunked\r\n" : "";
      head += keep_alive_ ? "" : "Connection: close\r\n";
      head += cors_headers() + "\r\n";
      out_ += head;
      if (ep == Endpoint::kChat) {
        std::string role = "assistant";
        emit(sse_event(
            chat_chunk(gen_->id, gen_->created, gen_->model, &role, "", "", "", nullptr)));
      }
      if (!gen_->echo_text.empty())
        emit(sse_event(
            completion_chunk(gen_->id, gen_->created, gen_->model, gen_->echo_text, "", nullptr)));
      flush();
    } else {
      gen_->content = gen_->echo_text;
    }
    std::weak_ptr<Session> weak = weak_from_this();
    auto ex = sock_.get_executor();
    req_->events.set_notify([weak, ex] {
      if (auto self = weak.lock()) asio::post(ex, [self] { self->drain_events(); });
    });
  }

  std::vector<TokenLogprobInfo> lp_info(const std::vector<TokenInfo>& ts) const {
    const auto& tok = app_.fmt->tokenizer();
    std::vector<TokenLogprobInfo> out;
    for (const auto& t : ts) {
      TokenLogprobInfo i;
      i.token = tok.decode(std::vector<std::int32_t>{t.id});
      i.logprob = t.logprob;
      for (const auto& x : t.top)
        i.top.emplace_back(tok.decode(std::vector<std::int32_t>{x.id}), x.logprob);
      out.push_back(std::move(i));
    }
    return out;
  }

  void drain_events() {
    if (!gen_ || !req_ || closed_) return;
    Generation& g = *gen_;
    while (auto ev = req_->events.try_pop()) {
      if (ev->kind == EngineEvent::Kind::kError) {
        ApiError e = event_error(*ev);
        if (g.stream) {
          emit(sse_event(e.body()));
          emit(sse_done());
          return finish_stream();
        }
        return end_generation_with(e.status, e.body().dump());
      }
      if (ev->kind == EngineEvent::Kind::kDone) {
        const Usage usage{ev->prompt_tokens, ev->completion_tokens, ev->cached_tokens};
        if (g.stream) {
          json last = g.ep == Endpoint::kChat ? chat_chunk(g.id, g.created, g.model, nullptr, "",
                                                           "", ev->finish_reason, nullptr)
                                              : completion_chunk(g.id, g.created, g.model, "",
                                                                 ev->finish_reason, nullptr);
          emit(sse_event(last));
          if (g.include_usage)
            emit(sse_event(usage_chunk(
                g.id, g.created, g.model,
                g.ep == Endpoint::kChat ? "chat.completion.chunk" : "text_completion", usage)));
          emit(sse_done());
          return finish_stream();
        }
        json out = g.ep == Endpoint::kChat
                       ? chat_response(g.id, g.created, g.model, g.content, g.reasoning,
                                       ev->finish_reason, usage, g.want_lp ? &g.lps : nullptr)
                       : completion_response(g.id, g.created, g.model, g.content, ev->finish_reason,
                                             usage, g.want_lp ? &g.lps : nullptr);
        return end_generation_with(200, out.dump(-1, ' ', false, json::error_handler_t::replace));
      }
      if (g.stream) {
        std::vector<TokenLogprobInfo> lps;
        if (g.want_lp) lps = lp_info(ev->tokens);
        json chunk = g.ep == Endpoint::kChat
                         ? chat_chunk(g.id, g.created, g.model, nullptr, ev->content, ev->reasoning,
                                      "", g.want_lp ? &lps : nullptr)
                         : completion_chunk(g.id, g.created, g.model, ev->content, "",
                                            g.want_lp ? &lps : nullptr);
        emit(sse_event(chunk));
      } else {
        g.content += ev->content;
        g.reasoning += ev->reasoning;
        if (g.want_lp) {
          auto v = lp_info(ev->tokens);
          g.lps.insert(g.lps.end(), v.begin(), v.end());
        }
      }
    }
    if (g.stream) flush();
  }

  void detach_request() {
    if (req_) req_->events.set_notify(nullptr);
    req_.reset();
    gen_.reset();
  }

  void end_generation_with(int status, std::string body) {
    detach_request();
    send_json(status, std::move(body));
  }

  void finish_stream() {
    detach_request();
    if (chunked_) out_pending_terminator_ = true;
    response_done_ = true;
    flush();
  }

  // Appends one SSE event to the output (as one chunk when chunked).
  void emit(const std::string& ev) {
    if (chunked_) {
      char len[24];
      std::snprintf(len, sizeof(len), "%zx\r\n", ev.size());
      out_ += len;
      out_ += ev;
      out_ += "\r\n";
    } else {
      out_ += ev;
    }
    // A client that stops reading while tokens keep coming: its output would grow without bound.
    if (out_.size() > kMaxPendingOutput) {
      LOG_WARN("closing a connection whose client stopped reading its stream");
      close();
    }
  }

  static constexpr std::size_t kMaxPendingOutput = 16u << 20;

  // Writes what is queued; one write at a time, so a slow client holds back its own output
  // only (the engine never waits for a socket).
  void flush() {
    if (writing_ || closed_) return;
    if (out_pending_terminator_ && out_.empty() == false) {
      // the terminator goes after everything queued
    }
    if (out_pending_terminator_) {
      out_ += "0\r\n\r\n";
      out_pending_terminator_ = false;
    }
    if (out_.empty()) {
      if (response_done_) after_response();
      return;
    }
    writing_ = true;
    auto data = std::make_shared<std::string>(std::move(out_));
    out_.clear();
    arm(app_.opts.write_timeout_s);
    asio::async_write(sock_, asio::buffer(*data),
                      [self = shared_from_this(), data](beast::error_code ec, std::size_t) {
                        self->writing_ = false;
                        self->timer_.cancel();
                        if (ec) return self->close();
                        self->flush();
                      });
  }

  void after_response() {
    response_done_ = false;
    if (!keep_alive_ || app_.shutting_down.load()) return linger();
    wait_request();
  }

  // Closing while the client still sends (a refused upload) would reset the connection and
  // could destroy the answer in flight; like nginx, stop sending, read and drop what still
  // comes for a short while, then close.
  void linger() {
    busy_ = false;
    beast::error_code ec;
    sock_.shutdown(tcp::socket::shutdown_send, ec);
    if (ec || lingering_) return close();
    lingering_ = true;
    arm(1.0);
    drain_input(std::make_shared<std::array<char, 16384>>(), 0);
  }
  void drain_input(std::shared_ptr<std::array<char, 16384>> scratch, std::size_t total) {
    sock_.async_read_some(asio::buffer(*scratch), [self = shared_from_this(), scratch, total](
                                                      beast::error_code ec, std::size_t n) {
      if (ec || total + n > (1u << 20)) return self->close();
      self->drain_input(scratch, total + n);
    });
  }

  // ---- plain responses ---------------------------------------------------------------------
  std::string cors_headers() const {
    const auto& allowed = app_.opts.cors_origins;
    if (allowed.empty() || origin_.empty()) return {};
    for (const auto& a : allowed) {
      if (a == "*" || a == origin_) {
        return "Access-Control-Allow-Origin: " + (a == "*" ? std::string("*") : origin_) +
               "\r\nAccess-Control-Allow-Headers: Authorization, Content-Type\r\n"
               "Access-Control-Allow-Methods: GET, POST, OPTIONS\r\n";
      }
    }
    return {};
  }

  void send_json(int status, std::string body) {
    Response res{static_cast<http::status>(status), version_};
    res.set(http::field::content_type, "application/json");
    res.body() = std::move(body);
    send(std::move(res));
  }

  void send_error(const ApiError& e) { send_json(e.status, e.body().dump()); }

  // An error answered before the body was read: the connection cannot be reused.
  void reject(const ApiError& e) {
    keep_alive_ = false;
    send_error(e);
  }
  void reject(int status, const std::string& message) {
    ApiError e = ApiError::bad_request(message);
    e.status = status;
    if (status == 413) e.code = "request_too_large";
    if (status == 431) e.code = "request_header_fields_too_large";
    reject(e);
  }

  void send(Response res) {
    if (closed_) return;
    busy_ = true;
    res.version(version_);
    res.keep_alive(keep_alive_ && !app_.shutting_down.load());
    if (!allow_.empty()) res.set(http::field::allow, allow_);
    allow_.clear();
    res.prepare_payload();
    std::ostringstream head;
    head << res.base();
    std::string cors = cors_headers();
    std::string h = head.str();
    if (!cors.empty()) h.insert(h.size() - 2, cors);  // before the blank line
    out_ += h;
    out_ += res.body();
    response_done_ = true;
    flush();
  }

  // ---- connection state --------------------------------------------------------------------
  void peer_left() {
    if (req_) {
      app_.engine->cancel(req_);
      detach_request();
    }
    close();
  }

  // Arms the connection's deadline; when it passes, the socket closes and pending I/O fails.
  void arm(double seconds) {
    timer_.expires_after(ms(seconds));
    timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (ec || self->closed_) return;
      if (self->timer_.expiry() > Clock::now()) return;  // re-armed meanwhile
      self->peer_left();
    });
  }

 public:
  void close() {
    if (closed_.exchange(true)) return;
    busy_ = false;
    if (req_) {
      app_.engine->cancel(req_);
      detach_request();
    }
    beast::error_code ec;
    timer_.cancel();
    sock_.shutdown(tcp::socket::shutdown_both, ec);
    sock_.close(ec);
    std::lock_guard<std::mutex> lock(app_.sessions_mu);
    app_.sessions.erase(this);
  }

 private:
  App& app_;
  tcp::socket sock_;
  asio::steady_timer timer_;
  beast::flat_buffer buf_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::shared_ptr<EngineRequest> req_;
  std::optional<Generation> gen_;
  std::string out_;
  std::string origin_;
  std::string allow_;
  unsigned version_ = 11;
  bool keep_alive_ = true;
  bool chunked_ = false;
  bool writing_ = false;
  bool filling_ = false;
  bool reading_ = false;
  bool lingering_ = false;
  bool response_done_ = false;
  bool out_pending_terminator_ = false;
  std::atomic<bool> closed_{false};  // read by workers too
  std::atomic<bool> busy_{false};
};

std::shared_ptr<EngineRequest> App::make_request(const GenerationRequest& g,
                                                 std::string* prompt_text) {
  auto r = std::make_shared<EngineRequest>();
  const std::int64_t ctx = engine->ctx_size();
  const std::string param = g.endpoint == Endpoint::kChat ? "messages" : "prompt";
  // Before tokenizing: no token covers more than `max token bytes` of text, so a text longer
  // than ctx * that (with slack for normalizers that shrink text) cannot fit the context, and
  // tokenizing megabytes only to say so would cost seconds and hundreds of MiB.
  auto check_bytes = [&](std::size_t bytes) {
    if (bytes > prompt_byte_limit)
      throw ApiException{ApiError::bad_request(
          "the prompt is " + std::to_string(bytes) + " bytes, more than a context of " +
              std::to_string(ctx) + " tokens can hold (at most " +
              std::to_string(prompt_byte_limit) + " bytes); shorten it or raise --ctx-size",
          param)};
  };
  bool in_reasoning = false;
  std::string marker_text;
  if (g.endpoint == Endpoint::kChat) {
    std::string rendered;
    try {
      rendered = fmt->render(g.messages, g.tools, true, g.template_kwargs);
    } catch (const Error& e) {
      throw ApiException{
          ApiError::bad_request(std::string("chat template: ") + e.what(), "messages")};
    }
    check_bytes(rendered.size());
    r->prompt = fmt->tokenizer().encode(rendered, false);  // as ChatFormatter::encode_chat does
    in_reasoning = ReasoningSplitter::prompt_opens_reasoning(rendered, fmt->reasoning_markers());
    r->split_reasoning = true;
    marker_text = rendered;
    if (prompt_text) *prompt_text = rendered;
  } else {
    if (!g.prompt_is_ids) check_bytes(g.prompt_text.size());
    r->prompt = g.prompt_is_ids ? g.prompt_ids : fmt->encode_raw(g.prompt_text);
    if (!g.prompt_is_ids) marker_text = g.prompt_text;
    if (prompt_text)
      *prompt_text = g.prompt_is_ids ? fmt->tokenizer().decode(g.prompt_ids) : g.prompt_text;
  }
  if (!opts.debug_nan_marker.empty() &&
      marker_text.find(opts.debug_nan_marker) != std::string::npos)
    r->debug_nan_logits = true;
  r->starts_in_reasoning = in_reasoning;
  r->sampling = g.sampling;
  r->stop = g.stop;
  r->top_logprobs = g.logprobs ? g.top_logprobs : -1;
  r->json_object = g.json_mode;
  r->cache_salt = g.cache_salt;
  const std::int64_t n = static_cast<std::int64_t>(r->prompt.size());
  if (n == 0)
    throw ApiException{
        ApiError::bad_request("the prompt is empty (it encodes to no tokens)", param)};
  if (n >= ctx)
    throw ApiException{ApiError::bad_request(
        "the prompt has " + std::to_string(n) + " tokens but the context holds " +
            std::to_string(ctx) + "; shorten the messages or raise --ctx-size",
        param)};
  if (g.max_tokens) {
    if (*g.max_tokens > ctx)
      throw ApiException{ApiError::bad_request("max_tokens " + std::to_string(*g.max_tokens) +
                                                   " exceeds the context (" + std::to_string(ctx) +
                                                   " tokens)",
                                               "max_tokens")};
    r->max_tokens = *g.max_tokens;
  }
  r->deadline = Clock::now() + ms(opts.timeout_s);
  return r;
}

void App::accept() {
  acceptor.async_accept(asio::make_strand(ioc), [this](beast::error_code ec, tcp::socket sock) {
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
      if (ec == asio::error::no_descriptors) {
        // Out of file descriptors: pause briefly instead of spinning on accept.
        LOG_WARN(
            "accept failed: out of file descriptors; raise `ulimit -n` or lower --max-connections");
        auto t = std::make_shared<asio::steady_timer>(ioc, std::chrono::milliseconds(100));
        t->async_wait([this, t](beast::error_code) { accept(); });
        return;
      }
      return accept();
    }
    if (shutting_down.load()) return;
    if (connections.load() >= opts.max_connections) {
      // Over the limit: answer 503 in one short write and close, without reading.
      static const std::string busy =
          "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: "
          "close\r\n"
          "Content-Length: 108\r\n\r\n"
          R"({"error":{"message":"too many open connections","type":"server_error","param":null,"code":"unavailable"}})"
          "\n";
      beast::error_code wec;
      sock.non_blocking(true, wec);
      sock.write_some(asio::buffer(busy), wec);
      sock.close(wec);
      return accept();
    }
    connections.fetch_add(1);
    auto s = std::make_shared<Session>(*this, std::move(sock));
    {
      std::lock_guard<std::mutex> lock(sessions_mu);
      sessions[s.get()] = s;
    }
    s->start();
    accept();
  });
}

std::size_t App::busy_sessions() {
  std::size_t n = 0;
  std::lock_guard<std::mutex> lock(sessions_mu);
  for (auto& [p, w] : sessions)
    if (auto s = w.lock(); s && s->busy()) ++n;
  return n;
}

void App::begin_shutdown() {
  if (shutting_down.exchange(true)) return;
  std::fprintf(stderr,
               "mlxcel-server: shutting down (up to %.0f s for running requests; a second signal "
               "exits at once)\n",
               opts.shutdown_grace_s);
  beast::error_code ec;
  acceptor.close(ec);
  if (loading.load() || !engine) {
    ioc.stop();
    return;
  }
  engine->drain();
  std::vector<std::shared_ptr<Session>> all;
  {
    std::lock_guard<std::mutex> lock(sessions_mu);
    for (auto& [p, w] : sessions)
      if (auto s = w.lock()) all.push_back(s);
  }
  // Idle connections and half-sent requests close now; answers in progress finish first.
  for (auto& s : all) asio::post(s->executor(), [s] { s->on_shutdown(); });
  watch_shutdown(Clock::now() + ms(opts.shutdown_grace_s), false);
}

void App::watch_shutdown(Clock::time_point grace_end, bool engine_stopped) {
  auto t = std::make_shared<asio::steady_timer>(ioc, std::chrono::milliseconds(50));
  t->async_wait([this, t, grace_end, engine_stopped](beast::error_code) {
    const bool idle = engine->active_slots() == 0 && busy_sessions() == 0;
    if (idle) {
      ioc.stop();
      return;
    }
    if (!engine_stopped && Clock::now() >= grace_end) {
      // Grace is over: end the running requests; each stream gets an error event and [DONE].
      engine->request_stop();
      watch_shutdown(Clock::now() + std::chrono::seconds(2), true);
      return;
    }
    if (engine_stopped && Clock::now() >= grace_end) {
      ioc.stop();  // answers that could not be flushed in 2 s are dropped
      return;
    }
    watch_shutdown(grace_end, engine_stopped);
  });
}

// Raises the soft descriptor limit to the hard one: every connection is a descriptor.
void raise_fd_limit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

std::vector<std::string> split_list(const std::string& v) {
  std::vector<std::string> out;
  std::stringstream ss(v);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

double parse_seconds(const std::string& flag, const std::string& v, double lo, double hi) {
  const double x = runtime::parse_float_flag(flag, v);
  if (!(x >= lo && x <= hi))
    throw_error(ErrorCategory::kBadInput, flag + " must be between " + json(lo).dump() + " and " +
                                              json(hi).dump() + " seconds, got " + v);
  return x;
}

}  // namespace

const char* server_help() {
  return "usage: mlxcel-server -m MODEL [options]   (also: mlxcel serve ...)\n"
         "  -m, --model MODEL        MLX model folder, or OWNER/NAME from `mlxcel pull`\n"
         "  --alias NAME             model id clients send (default: the folder name)\n"
         "  --host ADDR              bind address (default 127.0.0.1)\n"
         "  --port N                 port (default 8080)\n"
         "  -c, --ctx-size N         context tokens per slot (default: min(model, 8192))\n"
         "  -np, --parallel N        concurrent sequences (default 4)\n"
         "  --max-queue N            requests waiting beyond the slots before 429 (default 64)\n"
         "  --timeout S              per-request limit in seconds (default 600, at most 604800)\n"
         "  --api-key KEY            require 'Authorization: Bearer KEY' (all routes but /health)\n"
         "  --api-key-file FILE      read the key from FILE\n"
         "  --cors-origins LIST      comma-separated allowed origins ('*' for any)\n"
         "  --allowed-hosts LIST     Host names accepted without --api-key besides loopback ('*': "
         "any)\n"
         "  --no-metrics             disable GET /metrics\n"
         "  --max-body-bytes N       largest request body, chunked or not (default 8 MiB)\n"
         "  --max-connections N      open connections at most (default 8192)\n"
         "  --read-timeout S         a request must arrive within S seconds of its first byte "
         "(default 30)\n"
         "  --idle-timeout S         keep-alive connections close after S idle seconds (default "
         "60)\n"
         "  --write-timeout S        a client that reads nothing for S seconds is dropped (default "
         "30)\n"
         "  --shutdown-grace S       on SIGTERM, running requests get S seconds to finish (default "
         "10)\n"
         "  --numerics fast|mlx      fast: fp32 accumulation (default); mlx: MLX CPU bit for bit\n"
         "  --estimate-memory        print the memory plan (weights, KV pool, available) and exit\n"
         "  --force                  start even when the memory plan says the model does not fit\n"
         "  --debug-step-delay-ms N  testing aid: sleep N ms after every engine step\n"
         "  --debug-nan-marker STR   testing aid: prompts containing STR get NaN logits\n"
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
    // A week at most: the deadline is a steady_clock time point, and 1e10 s overflowed it.
    else if (a == "--timeout")
      o.timeout_s = parse_seconds(a, value(), 0.001, 604800);
    else if (a == "--read-timeout")
      o.read_timeout_s = parse_seconds(a, value(), 0.1, 3600);
    else if (a == "--idle-timeout")
      o.idle_timeout_s = parse_seconds(a, value(), 0.1, 86400);
    else if (a == "--write-timeout")
      o.write_timeout_s = parse_seconds(a, value(), 0.1, 3600);
    else if (a == "--shutdown-grace")
      o.shutdown_grace_s = parse_seconds(a, value(), 0, 3600);
    else if (a == "--max-connections")
      o.max_connections = static_cast<std::size_t>(parse_int_flag(a, value(), 1, 1 << 20));
    else if (a == "--api-key") o.api_key = value();
    else if (a == "--api-key-file") {
      std::string path = value();
      std::ifstream f(path);
      if (!f) throw_error(ErrorCategory::kBadInput, "--api-key-file: cannot read " + path);
      std::getline(f, o.api_key);
      while (!o.api_key.empty() && std::isspace(static_cast<unsigned char>(o.api_key.back()))) o.api_key.pop_back();
      if (o.api_key.empty()) throw_error(ErrorCategory::kBadInput, "--api-key-file: " + path + " is empty");
    } else if (a == "--cors-origins")
      o.cors_origins = split_list(value());
    else if (a == "--allowed-hosts")
      o.allowed_hosts = split_list(value());
    else if (a == "--metrics")
      o.metrics = true;
    else if (a == "--no-metrics") o.metrics = false;
    else if (a == "--debug-step-delay-ms") o.debug_step_delay_ms = parse_int_flag(a, value(), 0, 10000);
    else if (a == "--debug-nan-marker")
      o.debug_nan_marker = value();
    else if (a == "--max-body-bytes") o.max_body_bytes = static_cast<std::size_t>(parse_int_flag(a, value(), 1024, 1ll << 32));
    else if (a == "-h" || a == "--help") {
      std::fputs(server_help(), stdout);
      std::exit(0);
    } else throw_error(ErrorCategory::kBadInput, "unknown option " + a + " (see --help)");
  }
  if (o.model_dir.empty()) throw_error(ErrorCategory::kBadInput, "a model folder is required (-m DIR)");
  if (o.model_id.empty()) o.model_id = std::filesystem::path(o.model_dir).filename().string();
  if (o.model_id.empty())
    o.model_id = std::filesystem::path(o.model_dir).parent_path().filename().string();
  o.sampling.validate(std::numeric_limits<std::int32_t>::max());
  return o;
}

int run_server(const ServerOptions& opts) {
  std::signal(SIGPIPE, SIG_IGN);
  raise_fd_limit();
  App app;
  app.opts = opts;
  const int io_threads =
      opts.http_threads > 0
          ? opts.http_threads
          : static_cast<int>(std::clamp(std::thread::hardware_concurrency() / 4, 2u, 8u));
  app.workers =
      std::make_unique<asio::thread_pool>(static_cast<std::size_t>(std::max(2, io_threads)));

  beast::error_code ec;
  const auto addr = asio::ip::make_address(opts.host, ec);
  if (ec) throw_error(ErrorCategory::kBadInput, "--host " + opts.host + " is not an IP address");
  tcp::endpoint ep(addr, static_cast<unsigned short>(opts.port));
  app.acceptor.open(ep.protocol(), ec);
  if (!ec) app.acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) app.acceptor.bind(ep, ec);
  if (!ec) app.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    throw_error(ErrorCategory::kBadInput, "cannot listen on " + opts.host + ":" +
                                              std::to_string(opts.port) + " (" + ec.message() +
                                              ")");

  // SIGINT / SIGTERM: graceful shutdown; a second one exits at once.
  asio::signal_set signals(app.ioc, SIGINT, SIGTERM);
  std::function<void(beast::error_code, int)> on_signal = [&](beast::error_code e, int sig) {
    if (e) return;
    if (app.shutting_down.load()) {
      std::fprintf(stderr, "mlxcel-server: second signal, exiting now\n");
      std::_Exit(128 + sig);
    }
    if (app.loading.load()) {
      std::fprintf(stderr, "mlxcel-server: signal while loading, exiting\n");
      std::_Exit(0);
    }
    app.begin_shutdown();
    signals.async_wait(on_signal);
  };
  signals.async_wait(on_signal);

  app.accept();
  std::vector<std::thread> io;
  for (int i = 0; i < io_threads; ++i) io.emplace_back([&app] { app.ioc.run(); });
  auto join_all = [&] {
    for (auto& t : io) t.join();
    app.workers->join();
  };

  std::fprintf(stderr, "mlxcel-server: loading %s\n", opts.model_dir.c_str());
  try {
    app.lm = runtime::load_model(opts.model_dir, opts.load);
    app.fmt =
        std::make_unique<runtime::ChatFormatter>(runtime::ChatFormatter::load(opts.model_dir));
    EngineOptions eo;
    eo.parallel = opts.parallel;
    std::int64_t mctx = app.lm.model->config().context_length();
    eo.ctx_size = opts.ctx_size > 0 ? opts.ctx_size : (mctx > 0 ? std::min<std::int64_t>(mctx, 8192) : 4096);
    eo.max_queue = opts.max_queue;
    eo.prefill_chunk = opts.prefill_chunk;
    eo.eos_ids = app.fmt->eos_ids(app.lm.eos_ids);
    eo.debug_step_delay = std::chrono::milliseconds(opts.debug_step_delay_ms);
    // The longest text one token stands for bounds how many bytes a context's worth of tokens
    // can cover; the factor 2 leaves room for normalizers that shrink text.
    const auto& tok = app.fmt->tokenizer();
    std::size_t longest = 1;
    for (std::size_t t = 0; t < tok.vocab_size(); ++t)
      longest = std::max(
          longest, tok.decode(std::vector<std::int32_t>{static_cast<std::int32_t>(t)}).size());
    app.prompt_byte_limit = static_cast<std::size_t>(eo.ctx_size) * longest * 2 + 4096;
    app.engine = std::make_unique<Engine>(*app.lm.model, *app.fmt, eo, app.metrics);
  } catch (...) {
    app.ioc.stop();
    join_all();
    throw;
  }
  app.loading.store(false);
  std::fprintf(stderr, "mlxcel-server: serving '%s' on http://%s:%d (%d slots x %lld tokens)\n",
               opts.model_id.c_str(), opts.host.c_str(), opts.port, opts.parallel,
               static_cast<long long>(app.engine->ctx_size()));
  join_all();
  {
    // Connections still open (their answers could not be flushed in time) close with the process.
    std::lock_guard<std::mutex> lock(app.sessions_mu);
    app.sessions.clear();
  }
  app.engine->stop();
  std::fprintf(stderr, "mlxcel-server: stopped\n");
  return 0;
}

}  // namespace mlxcel::server
