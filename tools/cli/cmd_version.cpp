// `mlxcel --version` (`mlxcel devices` is in cmd_devices.cpp).
#include <cstdio>
#include <string>
#include <vector>

#include "platform/devices.h"
#include "core/build_info.h"
#include "tools/cli/command.h"

namespace mlxcel::cli {
namespace {

int cmd_version(const std::vector<std::string>&) {
  const auto& b = build_info();
  std::printf("mlxcel %s\n", b.version);
  std::printf("commit: %s\n", b.commit);
  std::printf("backend: %s\n", b.backend);
  std::string targets;
  for (const auto& t : platform::build_targets()) targets += (targets.empty() ? "" : ";") + t;
  std::printf("gpu targets: %s\n", targets.empty() ? "none" : targets.c_str());
  std::printf("compiler: %s (%s)\n", b.compiler, b.build_type);
  return 0;
}

}  // namespace

MLXCEL_COMMAND("version", "print version, commit, backend and compiled GPU targets", cmd_version);

}  // namespace mlxcel::cli
