// mlxcel: command-line entry point. Exit codes: 0 ok, 1 runtime failure, 2 bad usage / input,
// 3 unsupported, 4 out of memory, 5 device fault.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "tools/cli/command.h"

namespace mlxcel::cli {

std::vector<Command>& command_table() {
  static std::vector<Command> table;
  return table;
}
bool register_command(const Command& c) {
  command_table().push_back(c);
  return true;
}
const std::vector<Command>& commands() { return command_table(); }

int exit_code(ErrorCategory c) {
  switch (c) {
    case ErrorCategory::kBadInput:
      return 2;
    case ErrorCategory::kUnsupported:
      return 3;
    case ErrorCategory::kOutOfMemory:
      return 4;
    case ErrorCategory::kDeviceFault:
      return 5;
    case ErrorCategory::kInternal:
      return 1;
  }
  return 1;
}

void print_usage() {
  std::printf("usage: mlxcel [--version] <command> [options]\n\ncommands:\n");
  auto cmds = commands();
  std::sort(cmds.begin(), cmds.end(),
            [](const Command& a, const Command& b) { return std::strcmp(a.name, b.name) < 0; });
  for (const auto& c : cmds) std::printf("  %-12s %s\n", c.name, c.summary);
  std::printf("\nRun 'mlxcel <command> --help' for a command's options.\n");
}

}  // namespace mlxcel::cli

int main(int argc, char** argv) {
  using namespace mlxcel::cli;
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    print_usage();
    return args.empty() ? 2 : 0;
  }
  std::string name = args[0];
  if (name == "--version" || name == "-V") name = "version";
  for (const auto& c : commands()) {
    if (name == c.name) {
      try {
        return c.fn(std::vector<std::string>(args.begin() + 1, args.end()));
      } catch (const mlxcel::Error& e) {
        std::fprintf(stderr, "mlxcel %s: error (%s): %s\n", c.name,
                     std::string(mlxcel::category_name(e.category())).c_str(), e.what());
        return exit_code(e.category());
      } catch (const std::exception& e) {
        std::fprintf(stderr, "mlxcel %s: internal error: %s\n", c.name, e.what());
        return 1;
      }
    }
  }
  std::fprintf(stderr, "mlxcel: unknown command '%s'\n\n", name.c_str());
  print_usage();
  return 2;
}
