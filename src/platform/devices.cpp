#include "platform/devices.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "backend/gpu/runtime.h"
#include "core/build_info.h"
#include "platform/arch.h"

namespace mlxcel::platform {
namespace fs = std::filesystem;

namespace {

std::string read_line(const fs::path& p) {
  std::ifstream f(p);
  std::string s;
  if (f) std::getline(f, s);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

bool read_u64(const fs::path& p, std::uint64_t* out) {
  const std::string s = read_line(p);
  if (s.empty()) return false;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 0);
  if (end == s.c_str()) return false;
  *out = v;
  return true;
}

// KFD node properties: one "key value" pair per line.
std::map<std::string, std::uint64_t> read_properties(const fs::path& p) {
  std::map<std::string, std::uint64_t> m;
  std::ifstream f(p);
  std::string key;
  unsigned long long v = 0;
  while (f >> key >> v) m[key] = v;
  return m;
}

std::uint64_t get(const std::map<std::string, std::uint64_t>& m, const char* k) {
  auto it = m.find(k);
  return it == m.end() ? 0 : it->second;
}

std::string hex4(std::uint64_t v) {
  char b[8];
  std::snprintf(b, sizeof b, "%04llx", static_cast<unsigned long long>(v & 0xffff));
  return b;
}

// Numeric-aware order so node 10 follows node 9.
std::vector<fs::path> sorted_children(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) out.push_back(e.path());
  std::sort(out.begin(), out.end(), [](const fs::path& a, const fs::path& b) {
    const std::string x = a.filename().string(), y = b.filename().string();
    return x.size() != y.size() ? x.size() < y.size() : x < y;
  });
  return out;
}

}  // namespace

std::string sysfs_root() {
  const char* r = std::getenv("MLXCEL_SYSFS_ROOT");
  std::string s = r ? r : "";
  while (!s.empty() && s.back() == '/') s.pop_back();
  return s;
}

std::vector<GpuDevice> sysfs_amd_gpus(const std::string& root) {
  std::vector<GpuDevice> out;
  const fs::path nodes = root + "/sys/class/kfd/kfd/topology/nodes";
  for (const auto& node : sorted_children(nodes)) {
    const auto p = read_properties(node / "properties");
    const std::uint32_t gfxv = static_cast<std::uint32_t>(get(p, "gfx_target_version"));
    if (get(p, "simd_count") == 0 || gfxv == 0) continue;  // a CPU node
    GpuDevice d;
    d.source = "sysfs (kfd)";
    d.vendor = "AMD";
    d.index = static_cast<int>(out.size());
    d.arch = gfx_name(gfxv);
    const std::string name = read_line(node / "name");
    d.name = name.empty() ? d.arch : name;
    const std::uint64_t simd_per_cu = get(p, "simd_per_cu");
    d.compute_units = simd_per_cu ? static_cast<int>(get(p, "simd_count") / simd_per_cu) : 0;
    d.wave_size = static_cast<int>(get(p, "wave_front_size"));
    d.pci_id = hex4(get(p, "vendor_id")) + ":" + hex4(get(p, "device_id"));
    if (get(p, "fw_version")) d.firmware = std::to_string(get(p, "fw_version"));
    // A node with both CPU cores and SIMDs is an APU exposed as one HSA agent (Kaveri-style);
    // newer APUs have separate nodes, so the gfx target decides.
    d.integrated = get(p, "cpu_cores_count") > 0 || is_apu_gfx(d.arch);
    const fs::path dev =
        root + "/sys/class/drm/renderD" + std::to_string(get(p, "drm_render_minor")) + "/device";
    std::uint64_t vt = 0, vu = 0, gt = 0, gu = 0;
    if (read_u64(dev / "mem_info_vram_total", &vt)) {
      d.has_memory_info = true;
      d.vram_total = vt;
      d.vram_free = read_u64(dev / "mem_info_vram_used", &vu) && vu <= vt ? vt - vu : vt;
    }
    if (read_u64(dev / "mem_info_gtt_total", &gt)) {
      d.gtt_total = gt;
      d.gtt_free = read_u64(dev / "mem_info_gtt_used", &gu) && gu <= gt ? gt - gu : gt;
    }
    out.push_back(d);
  }
  return out;
}

