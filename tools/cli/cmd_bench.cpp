// `mlxcel bench`: prefill (pp) and decode (tg) throughput, llama-bench style (docs/benchmarks.md):
// a deterministic prompt of exactly P random token ids per sequence, exactly G generated tokens
// with EOS ignored, greedy, one discarded warm-up, the median of R repeats. B sequences of the same
// length run together through the runtime scheduler (continuous batching), as the server runs
// them. Decode is reported beside its roofline measured in the same run: the bytes one decode step
// must stream (weights once per step + each sequence's KV cache) over the device copy bandwidth.
// Output: a table on stdout and, with --csv FILE, one CSV row per run with provenance.
#include <sys/resource.h>
#include <sys/utsname.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/gpu/runtime.h"
#include "core/build_info.h"
#include "core/error.h"
#include "runtime/generator.h"
#include "runtime/loader.h"
#include "runtime/options.h"
#include "runtime/scheduler.h"
#include "tools/cli/args.h"
#include "tools/cli/command.h"

namespace mlxcel::cli {
namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// Host memory read bandwidth (the CPU backend's ceiling): every thread sums its part of a buffer
// much larger than the caches; best of 3.
double host_read_bandwidth_gbs(std::size_t bytes, int threads) {
  const std::size_t n = bytes / sizeof(std::uint64_t);
  std::unique_ptr<std::uint64_t[]> buf(new std::uint64_t[n]);
  for (std::size_t i = 0; i < n; ++i) buf[i] = i;
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<std::uint64_t> sums(static_cast<std::size_t>(threads));
    auto t0 = clock_type::now();
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t) {
      ts.emplace_back([&, t] {
        std::size_t b = n * t / threads, e = n * (t + 1) / threads;
        std::uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        for (std::size_t i = b; i + 4 <= e; i += 4) {
          s0 += buf[i];
          s1 += buf[i + 1];
          s2 += buf[i + 2];
          s3 += buf[i + 3];
        }
        sums[t] = s0 + s1 + s2 + s3;
      });
    }
    for (auto& t : ts) t.join();
    double s = seconds_since(t0);
    volatile std::uint64_t sink = std::accumulate(sums.begin(), sums.end(), std::uint64_t{0});
    (void)sink;
    best = std::max(best, bytes / s / 1e9);
  }
  return best;
}

// Device copy bandwidth through the backend: a device-to-device copy of `bytes`, counted as read
// + write (2 x bytes), as the peers' figure (PEERS.md: 4,244 GB/s on the H200); best of 5 after
// one warm-up copy.
double device_copy_bandwidth_gbs(ops::Backend& be, std::size_t bytes) {
  auto src = be.allocate(backend::MemoryKind::kWorkspace, bytes);
  auto dst = be.allocate(backend::MemoryKind::kWorkspace, bytes);
  be.copy(dst.data(), src.data(), bytes, backend::CopyKind::kDeviceToDevice);
  be.synchronize();
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    auto t0 = clock_type::now();
    be.copy(dst.data(), src.data(), bytes, backend::CopyKind::kDeviceToDevice);
    be.synchronize();
    best = std::max(best, 2.0 * static_cast<double>(bytes) / seconds_since(t0) / 1e9);
  }
  return best;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  if (v.empty()) return 0;
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// One run: B sequences admitted together, stepped until all have G tokens.
struct RunTimes {
  double prefill_s = 0, decode_s = 0;
};

struct BenchObserver final : runtime::SequenceObserver {
  clock_type::time_point prefill_done{};
  bool prefilled = false;
  std::int64_t tokens = 0;
  std::string finish;
  std::optional<Error> error;
  // The prefill ends when its first token is on the host: a GPU's forward is asynchronous, and
  // only the sampled token's copy back waits for it (the first measurement on the H200 stopped
  // the clock at on_prefill and reported launch time as prefill time).
  runtime::Verdict on_token(const runtime::SampleResult&, bool,
                            const runtime::SequenceStats&) override {
    if (!prefilled) {
      prefill_done = clock_type::now();
      prefilled = true;
    }
    ++tokens;
    return runtime::Verdict::kContinue;
  }
  void on_finish(const std::string& reason, const runtime::SequenceStats&) override {
    finish = reason;
  }
  void on_error(const Error& e, const runtime::SequenceStats&) override { error = e; }
};

