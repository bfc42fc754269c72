#include "runtime/options.h"

#include <cmath>
#include <limits>

#include "backend/gpu/runtime.h"
#include "core/error.h"

namespace mlxcel::runtime {

std::int64_t parse_int_flag(const std::string& flag, const std::string& value, std::int64_t lo,
                            std::int64_t hi) {
  std::size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(value, &used);
  } catch (...) {
    used = 0;
  }
  if (used == 0 || used != value.size())
    throw_error(ErrorCategory::kBadInput, flag + " needs an integer, got '" + value + "'");
  if (v < lo || v > hi)
    throw_error(ErrorCategory::kBadInput, flag + " must be between " + std::to_string(lo) +
                                              " and " + std::to_string(hi) + ", got " + value);
  return v;
}

double parse_float_flag(const std::string& flag, const std::string& value) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(value, &used);
  } catch (...) {
    used = 0;
  }
  if (used == 0 || used != value.size() || !std::isfinite(v))
    throw_error(ErrorCategory::kBadInput, flag + " needs a number, got '" + value + "'");
  return v;
}

bool parse_sampling_flag(const std::vector<std::string>& args, std::size_t& i, SamplingParams& p) {
  const std::string& a = args[i];
  auto value = [&]() -> const std::string& {
    if (i + 1 >= args.size()) throw_error(ErrorCategory::kBadInput, a + " needs a value");
    return args[++i];
  };
  if (a == "--temp" || a == "--temperature") p.temperature = static_cast<float>(parse_float_flag(a, value()));
  else if (a == "--top-p") p.top_p = static_cast<float>(parse_float_flag(a, value()));
  else if (a == "--top-k") p.top_k = static_cast<int>(parse_int_flag(a, value(), 0, 1 << 24));
  else if (a == "--min-p") p.min_p = static_cast<float>(parse_float_flag(a, value()));
  else if (a == "--seed") p.seed = static_cast<std::uint64_t>(parse_int_flag(a, value(), 0, std::numeric_limits<std::int64_t>::max()));
  else if (a == "--repeat-penalty") p.repetition_penalty = static_cast<float>(parse_float_flag(a, value()));
  else if (a == "--repeat-last-n") {
    int n = static_cast<int>(parse_int_flag(a, value(), 0, 1 << 24));
    p.repetition_context = p.presence_context = p.frequency_context = n;
  } else if (a == "--presence-penalty") p.presence_penalty = static_cast<float>(parse_float_flag(a, value()));
  else if (a == "--frequency-penalty") p.frequency_penalty = static_cast<float>(parse_float_flag(a, value()));
  else return false;
  return true;
}

bool parse_load_flag(const std::vector<std::string>& args, std::size_t& i,
                     LoadOptions& o) {
  const std::string& a = args[i];
  if (a == "--device") {
    if (i + 1 >= args.size()) throw_error(ErrorCategory::kBadInput, "--device needs a value (cpu or gpu)");
    const std::string& v = args[++i];
    o.device_given = true;
    if (v == "cpu") {
      o.backend = BackendKind::kCpu;
    } else if (v == "gpu") {
      // The one GPU backend this binary was built with (DESIGN.md: a build has at most one).
      o.backend = gpu::compiled_backend();
      if (o.backend == BackendKind::kCpu)
        throw_error(ErrorCategory::kUnsupported,
                    "--device gpu: this mlxcel was built without a GPU backend (MLXCEL_GPU=none); "
                    "use --device cpu or rebuild with the cuda or rocm preset");
    } else if (!parse_backend(v, &o.backend)) {
      throw_error(ErrorCategory::kBadInput, "--device must be cpu or gpu, got '" + v + "'");
    }
    return true;
  }
  if (a != "--numerics") return false;
  if (i + 1 >= args.size()) throw_error(ErrorCategory::kBadInput, a + " needs a value (fast or mlx)");
  const std::string& v = args[++i];
  if (!backend::parse_numerics(v, &o.numerics))
    throw_error(ErrorCategory::kBadInput, "--numerics must be fast or mlx, got '" + v + "'");
  return true;
}

const char* load_flags_help() {
  return "  --device cpu|gpu       where the model runs (default: the GPU when this build has a GPU\n"
         "                         backend and a device is present, else the CPU)\n"
         "  --numerics fast|mlx    fast: fp32 accumulation (default); mlx: reproduce MLX's CPU\n"
         "                         backend bit for bit (quantized matmuls accumulate in bf16/f16)\n";
}

const char* sampling_flags_help() {
  return "sampling:\n"
         "  --temp T               temperature (0 = greedy)\n"
         "  --top-p P              nucleus sampling mass (1 = off)\n"
         "  --top-k K              keep the K most likely tokens (0 = off)\n"
         "  --min-p M              drop tokens below M x the top probability (0 = off)\n"
         "  --seed S               seed for reproducible sampling\n"
         "  --repeat-penalty R     multiplicative repetition penalty (1 = off)\n"
         "  --repeat-last-n N      tokens the penalties look back over (default 20)\n"
         "  --presence-penalty X   subtract X once per recent token\n"
         "  --frequency-penalty X  subtract X per occurrence of a recent token\n";
}

}  // namespace mlxcel::runtime
