#include "selftest/selftest.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/build_info.h"
#include "core/error.h"
#include "ops/ops.h"
#include "ops/sample.h"
#include "quant/quantize.h"
#include "runtime/kv_cache.h"
#include "runtime/step.h"
#include "selftest/device_check.h"
#include "selftest/step_scenario.h"
#include "selftest/tiny_model.h"

namespace mlxcel::selftest {
namespace {

using backend::Act;
using backend::Backend;
using Result = Check::Result;

std::string dt(DType t) { return std::string(dtype_name(t)); }

class Runner {
 public:
  Runner(Backend& dut, Backend& ref, bool quick) : dut_(dut), ref_(ref), quick_(quick) {}
  Report report;

  // Runs `fn` (which returns {error, bound}); an Error or a non-finite error fails the check.
  void check(const std::string& op, const std::string& sig,
             const std::function<std::pair<double, double>()>& fn) {
    Check c;
    c.op = op;
    c.signature = sig;
    try {
      auto [e, b] = fn();
      c.error = e;
      c.bound = b;
      c.result = e <= b ? Result::kPass : Result::kFail;
      if (c.result == Result::kFail) c.detail = "error above the bound";
    } catch (const Error& e) {
      // An op or format the device lacks is refused by the op layer: listed, never passed.
      c.result = e.category() == ErrorCategory::kUnsupported ? Result::kSkip : Result::kFail;
      c.detail = e.what();
    }
    report.checks.push_back(std::move(c));
  }
  void skip(const std::string& op, const std::string& sig, const std::string& why) {
    Check c;
    c.op = op;
    c.signature = sig;
    c.result = Result::kSkip;
    c.detail = why;
    report.checks.push_back(std::move(c));
  }
  bool supported(const backend::OpSignature& s) const { return dut_.supports(s); }

  void norms();
  void linear();
  void linear_fusions();
  void gated();
  void sample();
  void models();
  void step_graphs();

