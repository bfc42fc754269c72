// mlxcel-server: the OpenAI-compatible HTTP server (also reachable as `mlxcel serve`).
// Flags are parsed by server::parse_server_args (shared with the server's tests); this file adds
// what the CLI commands accept too: the model folder as the first argument, -t/--threads, and a
// pointer to `mlxcel convert` when the model is a GGUF file.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "platform/devices.h"
#include "platform/model_store.h"
#include "platform/preflight.h"
#include "server/http_server.h"

namespace {

struct MemoryFlags {
  bool estimate = false, force = false;
};

std::vector<std::string> preprocess(std::vector<std::string> args, MemoryFlags& mem) {
  if (!args.empty() && !args[0].empty() && args[0][0] != '-') args.insert(args.begin(), "-m");
  std::vector<std::string> out;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--estimate-memory" || args[i] == "--force") {
      (args[i] == "--force" ? mem.force : mem.estimate) = true;
      continue;
    }
    if (args[i] == "-t" || args[i] == "--threads") {
      if (i + 1 >= args.size())
        mlxcel::throw_error(mlxcel::ErrorCategory::kBadInput, args[i] + " needs a value");
      const std::string& v = args[++i];
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n < 1 || n > 1024)
        mlxcel::throw_error(mlxcel::ErrorCategory::kBadInput,
                            "--threads needs an integer in [1, 1024], got '" + v + "'");
      setenv("MLXCEL_THREADS", v.c_str(), 1);
      continue;
    }
    out.push_back(args[i]);
  }
  return out;
}

void reject_gguf(const std::string& path) {
  char magic[4] = {};
  std::ifstream f(path, std::ios::binary);
  const bool gguf = (path.size() >= 5 && path.compare(path.size() - 5, 5, ".gguf") == 0) ||
                    (f.read(magic, 4) && std::string(magic, 4) == "GGUF");
  if (gguf)
    mlxcel::throw_error(mlxcel::ErrorCategory::kBadInput,
                        path +
                            " is a GGUF file; mlxcel serves MLX model folders: convert it with "
                            "`mlxcel convert --from-gguf " +
                            path + " OUT_DIR` and pass OUT_DIR");
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    MemoryFlags mem;
    auto opts = mlxcel::server::parse_server_args(preprocess(args, mem));
    reject_gguf(opts.model_dir);
    // MODEL may be a repo id in the model store or the Hugging Face cache; clients then name
    // the model by that id, not by the snapshot folder.
    const std::string given = opts.model_dir;
    opts.model_dir = mlxcel::platform::resolve_model(given);
    if (opts.model_id.empty() && opts.model_dir != given)
      opts.model_id = mlxcel::platform::normalize_repo(given);
    // Memory preflight with the engine's own context and KV pool rule (before binding).
    namespace pl = mlxcel::platform;
    const pl::Platform pf = pl::detect();
    pl::PlanRequest req;
    req.backend = opts.load.backend;
    req.sequences = opts.parallel;
    req.prefill_chunk = opts.prefill_chunk;
    try {
      req.ctx = opts.ctx_size > 0 ? opts.ctx_size : pl::default_ctx(pl::read_model_shape(opts.model_dir), 8192);
      const pl::Preflight p = pl::plan_model(opts.model_dir, req, pf);
      if (mem.estimate) {
        std::fputs(p.report().c_str(), stdout);
        return 0;
      }
      pl::enforce(p, pf, mem.force);
    } catch (const mlxcel::Error& e) {
      // A folder the planner cannot read is left to the loader, whose errors name the file.
      if (mem.estimate || e.category() != mlxcel::ErrorCategory::kBadInput) throw;
    }
    return mlxcel::server::run_server(opts);
  } catch (const mlxcel::Error& e) {
    std::fprintf(stderr, "mlxcel-server: error (%s): %s\n",
                 std::string(mlxcel::category_name(e.category())).c_str(), e.what());
    return e.category() == mlxcel::ErrorCategory::kBadInput ? 2 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mlxcel-server: internal error: %s\n", e.what());
    return 1;
  }
}
