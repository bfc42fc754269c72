#pragma once
// Where memory lives and which backend runs an op. BackendKind is always explicit: never infer
// one vendor from the absence of another (DESIGN.md "Backends").
#include <cstdint>
#include <string>
#include <string_view>

namespace mlxcel {

enum class BackendKind : std::uint8_t { kCpu = 0, kCuda = 1, kRocm = 2 };

std::string_view backend_name(BackendKind k);  // "cpu", "cuda", "rocm"
bool parse_backend(std::string_view s, BackendKind* out);

struct Device {
  BackendKind kind = BackendKind::kCpu;
  int index = 0;
  bool is_cpu() const { return kind == BackendKind::kCpu; }
  bool operator==(const Device&) const = default;
  std::string str() const;  // "cpu", "cuda:0", "rocm:1"
};

inline Device cpu_device() { return Device{BackendKind::kCpu, 0}; }

}  // namespace mlxcel