std::vector<GpuDevice> sysfs_nvidia_gpus(const std::string& root) {
  std::vector<GpuDevice> out;
  for (const auto& fn : sorted_children(root + "/sys/bus/pci/devices")) {
    std::uint64_t vendor = 0, cls = 0, device = 0;
    if (!read_u64(fn / "vendor", &vendor) || vendor != 0x10de) continue;
    if (!read_u64(fn / "class", &cls) || (cls >> 16) != 0x03) continue;  // display controllers
    read_u64(fn / "device", &device);
    GpuDevice d;
    d.source = "sysfs (pci)";
    d.vendor = "NVIDIA";
    d.index = static_cast<int>(out.size());
    d.pci_id = "10de:" + hex4(device);
    d.name = "NVIDIA GPU " + d.pci_id + " at " + fn.filename().string();
    d.driver_version = read_line(root + "/sys/module/nvidia/version");
    out.push_back(d);
  }
  return out;
}

HostMemory read_host_memory(const std::string& root) {
  HostMemory h;
  std::ifstream f(root + "/proc/meminfo");
  std::string key, unit;
  unsigned long long v = 0;
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream is(line);
    if (!(is >> key >> v)) continue;
    if (key == "MemTotal:") h.total = v * 1024;
    if (key == "MemAvailable:") h.available = v * 1024;
  }
  return h;
}

std::string read_kernel_release(const std::string& root) {
  return read_line(root + "/proc/sys/kernel/osrelease");
}

std::vector<int> parse_kernel_version(const std::string& release) {
  std::vector<int> v;
  std::size_t i = 0;
  while (v.size() < 3) {
    std::size_t j = i;
    while (j < release.size() && release[j] >= '0' && release[j] <= '9') ++j;
    if (j == i) break;
    v.push_back(std::stoi(release.substr(i, j - i)));
    if (j >= release.size() || release[j] != '.') break;
    i = j + 1;
  }
  while (v.size() < 3) v.push_back(0);
  return v;
}

BackendKind build_backend() { return gpu::compiled_backend(); }
std::vector<std::string> build_targets() { return gpu::compiled_targets(); }
std::string build_runtime_version() { return gpu::runtime_version(); }

