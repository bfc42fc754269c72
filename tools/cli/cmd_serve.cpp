// `mlxcel serve ...` runs mlxcel-server (installed beside this binary) with the same flags, so
// the CLI itself does not link the HTTP library.
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "tools/cli/command.h"

namespace mlxcel::cli {
namespace {

int cmd_serve(const std::vector<std::string>& args) {
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) throw_error(ErrorCategory::kInternal, "serve: cannot find this executable's folder");
  self[n] = '\0';
  std::string dir(self);
  dir = dir.substr(0, dir.rfind('/'));
  std::string server = dir + "/mlxcel-server";
  std::vector<char*> argv;
  argv.push_back(server.data());
  std::vector<std::string> copy = args;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  execv(server.c_str(), argv.data());
  throw_error(ErrorCategory::kBadInput,
              "serve: cannot run " + server + " (build the mlxcel-server target)");
}

}  // namespace

MLXCEL_COMMAND("serve", "OpenAI-compatible server (runs mlxcel-server)", cmd_serve);

}  // namespace mlxcel::cli
