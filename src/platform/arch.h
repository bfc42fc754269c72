#pragma once
// GPU architecture names and whether a binary's compiled targets cover a device. Pure functions,
// so the start-up refusal is unit tested on a CPU build.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"

namespace mlxcel::platform {

// KFD's gfx_target_version is major*10000 + minor*100 + stepping, the gfx name prints minor and
// stepping as one hex digit each: 110501 -> "gfx1151", 90010 -> "gfx90a", 120001 -> "gfx1201".
// Returns "" for 0 (a CPU node).
std::string gfx_name(std::uint32_t gfx_target_version);

// AMD GPUs that are APUs (share system memory with the CPU), by gfx target: the Phoenix / Hawk
// Point (gfx1103), Strix Point / Strix Halo (gfx1150-gfx1153) and Rembrandt / Mendocino
// (gfx1035-gfx1037) families and the Vega APUs (gfx902, gfx909, gfx90c).
bool is_apu_gfx(const std::string& gfx);

// nullopt when `targets` (what this binary was compiled for) has code for `device_arch`;
// otherwise the refusal, naming the device, the targets and the exact rebuild command. HIP code
// objects must match the gfx target exactly; CUDA SASS runs on the same major with a minor at
// least the target's, and the PTX of the newest target JIT-compiles forward.
std::optional<std::string> arch_coverage_error(BackendKind backend, const std::string& device_arch,
                                               const std::vector<std::string>& targets);

// The command that rebuilds this tree for `device_arch`.
std::string rebuild_command(BackendKind backend, const std::string& device_arch);

}  // namespace mlxcel::platform