Platform detect() {
  Platform pf;
  const std::string root = sysfs_root();
  pf.host = read_host_memory(root);
  pf.kernel = read_kernel_release(root);
  pf.backend = build_info().backend;
  pf.compiled_targets = gpu::compiled_targets();
  const BackendKind kind = gpu::compiled_backend();

  std::vector<GpuDevice> amd = sysfs_amd_gpus(root);
  std::vector<GpuDevice> nvidia = sysfs_nvidia_gpus(root);
  const std::string driver = pf.kernel.empty() ? "" : "linux " + pf.kernel + " (amdgpu in-tree)";
  for (auto& d : amd) d.driver_version = driver;

  std::vector<GpuDevice> runtime_devs;
  if (kind != BackendKind::kCpu && root.empty()) {
    std::string why;
    const std::string rt = gpu::runtime_version();
    for (const auto& r : gpu::list_devices(&why)) {
      GpuDevice d;
      d.source = kind == BackendKind::kRocm ? "hip runtime" : "cuda runtime";
      d.vendor = kind == BackendKind::kRocm ? "AMD" : "NVIDIA";
      d.index = r.index;
      d.name = r.name;
      d.arch = r.arch;
      d.compute_units = r.compute_units;
      d.wave_size = r.warp_size;
      d.integrated = r.integrated;
      d.vram_total = r.total_bytes;
      d.vram_free = r.free_bytes;
      d.has_memory_info = true;
      d.runtime_version = rt;
      d.supported = r.supported;
      d.unsupported_reason = r.unsupported_reason;
      runtime_devs.push_back(d);
    }
    if (runtime_devs.empty()) pf.runtime_note = why;
  }
  if (kind == BackendKind::kRocm && !runtime_devs.empty()) {
    // HIP enumerates KFD GPU nodes in order; the runtime has no GTT or firmware view.
    for (std::size_t i = 0; i < runtime_devs.size() && i < amd.size(); ++i) {
      GpuDevice& r = runtime_devs[i];
      const GpuDevice& s = amd[i];
      if (s.arch != r.arch) continue;
      r.gtt_total = s.gtt_total;
      r.gtt_free = s.gtt_free;
      r.firmware = s.firmware;
      r.pci_id = s.pci_id;
      r.driver_version = s.driver_version;
      r.integrated = r.integrated || s.integrated;
      // The HIP runtime's free/total query on an APU may report only the carve-out or only GTT;
      // keep the carve-out from DRM so the planner can add GTT itself.
      if (s.has_memory_info && r.integrated) {
        r.vram_total = s.vram_total;
        r.vram_free = s.vram_free;
      }
    }
    amd.erase(amd.begin(), amd.begin() + std::min(amd.size(), runtime_devs.size()));
  }
  if (kind == BackendKind::kCuda && !runtime_devs.empty())
    nvidia.erase(nvidia.begin(), nvidia.begin() + std::min(nvidia.size(), runtime_devs.size()));
  pf.gpus = runtime_devs;
  for (auto* list : {&amd, &nvidia})
    for (auto& d : *list) {
      d.index = static_cast<int>(pf.gpus.size());
      // Only a build with that vendor's backend can run on it.
      const bool ours = (d.vendor == "AMD" && kind == BackendKind::kRocm) ||
                        (d.vendor == "NVIDIA" && kind == BackendKind::kCuda);
      if (!ours) {
        d.supported = false;
        d.unsupported_reason =
            std::string("this mlxcel has ") +
            (kind == BackendKind::kCpu ? "no GPU backend" : "no backend for this vendor") +
            "; build the " + (d.vendor == "AMD" ? "rocm" : "cuda") + " preset to use it";
      } else if (auto err = arch_coverage_error(kind, d.arch, pf.compiled_targets)) {
        d.supported = false;
        d.unsupported_reason = *err;
      }
      pf.gpus.push_back(d);
    }

  if (const char* ov = std::getenv("HSA_OVERRIDE_GFX_VERSION"); ov && *ov) {
    std::string real;
    for (const auto& d : pf.gpus)
      if (d.vendor == "AMD") real += (real.empty() ? "" : ", ") + d.arch;
    pf.warnings.push_back(std::string("HSA_OVERRIDE_GFX_VERSION=") + ov +
                          " is set: the HIP runtime will pretend the GPU" +
                          (real.empty() ? "" : " (" + real + ")") +
                          " is another gfx target and load code built for that one, which can "
                          "fault or compute wrong results. mlxcel builds for the real target: "
                          "unset it and, if this build lacks the target, rebuild for it");
  }
  const auto kv = parse_kernel_version(pf.kernel);
  for (const auto& d : pf.gpus) {
    // gfx1150/gfx1151 need the KFD fixes of Linux 6.18.4 (AMD's ROCm 7.x support table for
    // RDNA 3.5); older kernels hang or fault under load.
    if ((d.arch == "gfx1150" || d.arch == "gfx1151") && !pf.kernel.empty() &&
        kv < std::vector<int>{6, 18, 4}) {
      pf.warnings.push_back("Linux " + pf.kernel +
                            " is older than 6.18.4, the first kernel with the KFD "
                            "fixes " +
                            d.arch +
                            " needs for ROCm 7.x; update the kernel (and "
                            "linux-firmware) before running on the GPU (docs/installation.md)");
      break;
    }
  }
  return pf;
}

}  // namespace mlxcel::platform
