// `mlxcel --version` and `mlxcel devices`.
#include <cstdio>
#include <string>
#include <vector>

#include "backend/gpu/runtime.h"
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
  for (const auto& t : gpu::compiled_targets()) targets += (targets.empty() ? "" : ";") + t;
  std::printf("gpu targets: %s\n", targets.empty() ? "none" : targets.c_str());
  std::printf("compiler: %s (%s)\n", b.compiler, b.build_type);
  return 0;
}

int cmd_devices(const std::vector<std::string>& args) {
  for (const auto& a : args) {
    if (a == "--help" || a == "-h") {
      std::printf("usage: mlxcel devices\nLists the GPUs this build's runtime sees.\n");
      return 0;
    }
  }
  std::printf("cpu: always available (reference backend)\n");
  if (gpu::compiled_backend() == BackendKind::kCpu) {
    std::printf("gpu: none (this build has no GPU backend; build the cuda or rocm preset)\n");
    return 0;
  }
  std::string why;
  auto devs = gpu::list_devices(&why);
  std::printf("gpu runtime: %s\n", gpu::runtime_version().c_str());
  if (devs.empty()) {
    std::printf("gpu: no devices visible (%s)\n", why.c_str());
    return 0;
  }
  for (const auto& d : devs) {
    std::printf("%s:%d  %s  arch %s  %d CUs  warp %d  %.1f GiB (%.1f GiB free)%s\n",
                std::string(backend_name(gpu::compiled_backend())).c_str(), d.index, d.name.c_str(),
                d.arch.c_str(), d.compute_units, d.warp_size, d.total_bytes / 1073741824.0,
                d.free_bytes / 1073741824.0, d.integrated ? "  integrated (UMA)" : "");
    if (!d.supported) std::printf("    not usable: %s\n", d.unsupported_reason.c_str());
  }
  return 0;
}

}  // namespace

MLXCEL_COMMAND("version", "print version, commit, backend and compiled GPU targets", cmd_version);
MLXCEL_COMMAND("devices", "list the devices this build can use", cmd_devices);

}  // namespace mlxcel::cli