RunTimes run_once(models::Model& model, runtime::KvBlockPool& pool,
                  const std::vector<std::vector<std::int32_t>>& prompts, std::int64_t gen) {
  const std::int64_t P = static_cast<std::int64_t>(prompts[0].size());
  runtime::SchedulerOptions so;
  so.max_sequences = static_cast<int>(prompts.size());
  so.context_limit = P + gen + 1;
  so.prefill_chunk = P;
  runtime::Scheduler sched(model, pool, so);
  std::vector<BenchObserver> obs(prompts.size());
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    runtime::SequenceRequest r;
    r.prompt = prompts[i];
    r.max_tokens = gen;
    r.ignore_eos = true;  // greedy: SamplingParams' default temperature 0
    r.reuse_prefix = false;
    r.top_logprobs = -1;  // as a server request without logprobs: nothing reads them
    sched.add(std::move(r), &obs[i]);
  }
  const auto t0 = clock_type::now();
  while (!sched.idle()) sched.step();
  const auto t_end = clock_type::now();
  clock_type::time_point pf = t0;
  for (const auto& o : obs) {
    if (o.error) throw *o.error;
    if (!o.prefilled || o.tokens != gen)
      throw_error(ErrorCategory::kInternal, "bench: a sequence ended after " +
                                                std::to_string(o.tokens) + " of " +
                                                std::to_string(gen) + " tokens (" + o.finish + ")");
    pf = std::max(pf, o.prefill_done);
  }
  RunTimes t;
  t.prefill_s = std::chrono::duration<double>(pf - t0).count();
  t.decode_s = std::chrono::duration<double>(t_end - pf).count();
  return t;
}

// "affine4-g64", "mxfp4-g32", "bf16": the checkpoint's top-level quantization.
std::string quant_label(const nlohmann::json& cfg) {
  const nlohmann::json* q = nullptr;
  if (cfg.contains("quantization") && cfg["quantization"].is_object())
    q = &cfg["quantization"];
  else if (cfg.contains("quantization_config") && cfg["quantization_config"].is_object())
    q = &cfg["quantization_config"];
  if (!q) return cfg.value("torch_dtype", std::string("bf16")) == "float32" ? "f32" : "bf16";
  const std::string mode = q->value("mode", std::string("affine"));
  const int bits = q->value("bits", 0), gs = q->value("group_size", 0);
  if (mode == "affine") return "affine" + std::to_string(bits) + "-g" + std::to_string(gs);
  return mode + "-g" + std::to_string(gs);
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string o = "\"";
  for (char c : s) o += c == '"' ? std::string("\"\"") : std::string(1, c);
  return o + "\"";
}

const char* kCsvHeader =
    "date,commit,model,shape,quant,backend,device,arch,runtime,threads,prompt_tokens,gen_tokens,"
    "batch,"
    "repeats,prefill_tok_s,decode_tok_s,peak_device_bytes,host_peak_rss_bytes,weight_bytes,"
    "decode_weight_bytes,kv_bytes_per_position,bytes_per_token,bandwidth_gbs,bandwidth_probe,"
    "roofline_tok_s,decode_roofline_fraction";

