#pragma once
// Subcommands of the `mlxcel` binary. Each command file registers itself with
// MLXCEL_COMMAND(name, summary, function); main.cpp dispatches and turns errors into exit codes.
#include <string>
#include <vector>

namespace mlxcel::cli {

using CommandFn = int (*)(const std::vector<std::string>& args);

struct Command {
  const char* name;
  const char* summary;
  CommandFn fn;
};

bool register_command(const Command& c);
const std::vector<Command>& commands();

}  // namespace mlxcel::cli

#define MLXCEL_COMMAND(name, summary, fn)        \
  static const bool mlxcel_cmd_registered_##fn = \
      ::mlxcel::cli::register_command({name, summary, fn})
