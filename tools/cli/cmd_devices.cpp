// `mlxcel devices [--json]`: the GPUs this machine has, from the GPU runtime of this build and
// from Linux sysfs (so a CPU build, or a machine whose ROCm/CUDA install is broken, still shows
// what is there), with the memory each can give and warnings about the setup.
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "platform/devices.h"
#include "platform/memory_plan.h"
#include "tools/cli/args.h"
#include "tools/cli/command.h"

namespace mlxcel::cli {
namespace {

using platform::human_bytes;

nlohmann::json device_json(const platform::GpuDevice& d) {
  return {{"index", d.index},
          {"source", d.source},
          {"vendor", d.vendor},
          {"name", d.name},
          {"arch", d.arch},
          {"compute_units", d.compute_units},
          {"wave_size", d.wave_size},
          {"integrated", d.integrated},
          {"memory_known", d.has_memory_info},
          {"vram_total", d.vram_total},
          {"vram_free", d.vram_free},
          {"gtt_total", d.gtt_total},
          {"gtt_free", d.gtt_free},
          {"pci_id", d.pci_id},
          {"firmware", d.firmware},
          {"driver_version", d.driver_version},
          {"runtime_version", d.runtime_version},
          {"usable", d.supported},
          {"unusable_reason", d.unsupported_reason}};
}

int cmd_devices(const std::vector<std::string>& args) {
  bool as_json = false;
  auto app =
      make_app("devices",
               "Lists the GPUs of this machine (GPU runtime of this build + Linux sysfs), their\n"
               "memory (VRAM / carve-out, GTT) and whether this build can use them.");
  app->add_flag("--json", as_json, "print JSON");
  if (!parse_args(*app, args)) return 0;
  const platform::Platform pf = platform::detect();
  std::string targets;
  for (const auto& t : pf.compiled_targets) targets += (targets.empty() ? "" : ";") + t;
  if (as_json) {
    nlohmann::json g = nlohmann::json::array();
    for (const auto& d : pf.gpus) g.push_back(device_json(d));
    nlohmann::json j{{"build",
                      {{"backend", pf.backend},
                       {"gpu_targets", pf.compiled_targets},
                       {"runtime_version", platform::build_runtime_version()}}},
                     {"host",
                      {{"memory_total", pf.host.total},
                       {"memory_available", pf.host.available},
                       {"kernel", pf.kernel}}},
                     {"gpus", g},
                     {"runtime_note", pf.runtime_note},
                     {"warnings", pf.warnings}};
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("cpu: always available (reference backend); host memory %s, %s available\n",
              human_bytes(pf.host.total).c_str(), human_bytes(pf.host.available).c_str());
  std::printf("build: backend %s, gpu targets %s, runtime %s\n", pf.backend.c_str(),
              targets.empty() ? "none" : targets.c_str(),
              platform::build_runtime_version().c_str());
  if (!pf.kernel.empty()) std::printf("kernel: linux %s\n", pf.kernel.c_str());
  if (pf.gpus.empty()) {
    std::printf("gpu: none found (no KFD GPU node, no NVIDIA PCI device%s)\n",
                pf.runtime_note.empty() ? "" : ("; runtime: " + pf.runtime_note).c_str());
  }
  for (const auto& d : pf.gpus) {
    std::printf("gpu %d: %s %s  [%s]\n", d.index, d.vendor.c_str(), d.name.c_str(),
                d.source.c_str());
    std::printf("    arch %s, %d %s, wave %d%s\n", d.arch.empty() ? "?" : d.arch.c_str(),
                d.compute_units, d.vendor == "NVIDIA" ? "SMs" : "CUs", d.wave_size,
                d.integrated ? ", integrated (UMA)" : ", discrete");
    if (d.has_memory_info) {
      std::printf("    %s %s total, %s free", d.integrated ? "carve-out (VRAM)" : "VRAM",
                  human_bytes(d.vram_total).c_str(), human_bytes(d.vram_free).c_str());
      if (d.gtt_total)
        std::printf("; GTT %s total, %s free", human_bytes(d.gtt_total).c_str(),
                    human_bytes(d.gtt_free).c_str());
      std::printf("\n");
    } else {
      std::printf("    memory: unknown without the %s runtime\n",
                  d.vendor == "NVIDIA" ? "CUDA" : "HIP");
    }
    std::string ids;
    if (!d.pci_id.empty()) ids += "pci " + d.pci_id;
    if (!d.firmware.empty())
      ids += (ids.empty() ? "" : ", ") + std::string("firmware ") + d.firmware;
    if (!d.driver_version.empty())
      ids += (ids.empty() ? "" : ", ") + std::string("driver ") + d.driver_version;
    if (!d.runtime_version.empty())
      ids += (ids.empty() ? "" : ", ") + std::string("runtime ") + d.runtime_version;
    if (!ids.empty()) std::printf("    %s\n", ids.c_str());
    if (!d.supported)
      std::printf("    not usable by this build: %s\n", d.unsupported_reason.c_str());
  }
  for (const auto& w : pf.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  return 0;
}

}  // namespace

MLXCEL_COMMAND("devices", "list the GPUs, their memory and whether this build can use them",
               cmd_devices);

}  // namespace mlxcel::cli