 private:
  Backend& dut_;
  Backend& ref_;
  bool quick_;
  std::mt19937 rng_{20261203};
};

void Runner::norms() {
  for (DType act : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (std::int64_t rows : {1, 33}) {
      for (std::int64_t cols : {576, 2560}) {
        const std::string sig = dt(act) + " " + std::to_string(rows) + "x" + std::to_string(cols);
        if (!supported({backend::Op::kAddRmsNorm, act})) {
          skip("add_rms_norm", sig, "not supported by the device");
          continue;
        }
        auto x = randn(rng_, rows * cols, 1.0f, act), d = randn(rng_, rows * cols, 0.5f, act);
        std::vector<float> w(static_cast<std::size_t>(cols));
        for (auto& v : w)
          v = quant::round_to(act, 1.0f + 0.1f * std::normal_distribution<float>()(rng_));
        auto run = [&](Backend& be, std::vector<float>& h_out) {
          DeviceMem m;
          ops::Exec e(be, act);
          const auto nw = ops::NormWeight::upload(be, w, 1e-5f);
          Act h = m.act(be, act, x, rows, cols), dl = m.act(be, act, d, rows, cols),
              y = m.act(be, act, x, rows, cols);
          ops::rms_norm(e, h, nw, y);
          auto y1 = read_act(be, y);
          ops::add_rms_norm(e, h, dl, nw, y);
          h_out = read_act(be, h);
          auto y2 = read_act(be, y);
          y1.insert(y1.end(), y2.begin(), y2.end());
          return y1;
        };
        check("rms_norm+add_rms_norm", sig, [&] {
          std::vector<float> hg, hr;
          auto g = run(dut_, hg), r = run(ref_, hr);
          return std::pair{std::max(normalized_error(g, r), normalized_error(hg, hr)),
                           rounding_steps(act, 2)};
        });
      }
    }
  }
}

void Runner::linear() {
  struct Fmt {
    const char* name;
    std::optional<QuantParams> q;
  };
  const Fmt fmts[] = {{"dense", std::nullopt},
                      {"affine4 g64", QuantParams{QuantMode::kAffine, 4, 64}},
                      {"affine8 g32", QuantParams{QuantMode::kAffine, 8, 32}},
                      {"affine3 g64", QuantParams{QuantMode::kAffine, 3, 64}},
                      {"affine6 g128", QuantParams{QuantMode::kAffine, 6, 128}},
                      {"mxfp4", QuantParams{QuantMode::kMxfp4, 4, 32}},
                      {"mxfp8", QuantParams{QuantMode::kMxfp8, 8, 32}},
                      {"nvfp4", QuantParams{QuantMode::kNvfp4, 4, 16}}};
  struct Shape2 {
    std::int64_t in, out;
  };
  std::vector<Shape2> shapes = {{576, 1536}, {1536, 576}};
  if (!quick_) shapes.push_back({2048, 2816});
  for (DType act : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (const Fmt& f : fmts) {
      for (const Shape2& s : shapes) {
        if (f.q && s.in % f.q->group_size != 0) continue;  // no such checkpoint
        // 1-64 rows take the GEMVs; 80 rows the GEMM (the matrix units: by default on CUDA,
        // under MLXCEL_GPU_GEMM_MMA=1 on HIP).
        for (std::int64_t rows : {1, 31, 33, 80}) {
          const std::string sig = dt(act) + " " + f.name + " " + std::to_string(rows) + "x" +
                                  std::to_string(s.in) + "->" + std::to_string(s.out);
          // The checkpoint's weights are in the activation dtype (mlx-lm's convention).
          const DType wdt = act;
          Tensor w = Tensor::from_f32(randn(rng_, s.in * s.out, 1.0f / std::sqrt(float(s.in)), wdt),
                                      {s.out, s.in}, wdt);
          Tensor qw = w, scales, biases;
          if (f.q) {
            auto q = quantize(w, *f.q);
            qw = q.weight, scales = q.scales, biases = q.biases;
          }
          auto x = randn(rng_, rows * s.in, 1.0f, act);
          auto run = [&](Backend& be) {
            DeviceMem m;
            ops::Exec e(be, act);
            auto lw = ops::LinearWeight::upload(be, "w", qw, scales, biases, f.q, s.in, s.out);
            Act xa = m.act(be, act, x, rows, s.in);
            Act y = m.act(be, act, std::vector<float>(rows * s.out, 0.0f), rows, s.out);
            ops::linear(e, lw, xa, y);
            return read_act(be, y);
          };
          // The oracle: the reference backend's dense fp32 product with the dequantized weights
          // (the unfused twin), rounded once to the activation dtype.
          auto oracle = [&] {
            DeviceMem m;
            ops::Exec e(ref_, DType::kF32);
            const Tensor wd = f.q ? dequantize(qw, scales, biases.defined() ? &biases : nullptr,
                                               *f.q, DType::kF32)
                                  : Tensor::from_f32(w.to_f32(), {s.out, s.in}, DType::kF32);
            auto lw = ops::LinearWeight::upload(ref_, "w", wd, Tensor(), Tensor(), std::nullopt,
                                                s.in, s.out);
            Act xa = m.act(ref_, DType::kF32, x, rows, s.in);
            Act y = m.act(ref_, DType::kF32, std::vector<float>(rows * s.out, 0.0f), rows, s.out);
            ops::linear(e, lw, xa, y);
            auto out = read_act(ref_, y);
            for (auto& v : out) v = quant::round_to(act, v);
            return out;
          };
          check("linear", sig, [&] {
            return std::pair{normalized_error(run(dut_), oracle()), rounding_steps(act, 3)};
          });
        }
      }
    }
  }
}

// ops::norm_linear, linear_add and gated_linear_add against the unfused ops on the same device,
// bit for bit
// (a decode step takes the fused forms at 1-2 rows and their twins above: batch invariance),
// for the formats decode runs most and the GEMV / GEMM row counts.
void Runner::linear_fusions() {
  const std::int64_t in = 1536, out = 576;
  for (DType act : {DType::kBF16, DType::kF16}) {
    for (bool quantized : {false, true}) {
      const std::optional<QuantParams> q =
          quantized ? std::optional<QuantParams>(QuantParams{QuantMode::kAffine, 4, 64})
                    : std::nullopt;
      Tensor w = Tensor::from_f32(randn(rng_, in * out, 1.0f / std::sqrt(float(in)), act),
                                  {out, in}, act);
      Tensor qw = w, scales, biases;
      if (q) {
        auto r = quantize(w, *q);
        qw = r.weight, scales = r.scales, biases = r.biases;
      }
      std::vector<float> nw(static_cast<std::size_t>(in));
      for (auto& v : nw) v = quant::round_to(act, 1.0f + 0.1f * std::normal_distribution<float>()(rng_));
      for (std::int64_t rows : {1, 2, 33, 80}) {
        const std::string sig = dt(act) + (q ? " affine4 g64 " : " dense ") + std::to_string(rows) +
                                "x" + std::to_string(in) + "->" + std::to_string(out);
        const auto src = randn(rng_, rows * in, 2.0f, act), res = randn(rng_, rows * out, 1.0f, act);
        const auto gu = randn(rng_, rows * 2 * in, 2.0f, act);
        check("linear fusions", sig, [&] {
          DeviceMem m;
          ops::Exec e(dut_, act);
          auto lw = ops::LinearWeight::upload(dut_, "w", qw, scales, biases, q, in, out);
          const auto norm = ops::NormWeight::upload(dut_, nw, 1e-5f);
          const std::vector<float> zx(static_cast<std::size_t>(rows * in)),
              zy(static_cast<std::size_t>(rows * out));
          Act sa = m.act(dut_, act, src, rows, in);
          Act x1 = m.act(dut_, act, zx, rows, in), y1 = m.act(dut_, act, zy, rows, out);
          Act x2 = m.act(dut_, act, zx, rows, in), y2 = m.act(dut_, act, zy, rows, out);
          ops::norm_linear(e, norm, sa, x1, lw, y1);
          ops::rms_norm(e, sa, norm, x2);
          ops::linear(e, lw, x2, y2);
          Act r1 = m.act(dut_, act, res, rows, out), r2 = m.act(dut_, act, res, rows, out);
          Act t = m.act(dut_, act, zy, rows, out);
          ops::linear_add(e, lw, x2, r1);
          ops::linear(e, lw, x2, t);
          ops::add(e, r2, t, r2);
          // The down projection of a [gate; up] product: SwiGLU, product and residual add in one
          // call against gated_activation then linear_add.
          Act ga = m.act(dut_, act, gu, rows, 2 * in);
          Act x3 = m.act(dut_, act, zx, rows, in), x4 = m.act(dut_, act, zx, rows, in);
          Act r3 = m.act(dut_, act, res, rows, out), r4 = m.act(dut_, act, res, rows, out);
          ops::gated_linear_add(e, backend::Activation::kSilu, ga, x3, lw, r3);
          ops::gated_activation(e, backend::Activation::kSilu, ga.sub(0, in), ga.sub(in, in), x4);
          ops::linear_add(e, lw, x4, r4);
          double differing = 0;
          for (auto [a, b] : {std::pair{x1, x2}, {y1, y2}, {r1, r2}, {x3, x4}, {r3, r4}}) {
            const auto va = read_act(dut_, a), vb = read_act(dut_, b);
            for (std::size_t i = 0; i < va.size(); ++i)
              differing += std::memcmp(&va[i], &vb[i], sizeof(float)) != 0;
          }
          return std::pair{differing, 0.0};
        });
      }
    }
  }
}

void Runner::gated() {
  for (DType act : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (auto a : {backend::Activation::kSilu, backend::Activation::kGeluApprox}) {
      const std::int64_t rows = 33, cols = 1536;
      const std::string sig = dt(act) +
                              (a == backend::Activation::kSilu ? " silu " : " gelu_approx ") +
                              std::to_string(rows) + "x" + std::to_string(cols);
      if (!supported({backend::Op::kGatedActivation, act})) {
        skip("gated_activation", sig, "not supported by the device");
        continue;
      }
      auto g = randn(rng_, rows * cols, 2.0f, act), u = randn(rng_, rows * cols, 1.0f, act);
      auto run = [&](Backend& be) {
        DeviceMem m;
        ops::Exec e(be, act);
        Act ga = m.act(be, act, g, rows, cols), ua = m.act(be, act, u, rows, cols),
            o = m.act(be, act, u, rows, cols);
        ops::gated_activation(e, a, ga, ua, o);
        return read_act(be, o);
      };
      check("gated_activation", sig, [&] {
        return std::pair{normalized_error(run(dut_), run(ref_)), rounding_steps(act, 3)};
      });
    }
  }
}

// The same token from the same logits, exactly (backend/sample_math.h).
void Runner::sample() {
  for (DType act : {DType::kF32, DType::kBF16}) {
    for (std::int64_t vocab : {33, 1000, 151936}) {
      const std::string sig = dt(act) + " vocab " + std::to_string(vocab) + " (96 draws)";
      if (!supported({backend::Op::kSample, act})) {
        skip("sample", sig, "not supported by the device");
        continue;
      }
      const std::int64_t nl = 3;
      auto logits = randn(rng_, nl * vocab, 2.0f, act);
      for (std::int64_t r = 0; r < nl; ++r)
        for (int j = 0; j < 6; ++j)
          logits[r * vocab + (j * 7919 + r) % vocab] = quant::round_to(act, 9.0f - float(j % 3));
      std::vector<backend::SampleRow> rows;
      std::vector<backend::SampleProc> procs = {{0, backend::SampleProcKind::kBias, 4.0f},
                                                {1, backend::SampleProcKind::kRepetition, 1.3f},
                                                {1, backend::SampleProcKind::kSubtract, 0.4f}};
      const std::int64_t words = ops::mask_words(vocab);
      std::vector<std::uint32_t> masks(static_cast<std::size_t>(words), 0u);
      for (std::int64_t t = 0; t < vocab; t += 3) masks[t >> 5] |= 1u << (t & 31);
      for (int i = 0; i < 96; ++i) {
        backend::SampleRow r;
        r.logit_row = i % nl;
        const int k = i % 8;
        r.temperature = k == 0 ? 0.0f : (k == 5 ? 0.3f : 1.1f);
        r.inv_temperature = r.temperature > 0 ? 1.0f / r.temperature : 1.0f;
        if (k == 2 || k == 7) r.top_p = k == 2 ? 0.9f : 0.35f;
        if (k == 3) r.log_min_p = std::log(0.05f), r.min_keep = 4;
        if (k == 4 || k == 7) r.top_k = k == 4 ? 5 : 40;
        if (k == 6) r.proc_end = 3, r.mask_row = 0;
        r.n_top = i % 3 == 0 ? 5 : 0;
        r.seed = 99 + i / 8;
        r.stream = i % 2;
        r.position = static_cast<std::uint64_t>(i);
        rows.push_back(r);
      }
      auto run = [&](Backend& be) {
        DeviceMem m;
        ops::Exec e(be, act);
        ops::Sampling s;
        Act l = m.act(be, act, logits, nl, vocab);
        return s.run(e, l, rows, procs, masks, words);
      };
      check("sample", sig, [&] {
        auto g = run(dut_), r = run(ref_);
        double mismatches = 0;
        for (std::size_t i = 0; i < r.size(); ++i) {
          bool same = g[i].token == r[i].token && g[i].status == r[i].status &&
                      g[i].n_top == r[i].n_top && std::fabs(g[i].logprob - r[i].logprob) <= 1e-4f;
          for (int j = 0; same && j < r[i].n_top; ++j) same = g[i].top_ids[j] == r[i].top_ids[j];
          mismatches += same ? 0 : 1;
        }
        return std::pair{mismatches, 0.0};
      });
    }
  }
}

// Every family on a tiny random model (odd sizes are in the op checks): the logits of a 24-token
// prompt teacher-forced on both backends, within a bound, and the same top-1 wherever the
// reference's margin exceeds twice the difference. The MoE model also prefills 80 tokens, a
// step long enough for the GPU to group its expert rows for the GEMM (MLXCEL_GPU_MOE_GEMM: on
// by default for CUDA).
void Runner::models() {
  struct Case {
    const char* type;
    int tokens;
  };
  const Case cases[] = {{"llama", 24}, {"qwen2", 24},     {"qwen3", 24},    {"gemma3_text", 24},
                        {"phi3", 24},  {"qwen3_moe", 24}, {"qwen3_moe", 80}};
  for (const Case& c : cases) {
    for (bool quantize : {false, true}) {
      const std::string sig = std::string(c.type) + (quantize ? " affine4 " : " bf16 ") +
                              std::to_string(c.tokens) + " tokens";
      check("model", sig, [&] {
        testing_models::Tiny t = testing_models::make(c.type, quantize);
        const auto p = testing_models::prompt(c.tokens, 7);
        auto logits = [&](Backend& be) {
          auto model = models::build_model(t.cfg, t.w, be);
          runtime::KvBlockPool pool(model->kv_layout(std::max(16, c.tokens / 4 + 2), 4), &be);
          runtime::SequenceKv kv(pool);
          std::vector<runtime::BatchItem> b = {{&kv, p, true}};
          std::vector<std::vector<float>> out;
          runtime::forward_step(*model, b, out);
          return out[0];
        };
        const auto g = logits(dut_), r = logits(ref_);
        const std::size_t V = static_cast<std::size_t>(t.cfg.vocab_size);
        double flips = 0;
        for (std::size_t row = 0; row < p.size(); ++row) {
          const float* rr = r.data() + row * V;
          const float* gg = g.data() + row * V;
          const std::size_t a = std::max_element(rr, rr + V) - rr,
                            b = std::max_element(gg, gg + V) - gg;
          float second = -INFINITY, diff = 0;
          for (std::size_t i = 0; i < V; ++i) {
            if (i != a) second = std::max(second, rr[i]);
            diff = std::max(diff, std::fabs(rr[i] - gg[i]));
          }
          if (rr[a] - second > 2 * diff && a != b) ++flips;
        }
        if (flips > 0) throw_error(ErrorCategory::kInternal, "top-1 differs at a decided position");
        return std::pair{normalized_error(g, r), 0.05};
      });
    }
  }
}

// Decode steps recorded and replayed (ops/step_graphs.h): the logits of 44 steps (batches of
// 1-3, prefill chunks between) with recording on, bit for bit against the same steps run op by
// op. Checked whatever the backend's default, so a device where recording is off by default
// (HIP) can be checked before MLXCEL_GPU_GRAPHS=1 turns it on.
void Runner::step_graphs() {
  const bool was_on = dut_.can_capture();
  if (!dut_.set_capture(true)) {
    skip("decode graphs", "step recording", dut_.name() + " does not record steps");
    return;
  }
  for (const char* type : {"llama", "qwen3_moe"}) {
    const std::string sig = std::string(type) + " affine4, 44 steps replayed vs op by op";
    check("decode graphs", sig, [&] {
      testing_models::Tiny t = testing_models::make(type, true);
      ops::StepGraphs::Stats stats;
      auto rows = [&](bool record) {
        dut_.set_capture(record);
        auto model = models::build_model(t.cfg, t.w, dut_);
        runtime::KvBlockPool pool(model->kv_layout(96, 4), &dut_);
        auto r = testing_models::run_step_scenario(*model, pool);
        if (record) stats = model->graph_stats();
        return r;
      };
      const auto on = rows(true), off = rows(false);
      dut_.set_capture(was_on);
      if (stats.replayed == 0)
        throw_error(ErrorCategory::kInternal, "no step was replayed (" +
                                                  std::to_string(stats.failed) +
                                                  " recordings failed)");
      double mismatches = 0;
      for (std::size_t i = 0; i < on.size(); ++i)
        if (on[i].size() != off[i].size() ||
            std::memcmp(on[i].data(), off[i].data(), on[i].size() * sizeof(float)) != 0)
          ++mismatches;
      return std::pair{mismatches, 0.0};
    });
  }
  dut_.set_capture(was_on);
}

std::string result_name(Result r) {
  return r == Result::kPass ? "ok" : r == Result::kFail ? "FAIL" : "skip";
}

}  // namespace

int Report::count(Check::Result r) const {
  return static_cast<int>(
      std::count_if(checks.begin(), checks.end(), [&](const Check& c) { return c.result == r; }));
}

Report run(Backend& dut, Backend& ref, bool quick) {
  Runner r(dut, ref, quick);
  r.report.device = dut.name();
  r.report.reference = ref.name();
  r.report.mlxcel = std::string(build_info().version) + " (" + build_info().commit + ", " +
                    build_info().backend + ")";
  r.norms();
  r.linear();
  r.linear_fusions();
  r.gated();
  r.sample();
  r.models();
  r.step_graphs();
  return r.report;
}

void print_table(const Report& r, std::FILE* out) {
  std::fprintf(out, "mlxcel selftest\n  mlxcel:    %s\n  device:    %s\n", r.mlxcel.c_str(),
               r.device.c_str());
  if (!r.arch.empty()) std::fprintf(out, "  arch:      %s\n", r.arch.c_str());
  if (!r.runtime.empty()) std::fprintf(out, "  runtime:   %s\n", r.runtime.c_str());
  std::fprintf(out, "  reference: %s\n\n%-22s %-42s %10s %10s  %s\n", r.reference.c_str(), "op",
               "case", "error", "bound", "result");
  for (const Check& c : r.checks) {
    std::fprintf(out, "%-22s %-42s %10.3g %10.3g  %s", c.op.c_str(), c.signature.c_str(), c.error,
                 c.bound, result_name(c.result).c_str());
    if (!c.detail.empty() && c.result != Result::kPass)
      std::fprintf(out, "  (%s)", c.detail.c_str());
    std::fprintf(out, "\n");
  }
  std::fprintf(out, "\nselftest: %d passed, %d failed, %d skipped: %s\n", r.count(Result::kPass),
               r.count(Result::kFail), r.count(Result::kSkip), r.passed() ? "PASS" : "FAIL");
}

std::string to_json(const Report& r) {
  nlohmann::json j = {{"mlxcel", r.mlxcel},
                      {"device", r.device},
                      {"arch", r.arch},
                      {"runtime", r.runtime},
                      {"reference", r.reference},
                      {"passed", r.count(Result::kPass)},
                      {"failed", r.count(Result::kFail)},
                      {"skipped", r.count(Result::kSkip)},
                      {"result", r.passed() ? "pass" : "fail"}};
  auto& arr = j["checks"] = nlohmann::json::array();
  for (const Check& c : r.checks)
    arr.push_back({{"op", c.op},
                   {"case", c.signature},
                   {"error", std::isfinite(c.error) ? c.error : -1.0},
                   {"bound", c.bound},
                   {"result", result_name(c.result)},
                   {"detail", c.detail}});
  return j.dump(2);
}

}  // namespace mlxcel::selftest
