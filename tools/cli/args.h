#pragma once
// Argument parsing shared by the mlxcel subcommands, on CLI11. Flag names follow llama.cpp and
// mlx-lm (-m, -p, -n, -c/--ctx-size, -t/--threads, --temp, --top-p, --seed); sampling and
// --numerics values go through runtime/options.h, the same parser mlxcel-server uses, so the
// CLI and the server accept and reject the same values.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "runtime/loader.h"
#include "runtime/sampler.h"

namespace mlxcel::cli {

// CLI::Range without the "INT in [lo - hi]" note in --help (the help text states the range).
inline CLI::Validator in_range(std::int64_t lo, std::int64_t hi) { return CLI::Range(lo, hi).description(""); }

// A new app for `mlxcel NAME` with the house help formatting.
std::unique_ptr<CLI::App> make_app(const std::string& name, const std::string& description);

// Parses `args` (without the command name). Returns false when --help was printed (the command
// then exits 0). A usage error throws kBadInput with CLI11's one-line message.
bool parse_args(CLI::App& app, const std::vector<std::string>& args);

// The model folder, given as -m/--model DIR or as the first positional argument.
struct ModelArg {
  std::string flag, positional;
  // The chosen folder: a path, or a repo id (OWNER/NAME, NAME = mlx-community/NAME) found in the
  // model store or the Hugging Face cache (platform/model_store.h). Throws kBadInput when neither
  // or both are given, when a repo is not downloaded (naming `mlxcel pull`), and points a GGUF
  // file at `mlxcel convert`.
  std::string resolve() const;
};
void add_model_option(CLI::App& app, ModelArg& m);

// --estimate-memory (print the memory plan and exit) and --force (load even when the plan says
// the model does not fit). The plan itself is platform/preflight.h.
struct MemoryArgs {
  bool estimate = false, force = false;
};
void add_memory_options(CLI::App& app, MemoryArgs& m);
// Runs the preflight for `dir` at `ctx` on the backend of `load`: with --estimate-memory prints
// the plan and returns false (the command exits 0); otherwise refuses a GPU this build has no
// code for, and a model that does not fit unless --force. Returns true to go on loading.
bool check_memory(const std::string& dir, std::int64_t ctx, int sequences,
                  const runtime::LoadOptions& load, const MemoryArgs& m);

// -t/--threads N: sets MLXCEL_THREADS for the CPU thread pool (before the model loads).
// --numerics fast|mlx.
struct LoadArgs {
  runtime::LoadOptions load;
  int threads = 0;
  void apply() const;
};
void add_load_options(CLI::App& app, LoadArgs& l);

// --temp, --top-p, --top-k, --min-p, --seed, --repeat-penalty, --repeat-last-n,
// --presence-penalty, --frequency-penalty.
void add_sampling_options(CLI::App& app, runtime::SamplingParams& p);
// Without --seed, each run draws a fresh seed (llama.cpp and mlx-lm behave so); returns it.
std::uint64_t ensure_seed(runtime::SamplingParams& p);

// Refuses a GGUF file given where a model folder is expected, naming the convert command.
void reject_gguf(const std::string& path);

}  // namespace mlxcel::cli
