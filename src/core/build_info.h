#pragma once
// What this binary is: printed by `mlxcel --version` and recorded in benchmark provenance.
namespace mlxcel {
struct BuildInfo {
  const char* version;
  const char* commit;
  const char* backend;      // "none", "cuda", "rocm"
  const char* gpu_targets;  // ";"-separated as configured, e.g. "gfx1151;gfx1100;gfx1201"
  const char* compiler;
  const char* build_type;
};
const BuildInfo& build_info();
}  // namespace mlxcel
