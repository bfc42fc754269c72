// `mlxcel trace`: teacher-forces a token sequence through the model at one of the widths of
// DESIGN.md "Correctness" and writes the top-k logits after every position, for
// scripts/compare_traces.py against scripts/mlx_trace.py (mlx-lm).
//   w1   every token alone (pure decode)
//   w8   a 512-token prefill (or the whole input if shorter), then chunks of 8
//   w256 chunks of 256 (prefill-shaped)
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/npy.h"
#include "runtime/loader.h"
#include "runtime/generator.h"
#include "runtime/options.h"
#include "tools/cli/command.h"

namespace mlxcel::cli {
namespace {

int usage() {
  std::printf(
      "usage: mlxcel trace -m MODEL_DIR --tokens IDS.json [--width w1|w8|w256] [--top-k K]\n"
      "                    [--numerics fast|mlx] [--dump DIR] -o OUT.json\n"
      "  --dump DIR: also write every named intermediate of every forward step as\n"
      "  DIR/<step>.<layer>.<name>.npy (fp32), for scripts/layer_diff.py.\n"
      "  IDS.json: a JSON array of token ids (or {\"tokens\": [...]}).\n");
  return 2;
}

int cmd_trace(const std::vector<std::string>& args) {
  std::string model_dir, tokens_path, out_path, width = "w1", dump_dir;
  int top_k = 8;
  runtime::LoadOptions load;
  for (std::size_t i = 0; i < args.size(); ++i) {
    auto next = [&]() -> std::string {
      if (i + 1 >= args.size()) throw_error(ErrorCategory::kBadInput, args[i] + " needs a value");
      return args[++i];
    };
    if (runtime::parse_load_flag(args, i, load)) continue;
    if (args[i] == "-m" || args[i] == "--model") model_dir = next();
    else if (args[i] == "--tokens") tokens_path = next();
    else if (args[i] == "-o" || args[i] == "--output") out_path = next();
    else if (args[i] == "--width") width = next();
    else if (args[i] == "--dump") dump_dir = next();
    else if (args[i] == "--top-k") top_k = static_cast<int>(runtime::parse_int_flag("--top-k", next(), 1, 1 << 20));
    else if (args[i] == "-h" || args[i] == "--help") return usage(), 0;
    else throw_error(ErrorCategory::kBadInput, "trace: unknown option " + args[i]);
  }
  if (model_dir.empty() || tokens_path.empty() || out_path.empty()) return usage();
  if (width != "w1" && width != "w8" && width != "w256")
    throw_error(ErrorCategory::kBadInput, "--width must be w1, w8 or w256");
  std::ifstream f(tokens_path);
  if (!f) throw_error(ErrorCategory::kBadInput, tokens_path + ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  auto j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_object() && j.contains("tokens")) j = j["tokens"];
  if (!j.is_array() || j.empty()) throw_error(ErrorCategory::kBadInput, tokens_path + ": not a JSON array of token ids");
  std::vector<std::int32_t> tokens = j.get<std::vector<std::int32_t>>();

  auto lm = runtime::load_model(model_dir, load);
  auto& model = *lm.model;
  int forward_no = 0;
  if (!dump_dir.empty()) {
    std::filesystem::create_directories(dump_dir);
    model.set_tap([&](const char* name, int layer, const float* data, std::int64_t rows,
                      std::int64_t cols) {
      char file[256];
      std::snprintf(file, sizeof file, "/%03d.%d.%s.npy", forward_no, layer, name);
      io::npy_save_f32(dump_dir + file, std::vector<float>(data, data + rows * cols), {rows, cols});
    });
  }
  const std::int64_t n = static_cast<std::int64_t>(tokens.size());
  runtime::KvBlockPool pool(model.kv_layout(runtime::blocks_for(n + 1, 32), 32), &model.backend());
  runtime::SequenceKv kv(pool);
  const std::int64_t V = model.config().vocab_size;

  std::vector<std::pair<std::int64_t, std::int64_t>> chunks;  // [begin, end)
  std::int64_t pos = 0;
  if (width == "w8") {
    std::int64_t pre = std::min<std::int64_t>(512, n);
    chunks.push_back({0, pre});
    pos = pre;
  }
  const std::int64_t step = width == "w1" ? 1 : width == "w8" ? 8 : 256;
  for (; pos < n; pos += step) chunks.push_back({pos, std::min(n, pos + step)});

  nlohmann::json positions = nlohmann::json::array();
  std::vector<std::vector<float>> logits;
  std::vector<std::int32_t> idx(static_cast<std::size_t>(V));
  for (auto [b, e] : chunks) {
    std::vector<runtime::BatchItem> batch = {
        {&kv, std::span<const std::int32_t>(tokens).subspan(b, e - b), true}};
    runtime::forward_step(model, batch, logits);
    ++forward_no;
    for (std::int64_t r = 0; r < e - b; ++r) {
      const float* row = logits[0].data() + r * V;
      std::iota(idx.begin(), idx.end(), 0);
      int k = static_cast<int>(std::min<std::int64_t>(top_k, V));
      std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                        [&](std::int32_t a, std::int32_t c) { return row[a] > row[c] || (row[a] == row[c] && a < c); });
      nlohmann::json top = nlohmann::json::array();
      for (int t = 0; t < k; ++t) top.push_back({idx[t], row[idx[t]]});
      positions.push_back({{"pos", b + r}, {"top", top}});
    }
  }
  nlohmann::json out = {{"width", width}, {"tokens", tokens}, {"positions", positions},
                        {"engine", "mlxcel"}};
  std::ofstream o(out_path);
  if (!o) throw_error(ErrorCategory::kBadInput, out_path + ": cannot write");
  o << out.dump() << "\n";
  std::fprintf(stderr, "trace %s: %lld positions -> %s\n", width.c_str(), static_cast<long long>(n),
               out_path.c_str());
  return 0;
}

}  // namespace

MLXCEL_COMMAND("trace", "teacher-forced top-k logits trace (w1, w8, w256) for comparison with mlx-lm", cmd_trace);

}  // namespace mlxcel::cli
