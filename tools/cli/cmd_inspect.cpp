// `mlxcel inspect -m MODEL [--ctx N] [--json] [--backend cpu|cuda|rocm]`: what a model folder
// holds, how this build would load it, and whether it fits in the device's memory at N tokens. Quantized modules are grouped by path pattern (layer indices become
// `*`) and parameters; each group shows mode / bits / group size and the route on the backend.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/model_config.h"
#include "io/quant_plan.h"
#include "io/safetensors.h"
#include "platform/devices.h"
#include "platform/preflight.h"
#include "tools/cli/args.h"
#include "tools/cli/command.h"

namespace mlxcel::cli {
namespace {

std::string pattern_of(const std::string& path) {
  std::string out, seg;
  auto flush = [&]() {
    bool digits = !seg.empty();
    for (char c : seg) digits = digits && c >= '0' && c <= '9';
    out += digits ? "*" : seg;
    seg.clear();
  };
  for (char c : path) {
    if (c == '.') {
      flush();
      out += '.';
    } else {
      seg += c;
    }
  }
  flush();
  return out;
}

std::string human(std::uint64_t b) {
  char buf[64];
  if (b >= (1ull << 30))
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / 1073741824.0);
  else if (b >= (1ull << 20))
    std::snprintf(buf, sizeof buf, "%.2f MiB", b / 1048576.0);
  else if (b >= (1ull << 10))
    std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  else
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(b));
  return buf;
}

