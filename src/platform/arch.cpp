#include "platform/arch.h"

#include <algorithm>
#include <cstdio>

namespace mlxcel::platform {

std::string gfx_name(std::uint32_t v) {
  if (v == 0) return "";
  const unsigned major = v / 10000, minor = (v / 100) % 100, stepping = v % 100;
  char buf[32];
  std::snprintf(buf, sizeof buf, "gfx%u%x%x", major, minor, stepping);
  return buf;
}

bool is_apu_gfx(const std::string& gfx) {
  static const char* kApus[] = {"gfx902",  "gfx909",  "gfx90c",  "gfx1035", "gfx1036", "gfx1037",
                                "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153"};
  return std::any_of(std::begin(kApus), std::end(kApus), [&](const char* a) { return gfx == a; });
}

namespace {
// "sm_90" / "sm_90a" / "90" -> 90; -1 when not a CUDA arch.
int cuda_cc(const std::string& s) {
  std::string d = s.rfind("sm_", 0) == 0 ? s.substr(3) : s;
  while (!d.empty() && !(d.back() >= '0' && d.back() <= '9')) d.pop_back();
  if (d.empty() || d.size() > 4) return -1;
  for (char c : d)
    if (c < '0' || c > '9') return -1;
  return std::stoi(d);
}
}  // namespace

std::string rebuild_command(BackendKind backend, const std::string& arch) {
  if (backend == BackendKind::kCuda) {
    const int cc = cuda_cc(arch);
    return "cmake --preset cuda -DMLXCEL_CUDA_ARCHITECTURES=" +
           (cc > 0 ? std::to_string(cc) : arch) + " && cmake --build --preset cuda";
  }
  return "cmake --preset rocm -DMLXCEL_ROCM_ARCHITECTURES=" + arch +
         " && cmake --build --preset rocm";
}

std::optional<std::string> arch_coverage_error(BackendKind backend, const std::string& arch,
                                               const std::vector<std::string>& targets) {
  if (backend == BackendKind::kCpu) return std::nullopt;
  bool covered = false;
  if (backend == BackendKind::kRocm) {
    covered = std::find(targets.begin(), targets.end(), arch) != targets.end();
  } else {
    const int d = cuda_cc(arch);
    int newest = 0;
    for (const auto& t : targets) {
      const int c = cuda_cc(t);
      newest = std::max(newest, c);
      if (d > 0 && c > 0 && c / 10 == d / 10 && c % 10 <= d % 10) covered = true;
    }
    if (d > 0 && newest > 0 && d >= newest) covered = true;
  }
  if (covered) return std::nullopt;
  std::string list;
  for (const auto& t : targets) list += (list.empty() ? "" : ";") + t;
  std::string msg = "this mlxcel was built for " +
                    (list.empty() ? std::string("no GPU target") : list) + " but the GPU is " +
                    (arch.empty() ? std::string("of an unknown architecture") : arch);
  if (backend == BackendKind::kRocm)
    msg +=
        " (HIP code objects run only on the exact gfx target they were built for; running "
        "anyway fails with \"invalid device function\")";
  msg += ". Rebuild for it: " + rebuild_command(backend, arch.empty() ? "ARCH" : arch) +
         ", or run on the CPU with --device cpu";
  return msg;
}

}  // namespace mlxcel::platform
