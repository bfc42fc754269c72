#pragma once
// What GPUs this machine has and how much memory each can give, from the GPU runtime this build
// links (CUDA or HIP) and from Linux sysfs, which works with no GPU runtime at all:
// - AMD: KFD topology (/sys/class/kfd/kfd/topology/nodes/N/{properties,name,gpu_id}) for the gfx
//   target, compute units, wave size and firmware; DRM (/sys/class/drm/renderD<minor>/device/
//   mem_info_{vram,gtt}_{total,used}) for the carve-out ("VRAM") and GTT sizes.
// - NVIDIA: PCI functions of vendor 0x10de and a display class, so a CPU build can still say
//   that a GPU is there (its name and memory come only from the CUDA runtime).
// - Host: /proc/meminfo (MemTotal, MemAvailable) and /proc/sys/kernel/osrelease.
// Every path is read under sysfs_root() (MLXCEL_SYSFS_ROOT, default "/"), so tests run the same
// code over fixture trees.
#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"

namespace mlxcel::platform {

struct GpuDevice {
  std::string source;       // "cuda runtime", "hip runtime", "sysfs (kfd)", "sysfs (pci)"
  std::string vendor;       // "AMD", "NVIDIA"
  int index = 0;            // runtime device index; for sysfs-only devices their order
  std::string name;         // "AMD Radeon 8060S", "NVIDIA H200"; sysfs: the KFD name or PCI id
  std::string arch;         // "gfx1151", "sm_90"; "" when unknown
  int compute_units = 0;    // CUs (AMD) or SMs (NVIDIA)
  int wave_size = 0;        // 32 on NVIDIA and RDNA, 64 on CDNA
  bool integrated = false;  // APU: shares system memory (carve-out + GTT)
  std::uint64_t vram_total = 0, vram_free = 0;  // the carve-out on an APU
  std::uint64_t gtt_total = 0, gtt_free = 0;    // 0 when the driver does not say
  bool has_memory_info = false;                 // vram_* are known
  std::string pci_id;                           // "1002:1586"
  std::string firmware;                         // KFD fw_version
  std::string driver_version;                   // kernel (amdgpu is in-tree) or NVIDIA driver
  std::string runtime_version;                  // "HIP 7.2", "CUDA runtime 13.0 / driver 13.0"
  bool supported = true;                        // this binary has code for it (GPU builds only)
  std::string unsupported_reason;
};

struct HostMemory {
  std::uint64_t total = 0, available = 0;  // MemTotal, MemAvailable
};

struct Platform {
  std::vector<GpuDevice> gpus;
  HostMemory host;
  std::string kernel;   // osrelease, "" when unknown
  std::string backend;  // this build: "none", "cuda", "rocm"
  std::vector<std::string> compiled_targets;
  std::string runtime_note;           // why the runtime lists no device, when it does not
  std::vector<std::string> warnings;  // HSA_OVERRIDE_GFX_VERSION, kernel too old, ...
};

// MLXCEL_SYSFS_ROOT, or "" for the real root. Paths are root + "/sys/...".
std::string sysfs_root();

// AMD GPUs from KFD + DRM under `root` (one per KFD node with a gfx target).
std::vector<GpuDevice> sysfs_amd_gpus(const std::string& root);
// NVIDIA GPUs from PCI under `root` (vendor 0x10de, class 0x03xxxx).
std::vector<GpuDevice> sysfs_nvidia_gpus(const std::string& root);
HostMemory read_host_memory(const std::string& root);
std::string read_kernel_release(const std::string& root);

// This binary's GPU backend and compiled targets (the tools ask here, not the GPU runtime).
BackendKind build_backend();
std::vector<std::string> build_targets();
std::string build_runtime_version();  // "none" for a CPU build

// The whole picture: runtime devices (when this build has a GPU runtime) enriched with sysfs
// facts (GTT, firmware), plus sysfs-only devices the runtime does not list, plus warnings.
Platform detect();

// "6.18.4-200.fc43.x86_64" -> {6, 18, 4}; missing parts are 0.
std::vector<int> parse_kernel_version(const std::string& release);

}  // namespace mlxcel::platform
