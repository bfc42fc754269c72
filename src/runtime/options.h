#pragma once
// Command-line options shared by `mlxcel generate`, `mlxcel run` and `mlxcel serve` (sampling
// defaults, context size), so the CLI and the server never drift.
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/loader.h"
#include "runtime/sampler.h"

namespace mlxcel::runtime {

// Consumes a sampling flag at args[i] (advancing i past its value) and returns true, or returns
// false if args[i] is not a sampling flag. Throws bad_input for a missing or malformed value.
//   --temp T  --top-p P  --top-k K  --min-p M  --seed S  --repeat-penalty R
//   --repeat-last-n N  --presence-penalty X  --frequency-penalty X
bool parse_sampling_flag(const std::vector<std::string>& args, std::size_t& i, SamplingParams& p);
const char* sampling_flags_help();

// Consumes a model-loading flag at args[i] (`--numerics fast|mlx`) like parse_sampling_flag.
bool parse_load_flag(const std::vector<std::string>& args, std::size_t& i,
                     LoadOptions& o);
const char* load_flags_help();

// Typed value helpers with errors that name the flag.
std::int64_t parse_int_flag(const std::string& flag, const std::string& value, std::int64_t lo,
                            std::int64_t hi);
double parse_float_flag(const std::string& flag, const std::string& value);

}  // namespace mlxcel::runtime
