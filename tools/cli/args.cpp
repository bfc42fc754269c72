#include "tools/cli/args.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>

#include "core/error.h"
#include "platform/devices.h"
#include "platform/model_store.h"
#include "platform/preflight.h"
#include "runtime/options.h"

namespace mlxcel::cli {

std::unique_ptr<CLI::App> make_app(const std::string& name, const std::string& description) {
  auto app = std::make_unique<CLI::App>(description, "mlxcel " + name);
  app->set_help_flag("-h,--help", "print this help and exit");
  app->get_formatter()->column_width(32);
  return app;
}

bool parse_args(CLI::App& app, const std::vector<std::string>& args) {
  std::vector<std::string> rev(args.rbegin(), args.rend());
  try {
    app.parse(rev);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return false;
  } catch (const CLI::CallForAllHelp&) {
    std::fputs(app.help("", CLI::AppFormatMode::All).c_str(), stdout);
    return false;
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    std::replace(msg.begin(), msg.end(), '\n', ' ');
    throw_error(ErrorCategory::kBadInput, msg + " (see --help)");
  }
  return true;
}

void reject_gguf(const std::string& path) {
  bool gguf = path.size() >= 5 && (path.compare(path.size() - 5, 5, ".gguf") == 0 ||
                                   path.compare(path.size() - 5, 5, ".GGUF") == 0);
  struct stat st {};
  if (!gguf && stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
    char magic[4] = {};
    std::ifstream f(path, std::ios::binary);
    gguf = f.read(magic, 4) && std::string(magic, 4) == "GGUF";
  }
  if (gguf)
    throw_error(ErrorCategory::kBadInput, path +
                                              " is a GGUF file; mlxcel runs MLX model folders: "
                                              "convert it with `mlxcel convert --from-gguf " +
                                              path + " OUT_DIR` and pass OUT_DIR");
}

void add_model_option(CLI::App& app, ModelArg& m) {
  app.add_option("-m,--model", m.flag, "MLX model folder (config.json, *.safetensors, tokenizer)")
      ->type_name("DIR");
  app.add_option("model_dir", m.positional, "the model folder, as an alternative to -m")
      ->type_name("DIR");
}

std::string ModelArg::resolve() const {
  if (!flag.empty() && !positional.empty() && flag != positional)
    throw_error(ErrorCategory::kBadInput,
                "two model folders given (-m " + flag + " and " + positional + "); give one");
  const std::string dir = flag.empty() ? positional : flag;
  if (dir.empty())
    throw_error(ErrorCategory::kBadInput,
                "a model folder is required (-m DIR, or DIR as the first argument)");
  reject_gguf(dir);
  return platform::resolve_model(dir);
}

void add_load_options(CLI::App& app, LoadArgs& l) {
  app.add_option_function<std::string>(
         "--numerics",
         [&l](const std::string& v) {
           std::vector<std::string> a{"--numerics", v};
           std::size_t i = 0;
           runtime::parse_load_flag(a, i, l.load);
         },
         "fast: fp32 accumulation (default); mlx: MLX's CPU arithmetic bit for bit")
      ->type_name("fast|mlx");
  app.add_option_function<std::string>(
         "--device",
         [&l](const std::string& v) {
           std::vector<std::string> a{"--device", v};
           std::size_t i = 0;
           runtime::parse_load_flag(a, i, l.load);
         },
         "where the model runs: gpu (the CUDA or ROCm backend of this build; the default when a device is present) or cpu")
      ->type_name("cpu|gpu");
  app.add_option("-t,--threads", l.threads, "CPU threads (default: all cores, or MLXCEL_THREADS)")
      ->type_name("N")
      ->check(in_range(1, 1024));
}

void add_memory_options(CLI::App& app, MemoryArgs& m) {
  app.add_flag("--estimate-memory", m.estimate,
               "print the memory plan (weights, KV cache, activations, available) and exit");
  app.add_flag("--force", m.force, "load even when the memory plan says the model does not fit");
}

bool check_memory(const std::string& dir, std::int64_t ctx, int sequences,
                  const runtime::LoadOptions& load, const MemoryArgs& m) {
  const platform::Platform pf = platform::detect();
  platform::PlanRequest req;
  req.ctx = ctx;
  req.sequences = sequences;
  req.backend = load.backend;
  platform::Preflight p;
  try {
    p = platform::plan_model(dir, req, pf);
  } catch (const Error& e) {
    // A folder the planner cannot read is left to the loader, whose errors name the file.
    if (m.estimate || e.category() != ErrorCategory::kBadInput) throw;
    return true;
  }
  if (m.estimate) {
    std::fputs(p.report().c_str(), stdout);
    return false;
  }
  platform::enforce(p, pf, m.force);
  return true;
}

void LoadArgs::apply() const {
  if (threads > 0) setenv("MLXCEL_THREADS", std::to_string(threads).c_str(), 1);
}

void add_sampling_options(CLI::App& app, runtime::SamplingParams& p) {
  struct Flag {
    const char* names;
    const char* flag;
    const char* type;
    const char* help;
  };
  static const Flag kFlags[] = {
      {"--temp,--temperature", "--temp", "T", "temperature (default 0 = greedy)"},
      {"--top-p", "--top-p", "P", "nucleus sampling mass (1 = off)"},
      {"--top-k", "--top-k", "K", "keep the K most likely tokens (0 = off)"},
      {"--min-p", "--min-p", "M", "drop tokens below M x the top probability (0 = off)"},
      {"-s,--seed", "--seed", "S",
       "seed for reproducible sampling (default: a fresh one each run)"},
      {"--repeat-penalty", "--repeat-penalty", "R", "multiplicative repetition penalty (1 = off)"},
      {"--repeat-last-n", "--repeat-last-n", "N",
       "tokens the penalties look back over (default 20)"},
      {"--presence-penalty", "--presence-penalty", "X", "subtract X once per recent token"},
      {"--frequency-penalty", "--frequency-penalty", "X",
       "subtract X per occurrence of a recent token"},
  };
  for (const Flag& f : kFlags) {
    const char* flag = f.flag;
    app.add_option_function<std::string>(
           f.names,
           [&p, flag](const std::string& v) {
             std::vector<std::string> a{flag, v};
             std::size_t i = 0;
             runtime::parse_sampling_flag(a, i, p);
           },
           f.help)
        ->type_name(f.type)
        ->group("Sampling");
  }
}

std::uint64_t ensure_seed(runtime::SamplingParams& p) {
  if (!p.seed) {
    std::random_device rd;
    p.seed = ((static_cast<std::uint64_t>(rd()) << 32) | rd()) & 0x7FFFFFFFFFFFFFFFull;
  }
  return *p.seed;
}

}  // namespace mlxcel::cli
