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
#include "server/http_server.h"

namespace {

std::vector<std::string> preprocess(std::vector<std::string> args) {
  if (!args.empty() && !args[0].empty() && args[0][0] != '-') args.insert(args.begin(), "-m");
  std::vector<std::string> out;
  for (std::size_t i = 0; i < args.size(); ++i) {
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
    const auto opts = mlxcel::server::parse_server_args(preprocess(args));
    reject_gguf(opts.model_dir);
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
