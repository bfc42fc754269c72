#pragma once
// mlxcel-server / `mlxcel serve`: the OpenAI-compatible HTTP server over the engine, an
// event-driven HTTP/1.1 front end on Boost.Beast/Asio (docs/server.md). Routes: POST
// /v1/chat/completions, POST /v1/completions (both streaming and not), GET /v1/models,
// GET /health, GET /metrics, POST /tokenize, POST /detokenize.
#include <string>
#include <vector>

#include "runtime/loader.h"
#include "runtime/sampler.h"

namespace mlxcel::server {

struct ServerOptions {
  std::string model_dir;
  std::string model_id;            // name clients use; default: the folder's name
  std::string host = "127.0.0.1";
  int port = 8080;
  int parallel = 4;
  std::int64_t ctx_size = 0;       // 0: min(model context, 8192)
  std::size_t max_queue = 64;
  double timeout_s = 600;          // per request
  std::string api_key;
  std::vector<std::string> cors_origins;
  bool metrics = true;
  std::size_t max_body_bytes = 8u << 20;
  std::int64_t prefill_chunk = 256;
  runtime::LoadOptions load;
  // HTTP connection limits (nginx-style defaults): a request's headers and body must arrive
  // within read_timeout_s of its first byte; a keep-alive connection may sit idle for
  // idle_timeout_s; one write may wait write_timeout_s for a client that stopped reading.
  double read_timeout_s = 30;
  double idle_timeout_s = 60;
  double write_timeout_s = 30;
  std::size_t max_connections = 8192;
  std::size_t max_header_bytes = 16u << 10;  // request line + all header fields
  std::size_t max_header_fields = 100;
  double shutdown_grace_s = 10;            // running requests get this long to finish on SIGTERM
  std::vector<std::string> allowed_hosts;  // Host names accepted without --api-key ("*": any)
  int http_threads = 0;                    // 0: 2, or more on bigger machines
  std::int64_t debug_step_delay_ms = 0;  // testing aid, see EngineOptions
  std::string debug_nan_marker;          // testing aid: prompts containing it get NaN logits
  runtime::SamplingParams sampling;  // defaults for fields a request leaves out (temperature 1)
};

// Parses server flags (llama-server style); throws bad_input for unknown or malformed ones.
ServerOptions parse_server_args(const std::vector<std::string>& args);
const char* server_help();

// Binds, loads the model, serves until SIGINT/SIGTERM, then shuts down gracefully (a second
// signal exits at once). Returns the process exit code.
int run_server(const ServerOptions& opts);

}  // namespace mlxcel::server
