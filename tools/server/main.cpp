// mlxcel-server: the OpenAI-compatible HTTP server (also reachable as `mlxcel serve`).
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "server/http_server.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    return mlxcel::server::run_server(mlxcel::server::parse_server_args(args));
  } catch (const mlxcel::Error& e) {
    std::fprintf(stderr, "mlxcel-server: error (%s): %s\n",
                 std::string(mlxcel::category_name(e.category())).c_str(), e.what());
    return e.category() == mlxcel::ErrorCategory::kBadInput ? 2 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mlxcel-server: internal error: %s\n", e.what());
    return 1;
  }
}
