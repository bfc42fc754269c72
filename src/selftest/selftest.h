#pragma once
// `mlxcel selftest`: the op conformance checks and a tiny-model check, shipped in the binary so
// that whoever owns a device we cannot reach (a Radeon, a Strix Halo) proves the build on it with
// one command. Every check runs the same inputs through the device under test and a reference
// backend (the CPU, fast numerics; for `--device cpu` the CPU's fast kernels are checked against
// its MLX-exact ones) and compares with a per-op bound; combinations the device does not support
// are listed as skipped, never passed.
#include <cstdio>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace mlxcel::selftest {

struct Check {
  std::string op;         // "linear", "sample", "model", ...
  std::string signature;  // dtype, format, shape
  enum class Result { kPass, kFail, kSkip } result = Result::kPass;
  double error = 0.0;  // normalized max error (or mismatch count where the check is exact)
  double bound = 0.0;
  std::string detail;  // why it failed or was skipped
};

struct Report {
  std::string device, reference, arch, runtime, mlxcel;
  std::vector<Check> checks;
  int count(Check::Result r) const;
  bool passed() const { return count(Check::Result::kFail) == 0; }
};

// Runs every check of `dut` against `ref`. `quick` runs the smaller shapes only.
Report run(backend::Backend& dut, backend::Backend& ref, bool quick = false);

void print_table(const Report& r, std::FILE* out);
std::string to_json(const Report& r);

}  // namespace mlxcel::selftest
