#include "core/device.h"

namespace mlxcel {

std::string_view backend_name(BackendKind k) {
  switch (k) {
    case BackendKind::kCpu: return "cpu";
    case BackendKind::kCuda: return "cuda";
    case BackendKind::kRocm: return "rocm";
  }
  return "cpu";
}

bool parse_backend(std::string_view s, BackendKind* out) {
  for (BackendKind k : {BackendKind::kCpu, BackendKind::kCuda, BackendKind::kRocm}) {
    if (backend_name(k) == s) {
      *out = k;
      return true;
    }
  }
  return false;
}

std::string Device::str() const {
  if (kind == BackendKind::kCpu) return "cpu";
  return std::string(backend_name(kind)) + ":" + std::to_string(index);
}

}  // namespace mlxcel
