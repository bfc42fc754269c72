// `mlxcel bench`: pp (prefill) and tg (decode) throughput, llama-bench style: greedy, EOS
// ignored, a warm-up pass, median of repeats. Each result is reported beside its ceiling measured
// in the same run: decode against (bytes a token must stream) / (measured memory bandwidth).
// Output: a table on stdout and, with --csv FILE, a CSV row per test with provenance.
#include <sys/resource.h>
#include <sys/utsname.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/build_info.h"
#include "core/error.h"
#include "runtime/loader.h"
#include "runtime/generator.h"
#include "runtime/options.h"
#include "tools/cli/command.h"

namespace mlxcel::cli {
namespace {

using clock_type = std::chrono::steady_clock;

// Host memory read bandwidth: every thread sums its part of a buffer much larger than the caches.
double measure_bandwidth_gbs(std::size_t bytes, int threads) {
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
    double s = std::chrono::duration<double>(clock_type::now() - t0).count();
    volatile std::uint64_t sink = std::accumulate(sums.begin(), sums.end(), std::uint64_t{0});
    (void)sink;
    best = std::max(best, bytes / s / 1e9);
  }
  return best;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int cmd_bench(const std::vector<std::string>& args) {
  std::string model_dir, csv;
  std::int64_t pp = 512, tg = 128;
  int repeats = 3;
  runtime::LoadOptions load;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) throw_error(ErrorCategory::kBadInput, a + " needs a value");
      return args[++i];
    };
    if (runtime::parse_load_flag(args, i, load)) continue;
    if (a == "-m" || a == "--model") model_dir = value();
    else if (a == "-p" || a == "--n-prompt") pp = runtime::parse_int_flag(a, value(), 1, 1 << 20);
    else if (a == "-n" || a == "--n-gen") tg = runtime::parse_int_flag(a, value(), 1, 1 << 20);
    else if (a == "-r" || a == "--repeats") repeats = static_cast<int>(runtime::parse_int_flag(a, value(), 1, 100));
    else if (a == "--csv") csv = value();
    else if (a == "-h" || a == "--help") {
      std::printf("usage: mlxcel bench -m MODEL_DIR [-p 512] [-n 128] [-r 3] [--csv FILE] [--numerics fast|mlx]\n");
      return 0;
    } else throw_error(ErrorCategory::kBadInput, "unknown option " + a);
  }
  if (model_dir.empty()) throw_error(ErrorCategory::kBadInput, "a model folder is required (-m DIR)");
  auto lm = runtime::load_model(model_dir, load);
  auto& model = *lm.model;
  const auto& cfg = model.config();
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const double bw = measure_bandwidth_gbs(std::size_t{1} << 30, threads);
  const double bytes_tok = static_cast<double>(model.decode_bytes_per_token());

  std::mt19937 rng(0);
  std::vector<std::int32_t> prompt(static_cast<std::size_t>(pp));
  for (auto& t : prompt) t = static_cast<std::int32_t>(rng() % static_cast<std::uint32_t>(cfg.vocab_size));
  runtime::KvBlockPool pool(model.kv_layout(runtime::blocks_for(pp + tg + 1, 32), 32), &model.backend());
  runtime::GenerationConfig gc;
  gc.max_tokens = tg;
  gc.ignore_eos = true;
  gc.prefill_chunk = pp;
  std::vector<double> pp_rates, tg_rates;
  for (int r = 0; r <= repeats; ++r) {  // r == 0 is the warm-up
    auto res = runtime::generate(model, pool, prompt, gc, [](const runtime::SampleResult&, bool) { return true; },
                                 /*reuse_prefix=*/false);
    if (r == 0) continue;
    pp_rates.push_back(pp / res.prefill_seconds);
    tg_rates.push_back((res.tokens.size() - 1) / res.decode_seconds);
  }
  const double pp_med = median(pp_rates), tg_med = median(tg_rates);
  const double tg_ceiling = bw * 1e9 / bytes_tok;
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  std::printf("model: %s (%s), weights %.1f MiB, decode streams %.1f MiB/token\n", model_dir.c_str(),
              cfg.model_type.c_str(), model.weight_bytes() / 1048576.0, bytes_tok / 1048576.0);
  std::printf("machine: %d threads, measured read bandwidth %.1f GB/s -> decode ceiling %.1f tok/s\n",
              threads, bw, tg_ceiling);
  std::printf("| test | tok/s (median of %d) | ceiling | ratio |\n|---|---|---|---|\n", repeats);
  std::printf("| pp%lld | %.1f | - | - |\n", static_cast<long long>(pp), pp_med);
  std::printf("| tg%lld | %.2f | %.1f | %.3f |\n", static_cast<long long>(tg), tg_med, tg_ceiling,
              tg_med / tg_ceiling);
  std::printf("peak memory: %.0f MiB\n", u.ru_maxrss / 1024.0);
  if (!csv.empty()) {
    const auto& b = build_info();
    utsname un{};
    uname(&un);
    bool exists = std::ifstream(csv).good();
    std::ofstream f(csv, std::ios::app);
    if (!exists) f << "commit,backend,device,model,test,tok_s,ceiling_tok_s,ratio,bandwidth_gbs,bytes_per_token,peak_mib\n";
    f << b.commit << ",cpu," << un.machine << "-" << threads << "t," << model_dir << ",pp" << pp << "," << pp_med
      << ",,," << bw << "," << bytes_tok << "," << u.ru_maxrss / 1024 << "\n";
    f << b.commit << ",cpu," << un.machine << "-" << threads << "t," << model_dir << ",tg" << tg << "," << tg_med
      << "," << tg_ceiling << "," << tg_med / tg_ceiling << "," << bw << "," << bytes_tok << ","
      << u.ru_maxrss / 1024 << "\n";
  }
  return 0;
}

}  // namespace

MLXCEL_COMMAND("bench", "prefill/decode throughput against the measured memory-bandwidth ceiling", cmd_bench);

}  // namespace mlxcel::cli
