// `mlxcel selftest [--device cpu|gpu] [--json] [--quick] [--inject-fault oob|spin|oom]`: proves
// this build on this machine (src/selftest): op conformance and a tiny model of every family on
// the device against the CPU reference, as a pass/fail table (or JSON to paste into an issue);
// exit status 1 when any check fails. --inject-fault runs one deliberate device fault and
// reports the error it became (scripts/gpu_faults.sh).
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/gpu/runtime.h"
#include "core/error.h"
#include "selftest/selftest.h"
#include "tools/cli/args.h"
#include "tools/cli/command.h"

namespace mlxcel::cli {
namespace {

int cmd_selftest(const std::vector<std::string>& args) {
  auto app = make_app("selftest",
                      "Checks this build on this machine: every op against the CPU reference and a "
                      "tiny model of every family; prints a pass/fail table and exits 1 on failure.");
  std::string device;
  bool json = false, quick = false;
  std::string fault;
  app->add_option("--device", device,
                  "gpu (default when this build has a GPU backend and a device) or cpu (the fast "
                  "CPU kernels against the MLX-exact ones)")
      ->type_name("cpu|gpu")
      ->check(CLI::IsMember({"cpu", "gpu"}));
  app->add_flag("--json", json, "print the report as JSON (to attach to a bug report)");
  app->add_flag("--quick", quick, "skip the largest shapes");
  app->add_option("--inject-fault", fault,
                  "run one deliberate device fault and report the error it becomes")
      ->type_name("oob|spin|oom");
  if (!parse_args(*app, args)) return 0;

  const BackendKind gpu_kind = gpu::compiled_backend();
  std::string why;
  const auto devs = gpu_kind == BackendKind::kCpu ? std::vector<gpu::DeviceInfo>{} : gpu::list_devices(&why);
  if (device.empty()) device = gpu_kind != BackendKind::kCpu && !devs.empty() ? "gpu" : "cpu";
  if (device == "gpu" && gpu_kind == BackendKind::kCpu)
    throw_error(ErrorCategory::kUnsupported,
                "selftest --device gpu: this mlxcel was built without a GPU backend; build the cuda "
                "or rocm preset, or run selftest --device cpu");
  if (device == "gpu" && devs.empty())
    throw_error(ErrorCategory::kUnsupported, "selftest --device gpu: no GPU visible (" + why + ")");

  if (!fault.empty()) {
    if (device != "gpu") throw_error(ErrorCategory::kBadInput, "--inject-fault needs --device gpu");
    const auto t0 = std::chrono::steady_clock::now();
    try {
      if (fault == "oom") {
        auto be = backend::create_backend(gpu_kind);
        auto buf = be->allocate(backend::MemoryKind::kWorkspace, std::size_t{1} << 50);
      } else {
        gpu::inject_fault(fault, 0);
      }
    } catch (const Error& e) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("fault %s -> %s error after %.2f s: %s\n", fault.c_str(),
                  std::string(category_name(e.category())).c_str(), s, e.what());
      std::fflush(stdout);
      std::_Exit(3);  // the device may be unusable now: no teardown that could wait on it
    }
    std::printf("fault %s -> no error\n", fault.c_str());
    return 1;
  }

  std::unique_ptr<backend::Backend> dut, ref;
  selftest::Report report;
  if (device == "gpu") {
    dut = backend::create_backend(gpu_kind);
    ref = std::make_unique<cpu::CpuBackend>(backend::Numerics::kFast);
  } else {
    dut = std::make_unique<cpu::CpuBackend>(backend::Numerics::kFast);
    ref = std::make_unique<cpu::CpuBackend>(backend::Numerics::kMlx);
  }
  report = selftest::run(*dut, *ref, quick);
  if (device == "gpu") {
    report.arch = devs[0].arch + (devs[0].integrated ? " (integrated)" : "");
    report.runtime = gpu::runtime_version();
  }
  if (json)
    std::printf("%s\n", selftest::to_json(report).c_str());
  else
    selftest::print_table(report, stdout);
  return report.passed() ? 0 : 1;
}

}  // namespace

MLXCEL_COMMAND("selftest", "check this build on this machine (ops and tiny models vs the CPU)", cmd_selftest);

}  // namespace mlxcel::cli
