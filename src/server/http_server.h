#pragma once
// mlxcel-server / `mlxcel serve`: the OpenAI-compatible HTTP server (cpp-httplib) over the
// engine. Routes: POST /v1/chat/completions, POST /v1/completions (both streaming and not),
// GET /v1/models, GET /health, GET /metrics, POST /tokenize, POST /detokenize.
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
  std::int64_t debug_step_delay_ms = 0;  // testing aid, see EngineOptions
  runtime::SamplingParams sampling;  // defaults for fields a request leaves out (temperature 1)
};

// Parses server flags (llama-server style); throws bad_input for unknown or malformed ones.
ServerOptions parse_server_args(const std::vector<std::string>& args);
const char* server_help();

// Loads the model, binds, serves until SIGINT/SIGTERM. Returns the process exit code.
int run_server(const ServerOptions& opts);

}  // namespace mlxcel::server