int cmd_inspect(const std::vector<std::string>& args) {
  bool as_json = false;
  BackendKind backend = platform::build_backend();
  std::int64_t ctx = 0;
  int parallel = 1;
  bool memory_only = false;
  std::string backend_arg;
  auto app_owner = make_app(
      "inspect",
      "Lists the quantized module groups of an MLX / Hugging Face model folder (mode, bits,\n"
      "group size, how this build runs them on the backend), the total weight bytes, and the\n"
      "memory plan at --ctx tokens: weights, KV cache, activations, what the device has, and\n"
      "whether it fits (MLXCEL_MEMORY_LIMIT=96G overrides the available memory).");
  CLI::App& app = *app_owner;
  ModelArg model_arg;
  add_model_option(app, model_arg);
  app.add_flag("--json", as_json, "print JSON");
  app.add_option("--backend", backend_arg,
                 "backend to plan for (default: the one this build was compiled for)")
      ->type_name("cpu|cuda|rocm");
  app.add_option("--ctx,-c,--ctx-size", ctx,
                 "context tokens to plan for (default: the model's, at most 32768)")
      ->type_name("N")
      ->check(in_range(16, 1 << 24));
  app.add_option("--parallel", parallel, "sequences sharing the KV pool (the server's --parallel)")
      ->type_name("N")
      ->check(in_range(1, 1024));
  app.add_flag("--memory-only", memory_only,
               "only the memory plan (reads config.json and the safetensors headers, nothing else)");
  if (!parse_args(app, args)) return 0;
  const std::string dir = model_arg.resolve();
  if (!backend_arg.empty() && !parse_backend(backend_arg, &backend))
    throw_error(ErrorCategory::kBadInput,
                "inspect: unknown backend '" + backend_arg + "' (cpu, cuda, rocm)");

  // The memory plan reads config.json and the safetensors headers only.
  const platform::Platform pf = platform::detect();
  platform::PlanRequest req;
  req.backend = backend;
  req.sequences = parallel;
  std::optional<platform::Preflight> mem;
  std::string mem_error;
  try {
    req.ctx = ctx > 0 ? ctx : platform::default_ctx(platform::read_model_shape(dir), 32768);
    mem = platform::plan_model(dir, req, pf);
  } catch (const Error& e) {
    mem_error = e.what();
  }
  if (memory_only) {
    if (!mem) throw_error(ErrorCategory::kBadInput, mem_error);
    if (as_json)
      std::printf("%s\n", nlohmann::json{{"model", dir}, {"memory", mem->json()}}.dump(2).c_str());
    else
      std::fputs(mem->report().c_str(), stdout);
    return 0;
  }

  const ModelConfig cfg = ModelConfig::load(dir);
  const Checkpoint ckpt = Checkpoint::open(dir);
  const QuantPlan plan = plan_quantization(ckpt, cfg);
  const QuantConfig& qc = cfg.quant();

  struct Group {
    std::string pattern;
    QuantParams params;
    std::string route;
    std::string origin;
    std::vector<std::string> paths;
    std::uint64_t bytes = 0;
  };
  std::vector<Group> groups;
  std::map<std::tuple<std::string, int, int, int, std::string>, std::size_t> index;
  nlohmann::json modules = nlohmann::json::array();
  for (const auto& m : plan.modules) {
    const Route r = route(backend, m.params);
    const std::string origin(quant_origin_name(m.origin));
    std::string rs = r.str();
    if (m.origin == QuantOrigin::kFp8Block) rs = "fp8 block -> mxfp8 at load, then " + rs;
    if (m.origin == QuantOrigin::kAwq) rs = "awq repack -> affine at load, then " + rs;
    const auto key = std::make_tuple(pattern_of(m.path), static_cast<int>(m.params.mode),
                                     m.params.bits, m.params.group_size, rs);
    auto it = index.find(key);
    if (it == index.end()) {
      it = index.emplace(key, groups.size()).first;
      groups.push_back({std::get<0>(key), m.params, rs, origin, {}, 0});
    }
    Group& g = groups[it->second];
    g.paths.push_back(m.path);
    g.bytes += m.bytes;
    if (g.origin != origin) g.origin = "mixed";
    modules.push_back({{"path", m.path},
                       {"mode", quant_mode_name(m.params.mode)},
                       {"bits", m.params.bits},
                       {"group_size", m.params.group_size},
                       {"origin", origin},
                       {"shape", m.shape},
                       {"bytes", m.bytes},
                       {"global_scale", m.global_scale},
                       {"route", rs}});
  }

  // A folder written by `mlxcel convert --from-gguf` says what each GGUF tensor became.
  nlohmann::json converted;
  if (std::ifstream cf(std::filesystem::path(dir) / "mlxcel_convert.json"); cf) {
    converted = nlohmann::json::parse(cf, nullptr, false);
    if (!converted.is_object()) converted = nullptr;
  }

  if (as_json) {
    nlohmann::json j;
    if (!converted.is_null()) j["converted"] = converted;
    j["model"] = dir;
    j["backend"] = backend_name(backend);
    j["quantization"] = {{"present", qc.present},
                         {"source", qc.source},
                         {"mode", quant_mode_name(qc.defaults.mode)},
                         {"bits", qc.defaults.bits},
                         {"group_size", qc.defaults.group_size},
                         {"quantize_activations", qc.quantize_activations}};
    nlohmann::json gj = nlohmann::json::array();
    for (const auto& g : groups) {
      gj.push_back({{"pattern", g.pattern},
                    {"count", g.paths.size()},
                    {"mode", quant_mode_name(g.params.mode)},
                    {"bits", g.params.bits},
                    {"group_size", g.params.group_size},
                    {"origin", g.origin},
                    {"route", g.route},
                    {"bytes", g.bytes}});
    }
    j["groups"] = gj;
    j["modules"] = modules;
    j["total_bytes"] = plan.total_bytes;
    j["quantized_bytes"] = plan.quantized_bytes;
    j["dense_tensors"] = plan.dense_tensors;
    j["tensors"] = ckpt.names().size();
    j["shards"] = ckpt.files().size();
    if (mem) j["memory"] = mem->json();
    else j["memory"] = {{"error", mem_error}};
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("model:        %s (%zu shard%s, %zu tensors)\n", dir.c_str(), ckpt.files().size(),
              ckpt.files().size() == 1 ? "" : "s", ckpt.names().size());
  if (qc.present) {
    std::printf("quantization: %s, default %s%s\n", qc.source.c_str(), qc.defaults.str().c_str(),
                qc.quantize_activations ? ", quantize_activations" : "");
  } else {
    std::printf("quantization: none\n");
  }
  if (!converted.is_null()) {
    std::printf(
        "converted:    from %s (GGUF %s, %s): %lld quantized tensors exact, %lld with rounded "
        "scales, %lld float\n",
        converted.value("source", "?").c_str(), converted.value("architecture", "?").c_str(),
        converted.value("dtype", "?").c_str(), converted.value("exact_quantized", 0LL),
        converted.value("rounded_quantized", 0LL), converted.value("dense", 0LL));
  }
  std::printf("backend:      %s\n\n", std::string(backend_name(backend)).c_str());
  if (!groups.empty()) {
    std::printf("%-48s %5s  %-6s %4s %4s  %-9s %10s  %s\n", "module group", "count", "mode", "bits",
                "gs", "origin", "bytes", "route");
    for (const auto& g : groups) {
      std::printf("%-48s %5zu  %-6s %4d %4d  %-9s %10s  %s\n", g.pattern.c_str(), g.paths.size(),
                  std::string(quant_mode_name(g.params.mode)).c_str(), g.params.bits,
                  g.params.group_size, g.origin.c_str(), human(g.bytes).c_str(), g.route.c_str());
    }
    std::printf("\n");
  }
  std::printf("quantized modules: %zu (%s)\n", plan.modules.size(),
              human(plan.quantized_bytes).c_str());
  std::printf("dense tensors:     %zu (%s)\n", plan.dense_tensors,
              human(plan.total_bytes - plan.quantized_bytes).c_str());
  std::printf("total weight bytes: %llu (%s)\n", static_cast<unsigned long long>(plan.total_bytes),
              human(plan.total_bytes).c_str());
  std::printf("\n%s", mem ? mem->report().c_str() : ("memory plan: unavailable: " + mem_error + "\n").c_str());
  return 0;
}

}  // namespace

MLXCEL_COMMAND("inspect",
               "show a model folder's tensors, quantization and how this build loads them",
               cmd_inspect);

}  // namespace mlxcel::cli