int cmd_bench(const std::vector<std::string>& args) {
  std::string csv;
  std::int64_t pp = 512, tg = 128;
  int repeats = 3, batch = 1;
  LoadArgs load;
  auto app_owner = make_app(
      "bench",
      "Prefill (pp) and decode (tg) throughput, llama-bench style: a random prompt of exactly P\n"
      "tokens, exactly G greedy tokens (EOS ignored), one discarded warm-up, median of repeats;\n"
      "decode is compared with its roofline (bytes per token / bandwidth measured in this run).");
  CLI::App& app = *app_owner;
  ModelArg model_arg;
  add_model_option(app, model_arg);
  app.add_option("-p,--n-prompt", pp, "prompt tokens per sequence (default 512)")
      ->type_name("P")
      ->check(in_range(1, 1 << 20));
  app.add_option("-n,-g,--n-gen", tg, "generated tokens per sequence (default 128)")
      ->type_name("G")
      ->check(in_range(2, 1 << 20));
  app.add_option("-r,--repeat,--repeats", repeats, "timed repeats after the warm-up (default 3)")
      ->type_name("R")
      ->check(in_range(1, 100));
  app.add_option("-b,--batch", batch, "sequences decoded together (default 1)")
      ->type_name("B")
      ->check(in_range(1, 4096));
  app.add_option("--csv", csv, "append one CSV row with provenance (header written when new)")
      ->type_name("FILE");
  add_load_options(app, load);
  if (!parse_args(app, args)) return 0;
  const std::string model_dir = model_arg.resolve();
  if (!csv.empty()) {
    std::ifstream f(csv);
    std::string first;
    if (f && std::getline(f, first) && !first.empty() && first != kCsvHeader)
      throw_error(ErrorCategory::kBadInput, csv +
                                                ": has a different header (another tool or an "
                                                "older mlxcel bench); append to a new file");
  }
  load.apply();
  auto lm = runtime::load_model(model_dir, load.load);
  auto& model = *lm.model;
  auto& be = model.backend();
  const auto& cfg = model.config();
  const bool on_gpu = be.kind() != BackendKind::kCpu;
  const int threads = load.threads > 0
                          ? load.threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const std::int64_t ctx =
      cfg.context_length() > 0 ? cfg.context_length() : (std::int64_t{1} << 30);
  if (pp + tg + 1 > ctx)
    throw_error(ErrorCategory::kBadInput,
                "bench: -p " + std::to_string(pp) + " + -n " + std::to_string(tg) +
                    " exceeds the model's context of " + std::to_string(ctx) + " tokens");

  nlohmann::json raw;
  {
    std::ifstream f(model_dir + "/config.json");
    raw = nlohmann::json::parse(f, nullptr, false);
  }
  const std::string quant = raw.is_object() ? quant_label(raw) : "?";
  std::string shape = std::filesystem::path(model_dir).lexically_normal().filename().string();
  if (shape.empty()) shape = std::filesystem::path(model_dir).parent_path().filename().string();
  if (raw.is_object() && raw.contains("mlxcel_synth") && raw["mlxcel_synth"].is_object())
    shape = raw["mlxcel_synth"].value("like", shape);

  // Every sequence gets its own prompt (no prefix sharing), the same in every run.
  std::vector<std::vector<std::int32_t>> prompts(static_cast<std::size_t>(batch));
  for (int b = 0; b < batch; ++b) {
    std::mt19937 rng(static_cast<std::uint32_t>(b));
    prompts[b].resize(static_cast<std::size_t>(pp));
    for (auto& t : prompts[b])
      t = static_cast<std::int32_t>(rng() % static_cast<std::uint32_t>(cfg.vocab_size));
  }
  constexpr int kBlock = 32;
  runtime::KvBlockPool pool(
      model.kv_layout(runtime::blocks_for(pp + tg + 1, kBlock, batch), kBlock), &be);

  std::vector<double> pp_rates, tg_rates;
  for (int r = 0; r <= repeats; ++r) {  // r == 0 is the warm-up
    const RunTimes t = run_once(model, pool, prompts, tg);
    if (r == 0) continue;
    pp_rates.push_back(static_cast<double>(batch) * pp / t.prefill_s);
    // The first token of each sequence comes out of the prefill step.
    tg_rates.push_back(static_cast<double>(batch) * (tg - 1) / t.decode_s);
  }
  const double pp_med = median(pp_rates), tg_med = median(tg_rates);
  const std::size_t peak_device = be.memory_stats().peak;  // before the probe allocates
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  const std::size_t host_rss = static_cast<std::size_t>(u.ru_maxrss) * 1024;

  const std::size_t probe_bytes = std::size_t{1} << 30;
  const double bw = on_gpu ? device_copy_bandwidth_gbs(be, probe_bytes)
                           : host_read_bandwidth_gbs(probe_bytes, threads);
  const char* probe = on_gpu ? "device d2d copy 1 GiB, read+write" : "host read 1 GiB";

  // A decode step reads the weights once for the whole batch and each sequence's KV cache, at the
  // mean context of the decode phase.
  const auto layout = model.kv_layout(1, kBlock);
  const double kv_pos = static_cast<double>(layout.block_bytes()) / kBlock;
  const double w_tok = static_cast<double>(model.decode_bytes_per_token());
  const double ctx_mean = static_cast<double>(pp) + static_cast<double>(tg) / 2;
  const double bytes_tok = (w_tok + batch * kv_pos * ctx_mean) / batch;
  const double roofline = bw * 1e9 / bytes_tok;

  std::string device, arch, runtime_ver = "-";
  utsname un{};
  uname(&un);
  if (on_gpu) {
    auto devs = gpu::list_devices();
    if (!devs.empty()) {
      device = devs[0].name;
      arch = devs[0].arch;
    }
    runtime_ver = gpu::runtime_version();
  } else {
    device = std::string(un.machine) + " " + std::to_string(threads) + " threads";
    arch = un.machine;
  }

  std::printf("model: %s (%s, %s %s), weights %.1f MiB, decode streams %.1f MiB/token\n",
              model_dir.c_str(), shape.c_str(), cfg.model_type.c_str(), quant.c_str(),
              model.weight_bytes() / 1048576.0, bytes_tok / 1048576.0);
  std::printf("backend: %s%s%s\n", be.name().c_str(), on_gpu ? "; " : "",
              on_gpu ? runtime_ver.c_str() : "");
  if (!on_gpu) std::printf("machine: %d threads, ", threads);
  std::printf("measured bandwidth %.1f GB/s (%s) -> decode roofline %.1f tok/s\n", bw, probe,
              roofline);
  std::printf("| test | tok/s (median of %d) | roofline | ratio |\n|---|---|---|---|\n", repeats);
  std::printf("| pp%lld b%d | %.1f | - | - |\n", static_cast<long long>(pp), batch, pp_med);
  std::printf("| tg%lld b%d | %.2f | %.1f | %.3f |\n", static_cast<long long>(tg), batch, tg_med,
              roofline, tg_med / roofline);
  std::printf("peak device memory: %.1f MiB; host peak RSS %.0f MiB\n", peak_device / 1048576.0,
              host_rss / 1048576.0);
  const ops::StepGraphs::Stats gs = model.graph_stats();
  std::printf("decode graphs: %s; steps eager %lld, recorded %lld, replayed %lld, failed %lld\n",
              be.can_capture() ? "on" : "off", static_cast<long long>(gs.eager),
              static_cast<long long>(gs.recorded), static_cast<long long>(gs.replayed),
              static_cast<long long>(gs.failed));

  if (!csv.empty()) {
    const auto& b = build_info();
    const bool exists = std::filesystem::exists(csv) && std::filesystem::file_size(csv) > 0;
    std::ofstream f(csv, std::ios::app);
    if (!f) throw_error(ErrorCategory::kBadInput, csv + ": cannot open for appending");
    if (!exists) f << kCsvHeader << "\n";
    char date[32];
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    std::ostringstream row;
    row.precision(10);
    row << date << "," << csv_field(b.commit) << "," << csv_field(model_dir) << ","
        << csv_field(shape) << "," << csv_field(quant) << "," << csv_field(be.name()) << ","
        << csv_field(device) << "," << csv_field(arch) << "," << csv_field(runtime_ver) << ","
        << threads << "," << pp << "," << tg << "," << batch << "," << repeats << "," << pp_med
        << "," << tg_med << "," << peak_device << "," << host_rss << "," << model.weight_bytes()
        << "," << w_tok << "," << kv_pos << "," << bytes_tok << "," << bw << "," << csv_field(probe)
        << "," << roofline << "," << tg_med / roofline << "\n";
    f << row.str();
    if (!f) throw_error(ErrorCategory::kBadInput, csv + ": write failed");
  }
  return 0;
}

}  // namespace

MLXCEL_COMMAND("bench",
               "prefill/decode throughput against the decode roofline measured in the same run",
               cmd_bench);

}  // namespace mlxcel::cli
