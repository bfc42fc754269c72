// Op conformance (STYLE.md "Tests"): every op of backend::Backend x activation dtype x weight
// format x shape on the device under test (the GPU backend this binary was built with) against
// cpu::CpuBackend(kFast), with a per-op normalized error bound: max |dut - cpu| / max |cpu|.
// Combinations the device does not support are skipped with their signature, never passed. In a
// CPU-only build (or without a device) the GPU side skips; MLXCEL_REQUIRE_GPU=1 turns that into a
// failure. MLXCEL_OPS_REPORT=FILE appends one line per case (op, signature, error, bound).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/gpu/runtime.h"
#include "core/error.h"
#include "gpu_test_util.h"
#include "quant/quantize.h"
#include "selftest/device_check.h"

using namespace mlxcel;
using namespace mlxcel::backend;
using mlxcel::selftest::DeviceMem;
using mlxcel::selftest::normalized_error;
using mlxcel::selftest::randn;
using mlxcel::selftest::read_act;
using mlxcel::selftest::read_raw;
using mlxcel::selftest::rounding_steps;

namespace {

// --- Backends and memory -----------------------------------------------------------------------

Backend* dut() {
  static std::unique_ptr<Backend> be = [] {
    std::unique_ptr<Backend> b;
    if (test::gpu_available()) b = create_backend(gpu::compiled_backend());
    return b;
  }();
  return be.get();
}

Backend& cpu_backend() {
  static cpu::CpuBackend be(Numerics::kFast);
  return be;
}

#define DUT_OR_SKIP()           \
  MLXCEL_REQUIRE_GPU_OR_SKIP(); \
  Backend& gpu = *dut();        \
  Backend& cpu = cpu_backend()

// --- Error bounds and reporting ----------------------------------------------------------------

// One report line per checked case: signature, error, bound, verdict and (for EXPECT_CLOSE) a
// hash of the device's output bits, so that two runs under different MLXCEL_GPU_* switches can
// be compared for identical results (dev/h200_run*.sh diffs the reports).
void report(const std::string& sig, double err, double lim, std::uint64_t bits = 0) {
  static FILE* f = [] {
    const char* p = std::getenv("MLXCEL_OPS_REPORT");
    return p ? std::fopen(p, "a") : nullptr;
  }();
  if (f) {
    std::fprintf(f, "%s\t%.3g\t%.3g\t%s\t%016llx\n", sig.c_str(), err, lim,
                 err <= lim ? "ok" : "FAIL", static_cast<unsigned long long>(bits));
    std::fflush(f);
  }
}

// FNV-1a over a vector's bytes.
template <typename V>
std::uint64_t bits_hash(const V& v) {
  std::uint64_t h = 1469598103934665603ull;
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  for (std::size_t i = 0; i < v.size() * sizeof(v[0]); ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// Bounds are rounding_steps(act, n): ops round once (or twice, for the gated activation and the
// MoE combine) after fp32 work done in another order than the CPU.
#define EXPECT_CLOSE(sig, got, want, lim)          \
  do {                                             \
    const double e_ = normalized_error(got, want); \
    report(sig, e_, lim, bits_hash(got));          \
    EXPECT_LE(e_, lim) << sig;                     \
  } while (0)

const DType kActs[] = {DType::kF32, DType::kBF16, DType::kF16};

OpSignature sig_of(Op op, DType act, int head_dim = 0) {
  OpSignature s;
  s.op = op;
  s.act = act;
  s.head_dim = head_dim;
  return s;
}

// --- Weights -----------------------------------------------------------------------------------

struct WeightFormat {
  QMode mode;
  int bits, group_size;
  DType dtype;  // dense dtype, or the affine scales dtype
  std::string str() const {
    std::ostringstream s;
    s << qmode_name(mode);
    if (mode == QMode::kNone)
      s << "-" << dtype_name(dtype);
    else
      s << bits << "-gs" << group_size
        << (mode == QMode::kAffine ? std::string("-") + std::string(dtype_name(dtype)) : "");
    return s.str();
  }
};

std::vector<WeightFormat> weight_formats() {
  std::vector<WeightFormat> f = {{QMode::kNone, 0, 0, DType::kF32},
                                 {QMode::kNone, 0, 0, DType::kF16},
                                 {QMode::kNone, 0, 0, DType::kBF16}};
  for (int b : {2, 3, 4, 5, 6, 8}) f.push_back({QMode::kAffine, b, 64, DType::kBF16});
  for (int b : {4, 8}) {
    f.push_back({QMode::kAffine, b, 32, DType::kBF16});
    f.push_back({QMode::kAffine, b, 128, DType::kBF16});
  }
  f.push_back({QMode::kAffine, 4, 64, DType::kF16});
  f.push_back({QMode::kAffine, 3, 32, DType::kF32});
  f.push_back({QMode::kMxfp4, 4, 32, DType::kU8});
  f.push_back({QMode::kMxfp8, 8, 32, DType::kU8});
  f.push_back({QMode::kNvfp4, 4, 16, DType::kU8});
  return f;
}

// Host bytes of a random [E x] n x k matrix in format f.
struct HostMatrix {
  WeightFormat f;
  std::int64_t n = 0, k = 0, experts = 1;
  std::vector<std::uint8_t> w, scales, biases;
};

HostMatrix random_matrix(std::mt19937& rng, const WeightFormat& f, std::int64_t n, std::int64_t k,
                         std::int64_t experts = 1) {
  HostMatrix m;
  m.f = f;
  m.n = n;
  m.k = k;
  m.experts = experts;
  const std::int64_t rows = n * experts;
  auto fill_floats = [&](std::vector<std::uint8_t>& out, DType t, std::int64_t count, float mean,
                         float sd) {
    out.resize(static_cast<std::size_t>(count) * dtype_size(t));
    std::normal_distribution<float> d(mean, sd);
    for (std::int64_t i = 0; i < count; ++i) quant::store_float(out.data(), t, i, d(rng));
  };
  if (f.mode == QMode::kNone) {
    fill_floats(m.w, f.dtype, rows * k, 0.0f, 1.0f / std::sqrt(static_cast<float>(k)));
    return m;
  }
  m.w.resize(static_cast<std::size_t>(rows * k * f.bits / 8));
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : m.w) b = static_cast<std::uint8_t>(byte(rng));
  const std::int64_t groups = rows * (k / f.group_size);
  const float inv_k = 1.0f / std::sqrt(static_cast<float>(k));
  if (f.mode == QMode::kAffine) {
    const float levels = static_cast<float>((1 << f.bits) - 1);
    fill_floats(m.scales, f.dtype, groups, 0.0f, 2.0f * inv_k / levels);
    fill_floats(m.biases, f.dtype, groups, 0.0f, inv_k);
  } else {
    m.scales.resize(static_cast<std::size_t>(groups));
    // E8M0 around 2^-5 (mx), E4M3 around 0.1 (nv): outputs of order one.
    std::uniform_int_distribution<int> e8(118, 124), e4(0x18, 0x28);
    for (auto& s : m.scales)
      s = static_cast<std::uint8_t>(f.mode == QMode::kNvfp4 ? e4(rng) : e8(rng));
  }
  return m;
}

Matrix upload_matrix(Backend& be, DeviceMem& mem, const HostMatrix& h) {
  Matrix m;
  m.mode = h.f.mode;
  m.bits = h.f.bits;
  m.group_size = h.f.group_size;
  m.n = h.n;
  m.k = h.k;
  m.w = mem.raw(be, h.w.data(), h.w.size());
  m.w_dtype = h.f.mode == QMode::kNone ? h.f.dtype : DType::kU32;
  if (!h.scales.empty()) m.scales_dtype = h.f.mode == QMode::kAffine ? h.f.dtype : DType::kU8;
  if (!h.biases.empty() && be.wants_paired_scales()) {
    // As the op layer uploads affine weights to such backends (ops::LinearWeight::upload).
    const std::size_t es = dtype_size(h.f.dtype);
    std::vector<std::uint8_t> pairs(2 * h.scales.size());
    backend::pair_scales(h.scales.data(), h.biases.data(), h.scales.size() / es, es, pairs.data());
    m.scales = mem.raw(be, pairs.data(), pairs.size());
    m.biases = static_cast<const char*>(m.scales) + es;
    m.scale_step = 2;
  } else {
    if (!h.scales.empty()) m.scales = mem.raw(be, h.scales.data(), h.scales.size());
    if (!h.biases.empty()) m.biases = mem.raw(be, h.biases.data(), h.biases.size());
  }
  if (h.experts > 1) {
    m.expert_stride_w = h.w.size() / static_cast<std::size_t>(h.experts);
    m.expert_stride_s = h.scales.size() * static_cast<std::size_t>(m.scale_step) /
                        static_cast<std::size_t>(h.experts);
  }
  return m;
}

OpSignature weight_sig(Op op, DType act, const WeightFormat& f) {
  OpSignature s = sig_of(op, act);
  s.qmode = f.mode;
  s.weight_dtype =
      f.mode == QMode::kNone ? f.dtype : (f.mode == QMode::kAffine ? f.dtype : DType::kU8);
  s.bits = f.bits;
  s.group_size = f.group_size;
  return s;
}

std::string tag(DType act) { return std::string(dtype_name(act)); }

// --- Norms and elementwise ---------------------------------------------------------------------

TEST(BackendOps, RmsNorm) {
  DUT_OR_SKIP();
  std::mt19937 rng(1);
  for (DType act : kActs) {
    if (!gpu.supports(sig_of(Op::kRmsNorm, act))) {
      report("rms_norm " + tag(act), -1, 0);
      continue;
    }
    struct C {
      std::int64_t rows, cols, heads, pad;
    };
    for (C c : {C{1, 1, 1, 0}, C{3, 31, 1, 2}, C{32, 32, 1, 0}, C{33, 33, 1, 0}, C{5, 576, 1, 7},
                C{2, 1536, 1, 0}, C{1, 4097, 1, 0}, C{7, 9 * 64, 9, 3 * 64}, C{31, 3 * 128, 3, 0},
                C{2, 2 * 256, 2, 0}, C{2, 9001, 1, 5}}) {  // 9001: past the registers held
      DeviceMem mg, mc;
      auto x = randn(rng, static_cast<std::size_t>(c.rows * c.cols), 1.5f, act);
      auto w = randn(rng, static_cast<std::size_t>(c.cols / c.heads), 1.0f, DType::kF32);
      for (int inplace = 0; inplace < 2; ++inplace) {
        Act xg = mg.act(gpu, act, x, c.rows, c.cols, c.pad),
            xc = mc.act(cpu, act, x, c.rows, c.cols, c.pad);
        Act yg = inplace ? xg : mg.act(gpu, act, std::vector<float>(x.size()), c.rows, c.cols);
        Act yc = inplace ? xc : mc.act(cpu, act, std::vector<float>(x.size()), c.rows, c.cols);
        gpu.rms_norm({xg, mg.vec(gpu, w), 1e-5f, yg, act, c.heads});
        cpu.rms_norm({xc, mc.vec(cpu, w), 1e-5f, yc, act, c.heads});
        std::ostringstream s;
        s << "rms_norm " << tag(act) << " rows " << c.rows << " cols " << c.cols << " heads "
          << c.heads << " pad " << c.pad << (inplace ? " inplace" : "");
        EXPECT_CLOSE(s.str(), read_act(gpu, yg), read_act(cpu, yc), rounding_steps(act, 2));
      }
    }
  }
}

TEST(BackendOps, AddAndAddRmsNorm) {
  DUT_OR_SKIP();
  std::mt19937 rng(2);
  for (DType act : kActs) {
    for (auto [rows, cols] :
         {std::pair<std::int64_t, std::int64_t>{1, 1}, {31, 33}, {32, 576}, {33, 1536}, {3, 4097},
          {2, 9001}}) {  // 4097 and 9001: 1,024 threads per row, 9001 also past the held values
      DeviceMem mg, mc;
      auto a = randn(rng, static_cast<std::size_t>(rows * cols), 2.0f, act);
      auto b = randn(rng, a.size(), 1.0f, act);
      auto w = randn(rng, static_cast<std::size_t>(cols), 1.0f, DType::kF32);
      Act ag = mg.act(gpu, act, a, rows, cols, 3), bg = mg.act(gpu, act, b, rows, cols);
      Act ac = mc.act(cpu, act, a, rows, cols, 3), bc = mc.act(cpu, act, b, rows, cols);
      std::ostringstream s;
      s << tag(act) << " rows " << rows << " cols " << cols;
      if (gpu.supports(sig_of(Op::kAdd, act))) {
        Act yg = mg.act(gpu, act, std::vector<float>(a.size()), rows, cols);
        Act yc = mc.act(cpu, act, std::vector<float>(a.size()), rows, cols);
        gpu.add({ag, bg, yg, act});
        cpu.add({ac, bc, yc, act});
        EXPECT_CLOSE("add " + s.str(), read_act(gpu, yg), read_act(cpu, yc),
                     rounding_steps(act, 1));
      }
      if (gpu.supports(sig_of(Op::kAddRmsNorm, act))) {
        Act yg = mg.act(gpu, act, std::vector<float>(a.size()), rows, cols);
        Act yc = mc.act(cpu, act, std::vector<float>(a.size()), rows, cols);
        gpu.add_rms_norm({ag, bg, mg.vec(gpu, w), 1e-6f, yg, act});
        cpu.add_rms_norm({ac, bc, mc.vec(cpu, w), 1e-6f, yc, act});
        EXPECT_CLOSE("add_rms_norm(h) " + s.str(), read_act(gpu, ag), read_act(cpu, ac),
                     rounding_steps(act, 1));
        EXPECT_CLOSE("add_rms_norm(y) " + s.str(), read_act(gpu, yg), read_act(cpu, yc),
                     rounding_steps(act, 2));
      }
    }
  }
}

TEST(BackendOps, GatedActivation) {
  DUT_OR_SKIP();
  std::mt19937 rng(3);
  for (DType act : kActs) {
    if (!gpu.supports(sig_of(Op::kGatedActivation, act))) continue;
    for (Activation fn : {Activation::kSilu, Activation::kGeluApprox}) {
      for (auto [rows, cols] :
           {std::pair<std::int64_t, std::int64_t>{1, 33}, {31, 1536}, {33, 576}}) {
        DeviceMem mg, mc;
        auto g = randn(rng, static_cast<std::size_t>(rows * cols), 3.0f, act);
        auto u = randn(rng, g.size(), 1.0f, act);
        // g and u as halves of one [rows, 2 * cols] row (the fused gate_up output).
        std::vector<float> gu(static_cast<std::size_t>(rows * 2 * cols));
        for (std::int64_t r = 0; r < rows; ++r)
          for (std::int64_t c = 0; c < cols; ++c) {
            gu[r * 2 * cols + c] = g[r * cols + c];
            gu[r * 2 * cols + cols + c] = u[r * cols + c];
          }
        Act xg = mg.act(gpu, act, gu, rows, 2 * cols), xc = mc.act(cpu, act, gu, rows, 2 * cols);
        Act og = mg.act(gpu, act, std::vector<float>(g.size()), rows, cols);
        Act oc = mc.act(cpu, act, std::vector<float>(g.size()), rows, cols);
        gpu.gated_activation({fn, xg.sub(0, cols), xg.sub(cols, cols), og, act});
        cpu.gated_activation({fn, xc.sub(0, cols), xc.sub(cols, cols), oc, act});
        std::ostringstream s;
        s << "gated_activation " << (fn == Activation::kSilu ? "silu " : "gelu_approx ") << tag(act)
          << " rows " << rows << " cols " << cols;
        EXPECT_CLOSE(s.str(), read_act(gpu, og), read_act(cpu, oc), rounding_steps(act, 3));
      }
    }
  }
}

// --- Embedding and gathers ---------------------------------------------------------------------

TEST(BackendOps, EmbedAndGatherRows) {
  DUT_OR_SKIP();
  std::mt19937 rng(4);
  const std::int64_t vocab = 97, dim = 576;
  for (DType act : kActs) {
    for (const WeightFormat& f : weight_formats()) {
      if (dim % std::max(f.group_size, 1) != 0) continue;
      const OpSignature sig = weight_sig(Op::kEmbed, act, f);
      if (!gpu.supports(sig)) {
        report("embed SKIPPED " + sig.str(), -1, 0);
        continue;
      }
      HostMatrix h = random_matrix(rng, f, vocab, dim);

      std::vector<std::int32_t> ids = {0, 96, 5, 5, 17, 42, 95, 1, 33};
      for (float scale : {1.0f, bf16(std::sqrt(static_cast<float>(dim))).to_float()}) {
        DeviceMem mg, mc;
        Act og = mg.act(gpu, act, std::vector<float>(ids.size() * dim),
                        static_cast<std::int64_t>(ids.size()), dim);
        Act oc = mc.act(cpu, act, std::vector<float>(ids.size() * dim),
                        static_cast<std::int64_t>(ids.size()), dim);
        EmbedArgs eg, ec;
        eg.table = upload_matrix(gpu, mg, h);
        ec.table = upload_matrix(cpu, mc, h);
        eg.ids = mg.vec(gpu, ids);
        ec.ids = mc.vec(cpu, ids);
        eg.host_ids = ec.host_ids = ids.data();
        eg.n = ec.n = static_cast<std::int64_t>(ids.size());
        eg.scale = ec.scale = scale;
        eg.out = og;
        ec.out = oc;
        eg.round = ec.round = act;
        gpu.embed(eg);
        cpu.embed(ec);
        auto want = read_act(cpu, oc);
        for (auto& v : want) v = quant::round_to(act, v);  // the CPU keeps fp32 containers
        EXPECT_CLOSE("embed " + sig.str() + " scale " + std::to_string(scale), read_act(gpu, og),
                     want, rounding_steps(act, 1));
      }
    }
    if (!gpu.supports(sig_of(Op::kGatherRows, act))) continue;
    DeviceMem mg, mc;
    auto src = randn(rng, 40 * 576, 1.0f, act);
    std::vector<std::int32_t> rows = {39, 0, 7, 7, 31};
    Act sg = mg.act(gpu, act, src, 40, 576, 5), sc = mc.act(cpu, act, src, 40, 576, 5);
    Act dg = mg.act(gpu, act, std::vector<float>(rows.size() * 576), 5, 576);
    Act dc = mc.act(cpu, act, std::vector<float>(rows.size() * 576), 5, 576);
    gpu.gather_rows({sg, mg.vec(gpu, rows), rows.data(), 5, dg});
    cpu.gather_rows({sc, mc.vec(cpu, rows), rows.data(), 5, dc});
    EXPECT_CLOSE("gather_rows " + tag(act), read_act(gpu, dg), read_act(cpu, dc), 0.0);
  }
}

// --- Linear ------------------------------------------------------------------------------------

TEST(BackendOps, Linear) {
  DUT_OR_SKIP();
  std::mt19937 rng(5);
  struct Shape {
    std::int64_t k, n;
  };
  // {1120, 72}: K of an odd number of 32-weight units (the last 64-wide K slice of the
  // tensor-core GEMM is half empty) where the format allows it.
  const Shape shapes[] = {{576, 1536}, {1536, 576}, {256, 33}, {1120, 72}};
  const std::int64_t ms[] = {1, 3, 8, 9, 31, 32, 33, 200};
  int ran = 0, skipped = 0;
  for (DType act : kActs) {
    for (const WeightFormat& f : weight_formats()) {
      const OpSignature sig = weight_sig(Op::kLinear, act, f);
      if (!gpu.supports(sig)) {
        ++skipped;
        report("linear SKIPPED " + sig.str(), -1, 0);
        continue;
      }
      for (const Shape& sh : shapes) {
        if (f.group_size && sh.k % f.group_size) continue;
        HostMatrix h = random_matrix(rng, f, sh.n, sh.k);
        DeviceMem mg, mc;
        const Matrix wg = upload_matrix(gpu, mg, h), wc = upload_matrix(cpu, mc, h);
        const auto bias = randn(rng, static_cast<std::size_t>(sh.n), 0.5f, DType::kF32);
        const float* bg = mg.vec(gpu, bias);
        const float* bc = mc.vec(cpu, bias);
        for (std::int64_t m : ms) {
          // The full M sweep in bf16; 1, 33 (GEMVs) and 200 (GEMM) rows in the others.
          if (act != DType::kBF16 && m != 1 && m != 33 && m != 200) continue;
          const bool with_bias = m == 3 || m == 33;
          const std::int64_t pad = m == 9 ? 5 : 0;  // strided x (a column slice of a wider row)
          auto x = randn(rng, static_cast<std::size_t>(m * sh.k), 1.0f, act);
          Act xg = mg.act(gpu, act, x, m, sh.k, pad), xc = mc.act(cpu, act, x, m, sh.k);
          Act yg = mg.act(gpu, act, std::vector<float>(m * sh.n), m, sh.n, pad);
          Act yc = mc.act(cpu, act, std::vector<float>(m * sh.n), m, sh.n);
          gpu.linear({xg, wg, with_bias ? bg : nullptr, yg, act});
          cpu.linear({xc, wc, with_bias ? bc : nullptr, yc, act});
          std::ostringstream s;
          s << "linear " << sig.str() << " m " << m << " k " << sh.k << " n " << sh.n
            << (with_bias ? " bias" : "") << (pad ? " strided" : "");
          EXPECT_CLOSE(s.str(), read_act(gpu, yg), read_act(cpu, yc),
                       act == DType::kF32 ? 2e-5 : rounding_steps(act, 2));
          ++ran;
        }
      }
    }
  }
  EXPECT_GT(ran, 0);
  if (skipped) std::printf("linear: %d format/dtype combinations skipped (see report)\n", skipped);
}

// --- RoPE + KV append and attention ------------------------------------------------------------

struct RopeCase {
  const char* name;
  bool traditional;
  bool freqs;
  float input_scale;
  int dims_div;  // dims = head_dim / dims_div
  float scale;
  bool qk_norm = false;  // q and k heads RMS-normalized first (qwen3, gemma3)
};

// Two steps of a two-sequence batch over a paged pool with non-contiguous block tables: a
// prefill (seq 0: 33 tokens, seq 1: 40 tokens) and a decode step (one token each).
TEST(BackendOps, RopeKvAppendAndAttention) {
  DUT_OR_SKIP();
  std::mt19937 rng(6);
  const RopeCase ropes[] = {{"base", false, false, 1.0f, 1, 1.0f},
                            {"traditional", true, false, 1.0f, 1, 1.0f},
                            {"freqs", false, true, 1.0f, 1, 0.5f},
                            {"partial+input_scale", false, true, 1.25f, 2, 1.0f},
                            {"qk_norm", false, false, 1.0f, 1, 1.0f, true},
                            {"qk_norm+traditional+partial", true, true, 1.0f, 2, 1.0f, true}};
  const int Hq = 9, Hk = 3, layer = 1, n_layers = 2, bs = 16;
  for (DType act : kActs) {
    for (int hd : {64, 128, 256}) {
      for (const RopeCase& rc : ropes) {
        for (std::int64_t window : {std::int64_t{0}, std::int64_t{5}}) {
          if (window && std::string(rc.name) != "base") continue;
          const OpSignature sr = sig_of(Op::kRopeKvAppend, act, hd),
                            sa = sig_of(Op::kAttention, act, hd);
          if (!gpu.supports(sr) || !gpu.supports(sa)) {
            report("rope/attention SKIPPED " + sr.str(), -1, 0);
            continue;
          }
          DeviceMem mg, mc;
          KvLayout kv;
          kv.n_layers = n_layers;
          kv.n_kv_heads = Hk;
          kv.head_dim = hd;
          kv.v_dim = hd;
          kv.block_size = bs;
          kv.dtype = act;
          kv.num_blocks = 8;
          std::vector<std::uint8_t> zero(kv.bytes());
          KvLayout kg = kv, kc = kv;
          kg.base = mg.raw(gpu, zero.data(), zero.size());
          kc.base = mc.raw(cpu, zero.data(), zero.size());
          std::vector<float> freqs(static_cast<std::size_t>(hd / rc.dims_div / 2));
          for (std::size_t i = 0; i < freqs.size(); ++i)
            freqs[i] = std::pow(500000.0f, 2.0f * static_cast<float>(i) /
                                               static_cast<float>(hd / rc.dims_div)) *
                       (i % 3 == 0 ? 8.0f : 1.0f);
          RopeTable rt;
          rt.dims = hd / rc.dims_div;
          rt.traditional = rc.traditional;
          rt.base = 10000.0f;
          rt.scale = rc.scale;
          rt.input_scale = rc.input_scale;
          const std::vector<std::int32_t> table = {0, 1, 2, 5, 3, 4};  // [2 seqs, 3 blocks]
          struct Step {
            std::vector<std::int32_t> pos, seq;
          };
          std::vector<Step> steps(2);
          for (int i = 0; i < 33; ++i) {
            steps[0].pos.push_back(i);
            steps[0].seq.push_back(0);
          }
          for (int i = 0; i < 40; ++i) {
            steps[0].pos.push_back(i);
            steps[0].seq.push_back(1);
          }
          steps[1].pos = {33, 40};
          steps[1].seq = {0, 1};
          for (std::size_t si = 0; si < steps.size(); ++si) {
            const Step& st = steps[si];
            const std::int64_t T = static_cast<std::int64_t>(st.pos.size());
            std::vector<std::int32_t> lens =
                si == 0 ? std::vector<std::int32_t>{33, 40} : std::vector<std::int32_t>{34, 41};
            auto view = [&](Backend& be, DeviceMem& mem) {
              StepView v;
              v.n_tokens = T;
              v.n_seqs = 2;
              v.max_blocks = 3;
              v.positions = mem.vec(be, st.pos);
              v.seq_of_token = mem.vec(be, st.seq);
              v.block_tables = mem.vec(be, table);
              v.seq_lens = mem.vec(be, lens);
              v.tokens = v.positions;
              v.host_positions = st.pos.data();
              v.host_seq_of_token = st.seq.data();
              v.host_block_tables = table.data();
              v.host_tokens = st.pos.data();
              return v;
            };
            const StepView vg = view(gpu, mg), vc = view(cpu, mc);
            // q, k, v as column slices of one qkv row, as the fused projection writes them.
            const std::int64_t qn = Hq * hd, kn = Hk * hd;
            auto qkv = randn(rng, static_cast<std::size_t>(T * (qn + 2 * kn)), 1.0f, act);
            Act xg = mg.act(gpu, act, qkv, T, qn + 2 * kn),
                xc = mc.act(cpu, act, qkv, T, qn + 2 * kn);
            RopeTable tg = rt, tc = rt;
            if (rc.freqs) {
              tg.freqs = mg.vec(gpu, freqs);
              tc.freqs = mc.vec(cpu, freqs);
              tg.host_freqs = tc.host_freqs = freqs.data();
            }
            // qk-norm weights near 1 (a checkpoint's learned scales); gemma's 1 + w is
            // applied at load, so the op sees plain weights either way.
            std::vector<float> qw(static_cast<std::size_t>(hd)), kw(qw.size());
            std::uniform_real_distribution<float> near1(0.5f, 1.5f);
            for (std::size_t i = 0; i < qw.size(); ++i) {
              qw[i] = near1(rng);
              kw[i] = near1(rng);
            }
            RopeKvAppendArgs rg{xg.sub(0, qn),
                                xg.sub(qn, kn),
                                xg.sub(qn + kn, kn),
                                Hq,
                                Hk,
                                hd,
                                tg,
                                kg,
                                layer,
                                vg,
                                act};
            RopeKvAppendArgs rcpu{xc.sub(0, qn),
                                  xc.sub(qn, kn),
                                  xc.sub(qn + kn, kn),
                                  Hq,
                                  Hk,
                                  hd,
                                  tc,
                                  kc,
                                  layer,
                                  vc,
                                  act};
            if (rc.qk_norm) {
              rg.q_norm = mg.vec(gpu, qw);
              rg.k_norm = mg.vec(gpu, kw);
              rcpu.q_norm = mc.vec(cpu, qw);
              rcpu.k_norm = mc.vec(cpu, kw);
              rg.q_norm_eps = rcpu.q_norm_eps = 1e-6f;
              rg.k_norm_eps = rcpu.k_norm_eps = 1e-5f;
            }
            gpu.rope_kv_append(rg);
            cpu.rope_kv_append(rcpu);
            std::ostringstream s;
            s << tag(act) << " head_dim " << hd << " rope " << rc.name << " window " << window
              << (si == 0 ? " prefill T=73" : " decode T=2");
            // f32: CUDA/HIP and glibc cosf/sinf differ by up to 2 ulp at angles of tens of radians.
            // qk-norm adds rms_norm's two roundings (a sum in another order) ahead of the rotation.
            EXPECT_CLOSE("rope_kv_append(q,k) " + s.str(), read_act(gpu, xg), read_act(cpu, xc),
                         rounding_steps(act, act == DType::kF32 || rc.qk_norm ? 3 : 1));
            Act og = mg.act(gpu, act, std::vector<float>(T * qn), T, qn);
            Act oc = mc.act(cpu, act, std::vector<float>(T * qn), T, qn);
            const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
            gpu.attention({xg.sub(0, qn), Hq, kg, layer, window, scale, vg, og, act});
            cpu.attention({xc.sub(0, qn), Hq, kc, layer, window, scale, vc, oc, act});
            EXPECT_CLOSE("attention " + s.str(), read_act(gpu, og), read_act(cpu, oc),
                         rounding_steps(act, 4));
          }
          // The whole pool (both layers: layer 0 must stay untouched).
          Act pg{kg.base, act, 1, static_cast<std::int64_t>(kv.bytes() / dtype_size(act)),
                 static_cast<std::int64_t>(kv.bytes() / dtype_size(act))};
          Act pc{kc.base, act, pg.rows, pg.cols, pg.stride};
          std::ostringstream s;
          s << "kv_cache " << tag(act) << " head_dim " << hd << " rope " << rc.name;
          EXPECT_CLOSE(s.str(), read_act(gpu, pg), read_act(cpu, pc),
                       rounding_steps(act, act == DType::kF32 || rc.qk_norm ? 3 : 1));
        }
      }
    }
  }
}

// Long contexts: a 300-token step (one block per (token, head) walking 64-key spans) against the
// CPU, then the same queries as 1- and 3-token decode steps (the split-KV launch: one block per
// span, the last one merging) must give bit-identical rows: batch invariance, prefill == decode.
TEST(BackendOps, AttentionLongContextBatchInvariant) {
  DUT_OR_SKIP();
  std::mt19937 rng(11);
  const int Hq = 9, Hk = 3, bs = 16, n_blocks = 20;
  const std::int64_t L = 300;
  for (DType act : {DType::kBF16, DType::kF32}) {
    for (int hd : {64, 128, 256}) {
      for (std::int64_t window : {std::int64_t{0}, std::int64_t{100}}) {
        const OpSignature sa = sig_of(Op::kAttention, act, hd);
        if (!gpu.supports(sa)) {
          report("attention SKIPPED " + sa.str(), -1, 0);
          continue;
        }
        DeviceMem mg, mc;
        KvLayout kv;
        kv.n_layers = 1;
        kv.n_kv_heads = Hk;
        kv.head_dim = hd;
        kv.v_dim = hd;
        kv.block_size = bs;
        kv.dtype = act;
        kv.num_blocks = n_blocks;
        // The pool's bytes in the cache dtype (the CPU stores activations as fp32, not its KV).
        const std::int64_t pool = static_cast<std::int64_t>(kv.bytes() / dtype_size(act));
        const auto pool_vals = randn(rng, static_cast<std::size_t>(pool), 1.0f, act);
        std::vector<std::uint8_t> pool_bytes(kv.bytes());
        for (std::int64_t i = 0; i < pool; ++i)
          quant::store_float(pool_bytes.data(), act, i, pool_vals[static_cast<std::size_t>(i)]);
        KvLayout kg = kv, kc = kv;
        kg.base = mg.raw(gpu, pool_bytes.data(), pool_bytes.size());
        kc.base = mc.raw(cpu, pool_bytes.data(), pool_bytes.size());
        std::vector<std::int32_t> table(n_blocks);
        for (int i = 0; i < n_blocks; ++i) table[i] = (i * 7) % n_blocks;  // scattered blocks
        const std::int64_t qn = Hq * hd;
        const auto q_all = randn(rng, static_cast<std::size_t>(L * qn), 1.0f, act);
        const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
        // One step over the query rows `rows` (their positions), all of sequence 0.
        auto run = [&](Backend& be, DeviceMem& mem, const KvLayout& k,
                       const std::vector<std::int32_t>& rows) {
          const std::int64_t T = static_cast<std::int64_t>(rows.size());
          std::vector<float> q;
          for (std::int32_t r : rows)
            q.insert(q.end(), q_all.begin() + r * qn, q_all.begin() + (r + 1) * qn);
          std::vector<std::int32_t> seq(rows.size(), 0);
          std::vector<std::int32_t> lens = {static_cast<std::int32_t>(L)};
          StepView v;
          v.n_tokens = T;
          v.n_seqs = 1;
          v.max_blocks = n_blocks;
          v.positions = mem.vec(be, rows);
          v.seq_of_token = mem.vec(be, seq);
          v.block_tables = mem.vec(be, table);
          v.seq_lens = mem.vec(be, lens);
          v.tokens = v.positions;
          v.host_positions = v.host_tokens = rows.data();
          v.host_seq_of_token = seq.data();
          v.host_block_tables = table.data();
          Act qa = mem.act(be, act, q, T, qn);
          Act o = mem.act(be, act, std::vector<float>(static_cast<std::size_t>(T * qn)), T, qn);
          be.attention({qa, Hq, k, 0, window, scale, v, o, act});
          return read_act(be, o);
        };
        std::vector<std::int32_t> all(L);
        for (std::int64_t i = 0; i < L; ++i) all[i] = static_cast<std::int32_t>(i);
        const auto full = run(gpu, mg, kg, all);
        std::ostringstream s;
        s << "attention long " << tag(act) << " head_dim " << hd << " window " << window << " L "
          << L;
        EXPECT_CLOSE(s.str(), full, run(cpu, mc, kc, all), rounding_steps(act, 4));
        for (const std::vector<std::int32_t>& rows :
             {std::vector<std::int32_t>{299}, std::vector<std::int32_t>{100, 200, 299},
              std::vector<std::int32_t>{63, 64, 65, 127, 128}}) {
          const auto got = run(gpu, mg, kg, rows);
          for (std::size_t i = 0; i < rows.size(); ++i) {
            const std::vector<float> want(full.begin() + rows[i] * qn,
                                          full.begin() + (rows[i] + 1) * qn);
            const std::vector<float> row(got.begin() + static_cast<std::int64_t>(i) * qn,
                                         got.begin() + static_cast<std::int64_t>(i + 1) * qn);
            EXPECT_EQ(row, want) << s.str() << ": position " << rows[i] << " in a "
                                 << rows.size() << "-token step differs from the " << L
                                 << "-token step";
          }
        }
      }
    }
  }
}

// Decode GEMV batch invariance: a row's output must not depend on the rows beside it (1, 9 or 40
// rows: the M = 1 and the 4-rows-per-block launches), for every quantized format and K that
// splits over 1, 2 and 4 warps; and the result stays close to the CPU's.
TEST(BackendOps, LinearBatchInvariant) {
  DUT_OR_SKIP();
  std::mt19937 rng(12);
  const std::int64_t n = 577;
  for (const WeightFormat& f : weight_formats()) {
    if (f.mode == QMode::kNone) continue;
    const DType act = DType::kBF16;
    const OpSignature sig = weight_sig(Op::kLinear, act, f);
    if (!gpu.supports(sig)) {
      report("linear SKIPPED " + sig.str(), -1, 0);
      continue;
    }
    for (std::int64_t k : {std::int64_t{1536}, std::int64_t{2560}, std::int64_t{4224}}) {
      if (k % f.group_size) continue;
      HostMatrix h = random_matrix(rng, f, n, k);
      DeviceMem mg, mc;
      const Matrix wg = upload_matrix(gpu, mg, h), wc = upload_matrix(cpu, mc, h);
      const std::int64_t M = 40;
      const auto x = randn(rng, static_cast<std::size_t>(M * k), 1.0f, act);
      auto run = [&](std::int64_t m0, std::int64_t m) {
        std::vector<float> xs(x.begin() + m0 * k, x.begin() + (m0 + m) * k);
        Act xg = mg.act(gpu, act, xs, m, k);
        Act yg = mg.act(gpu, act, std::vector<float>(static_cast<std::size_t>(m * n)), m, n);
        gpu.linear({xg, wg, nullptr, yg, act});
        return read_act(gpu, yg);
      };
      const auto all = run(0, M);
      Act xc = mc.act(cpu, act, x, M, k);
      Act yc = mc.act(cpu, act, std::vector<float>(static_cast<std::size_t>(M * n)), M, n);
      cpu.linear({xc, wc, nullptr, yc, act});
      std::ostringstream s;
      s << "linear batch " << sig.str() << " m " << M << " k " << k << " n " << n;
      EXPECT_CLOSE(s.str(), all, read_act(cpu, yc), rounding_steps(act, 2));
      auto same_rows = [&](const std::vector<float>& got, std::int64_t m0, std::int64_t m) {
        for (std::int64_t i = 0; i < m; ++i) {
          const std::vector<float> want(all.begin() + (m0 + i) * n, all.begin() + (m0 + i + 1) * n);
          const std::vector<float> row(got.begin() + i * n, got.begin() + (i + 1) * n);
          EXPECT_EQ(row, want) << s.str() << ": row " << m0 + i << " computed among " << m
                               << " rows differs from the 40-row result";
        }
      };
      same_rows(run(17, 1), 17, 1);
      same_rows(run(3, 9), 3, 9);
    }
  }
}

// backend::LinearArgs' fusions must give exactly what the same backend's unfused ops give, bit
// for bit: the input norm (x = rms_norm(src), then the product) against rms_norm then linear, and
// accumulate (y += x · Wᵀ) against linear into a temporary then add, at 1-70 rows (the decode
// GEMVs and the prefill GEMM); and both stay close to the CPU. Widths: the 8B's
// 4096 (a 1,024-thread norm), 1,024, and 1,536 / 2,560 (odd group counts of 32-wide units).
// Each also runs the gated input (x = silu(g) * u of a [gate; up] product, the down projection,
// accumulating) against gated_activation then linear; K 14,336 and 3,072 are the 8B's and the
// 0.6B's down projections.
TEST(BackendOps, LinearFusions) {
  DUT_OR_SKIP();
  std::mt19937 rng(21);
  const DType act = DType::kBF16;
  int ran = 0;
  for (const WeightFormat& f : weight_formats()) {
    if (!((f.mode == QMode::kAffine && f.bits == 4) || (f.mode == QMode::kNone && f.dtype == act)))
      continue;
    const OpSignature sig = weight_sig(Op::kLinear, act, f);
    if (!gpu.supports(sig)) continue;
    for (auto [k, n] : {std::pair<std::int64_t, std::int64_t>{4096, 1000}, {1536, 577},
                        {2560, 96}, {1024, 4096}, {14336, 320}, {3072, 200}}) {
      if (f.group_size && k % f.group_size) continue;
      HostMatrix h = random_matrix(rng, f, n, k);
      DeviceMem mg, mc;
      const Matrix wg = upload_matrix(gpu, mg, h), wc = upload_matrix(cpu, mc, h);
      const auto nw = randn(rng, static_cast<std::size_t>(k), 1.0f, DType::kF32);
      const float* nwg = mg.vec(gpu, nw);
      const float* nwc = mc.vec(cpu, nw);
      const auto bias = randn(rng, static_cast<std::size_t>(n), 0.5f, DType::kF32);
      const float* bg = mg.vec(gpu, bias);
      const float* bc = mc.vec(cpu, bias);
      for (std::int64_t m : {1, 2, 3, 9, 70}) {
        std::ostringstream s;
        s << "linear fusions " << sig.str() << " m " << m << " k " << k << " n " << n;
        const auto src = randn(rng, static_cast<std::size_t>(m * k), 2.0f, act);
        const auto res = randn(rng, static_cast<std::size_t>(m * n), 1.0f, act);
        const std::vector<float> zx(static_cast<std::size_t>(m * k)), zy(static_cast<std::size_t>(m * n));
        auto fused_norm = [&](Backend& be, DeviceMem& mem, const Matrix& w, const float* nwp) {
          Act sa = mem.act(be, act, src, m, k), xa = mem.act(be, act, zx, m, k);
          Act ya = mem.act(be, act, zy, m, n);
          LinearArgs a(xa, w, nullptr, ya, act);
          a.norm_weight = nwp;
          a.norm_eps = 1e-6f;
          a.norm_src = sa;
          be.linear(a);
          return std::pair{read_act(be, xa), read_act(be, ya)};
        };
        auto accumulate = [&](Backend& be, DeviceMem& mem, const Matrix& w, const float* b) {
          Act xa = mem.act(be, act, src, m, k), ra = mem.act(be, act, res, m, n);
          LinearArgs a(xa, w, b, ra, act);
          a.accumulate = true;
          be.linear(a);
          return read_act(be, ra);
        };
        const auto [xf, yf] = fused_norm(gpu, mg, wg, nwg);
        {  // the GPU's unfused twin
          Act sa = mg.act(gpu, act, src, m, k), xa = mg.act(gpu, act, zx, m, k);
          Act ya = mg.act(gpu, act, zy, m, n);
          gpu.rms_norm({sa, nwg, 1e-6f, xa, act, 1});
          gpu.linear({xa, wg, nullptr, ya, act});
          EXPECT_EQ(xf, read_act(gpu, xa)) << s.str() << ": the fused norm's x differs";
          EXPECT_EQ(yf, read_act(gpu, ya)) << s.str() << ": the fused norm's product differs";
        }
        const auto rf = accumulate(gpu, mg, wg, bg);
        {
          Act xa = mg.act(gpu, act, src, m, k), ra = mg.act(gpu, act, res, m, n);
          Act ta = mg.act(gpu, act, zy, m, n);
          gpu.linear({xa, wg, bg, ta, act});
          gpu.add({ra, ta, ra, act});
          EXPECT_EQ(rf, read_act(gpu, ra)) << s.str() << ": the accumulated product differs";
        }
        const auto [xc, yc] = fused_norm(cpu, mc, wc, nwc);
        EXPECT_CLOSE(s.str() + " norm x", xf, xc, rounding_steps(act, 2));
        EXPECT_CLOSE(s.str() + " norm y", yf, yc, rounding_steps(act, 4));
        {  // gated_in (the down projection): x = SwiGLU of gu's halves, the product added to h
          const auto gu = randn(rng, static_cast<std::size_t>(m * 2 * k), 2.0f, act);
          auto gated_in = [&](Backend& be, DeviceMem& mem, const Matrix& w) {
            Act ga = mem.act(be, act, gu, m, 2 * k), xa = mem.act(be, act, zx, m, k);
            Act ra = mem.act(be, act, res, m, n);
            LinearArgs a(xa, w, nullptr, ra, act);
            a.accumulate = true;
            a.gated_in = true;
            a.gated_src = ga;
            be.linear(a);
            return std::pair{read_act(be, xa), read_act(be, ra)};
          };
          const auto [xg, rg] = gated_in(gpu, mg, wg);
          {  // the GPU's unfused twin
            Act ga = mg.act(gpu, act, gu, m, 2 * k), xa = mg.act(gpu, act, zx, m, k);
            Act ra = mg.act(gpu, act, res, m, n);
            gpu.gated_activation({Activation::kSilu, ga.sub(0, k), ga.sub(k, k), xa, act});
            LinearArgs a(xa, wg, nullptr, ra, act);
            a.accumulate = true;
            gpu.linear(a);
            EXPECT_EQ(xg, read_act(gpu, xa)) << s.str() << ": the fused gated input differs";
            EXPECT_EQ(rg, read_act(gpu, ra)) << s.str() << ": the gated-input product differs";
          }
          const auto [xc, rc] = gated_in(cpu, mc, wc);
          EXPECT_CLOSE(s.str() + " gated x", xg, xc, rounding_steps(act, 3));
          EXPECT_CLOSE(s.str() + " gated y", rg, rc, rounding_steps(act, 5));
        }
        // The product is held to the Linear test's 2 steps from the CPU's, and the residual add
        // rounds once more: 3 steps (run 26 saw 2.07 at m = 70 against the 2 first allowed).
        EXPECT_CLOSE(s.str() + " accumulate", rf, accumulate(cpu, mc, wc, bc), rounding_steps(act, 3));
        ++ran;
      }
    }
  }
  EXPECT_GT(ran, 0);
}

// --- MoE ---------------------------------------------------------------------------------------

MoeRouteArgs route_args(Act gates, int top_k, bool norm, std::int32_t* experts, float* weights,
                        DType round) {
  MoeRouteArgs r;
  r.gates = gates;
  r.top_k = top_k;
  r.norm_topk_prob = norm;
  r.experts = experts;
  r.weights = weights;
  r.round = round;
  return r;
}

TEST(BackendOps, MoeRoute) {
  DUT_OR_SKIP();
  std::mt19937 rng(7);
  for (DType act : kActs) {
    if (!gpu.supports(sig_of(Op::kMoeRoute, act))) continue;
    for (int E : {8, 60, 128}) {
      for (int K : {1, 2, 8}) {
        for (int variant = 0; variant < 3; ++variant) {
          // 0, 1: random gates without / with renormalization; 2: ties (every gate of a token
          // equal but for one larger), broken towards the larger expert index.
          const bool norm = variant == 1;
          const std::int64_t T = 33;
          DeviceMem mg, mc;
          auto gates = randn(rng, static_cast<std::size_t>(T * E), 2.0f, act);
          if (variant == 2) {
            for (std::int64_t t = 0; t < T; ++t)
              for (int e = 0; e < E; ++e)
                gates[t * E + e] = e == static_cast<int>(t % E) ? 1.0f : 0.25f;
          }
          Act gg = mg.act(gpu, act, gates, T, E, 3), gc = mc.act(cpu, act, gates, T, E, 3);
          std::vector<std::int32_t> ec(static_cast<std::size_t>(T * K));
          std::vector<float> wc(ec.size());
          auto* eg = static_cast<std::int32_t*>(mg.raw(gpu, ec.data(), ec.size() * 4));
          auto* wg = static_cast<float*>(mg.raw(gpu, wc.data(), wc.size() * 4));
          gpu.moe_route(route_args(gg, K, norm, eg, wg, act));
          cpu.moe_route(route_args(gc, K, norm, ec.data(), wc.data(), act));
          auto eg_h = read_raw<std::int32_t>(gpu, eg, ec.size());
          auto wg_h = read_raw<float>(gpu, wg, wc.size());
          // Same experts with the same weights; the order within a token may differ.
          int set_diff = 0;
          std::vector<float> got, want;
          for (std::int64_t t = 0; t < T; ++t) {
            std::vector<std::pair<int, float>> a, b;
            for (int j = 0; j < K; ++j) {
              a.push_back({eg_h[t * K + j], wg_h[t * K + j]});
              b.push_back({ec[t * K + j], wc[t * K + j]});
            }
            std::sort(a.begin(), a.end());
            std::sort(b.begin(), b.end());
            for (int j = 0; j < K; ++j) {
              set_diff += a[j].first != b[j].first;
              got.push_back(a[j].second);
              want.push_back(b[j].second);
            }
          }
          std::ostringstream s;
          s << "moe_route " << tag(act) << " E " << E << " top_k " << K << (norm ? " norm" : "")
            << (variant == 2 ? " ties" : "");
          EXPECT_EQ(set_diff, 0) << s.str();
          EXPECT_CLOSE(s.str(), got, want, rounding_steps(act, 2));
        }
      }
    }
  }
}

// moe_route with its router (with_router, as ops::moe sends it): the backend runs the router's
// linear, then the routing. That must give exactly the bits of linear then moe_route on the same
// device (logits, experts, weights), with and without the fused input norm, for every token count
// and again on a repeat, for quantized, affine 4-bit and dense routers.
TEST(BackendOps, MoeRouteWithRouter) {
  DUT_OR_SKIP();
  (void)cpu;
  std::mt19937 rng(17);
  const WeightFormat formats[] = {{QMode::kAffine, 8, 64, DType::kBF16},
                                  {QMode::kAffine, 8, 32, DType::kF16},
                                  {QMode::kAffine, 6, 64, DType::kBF16},
                                  {QMode::kMxfp4, 4, 32, DType::kU8},
                                  {QMode::kAffine, 4, 64, DType::kBF16},
                                  {QMode::kNone, 0, 0, DType::kBF16}};
  struct Case {
    std::int64_t E, H;
    int K;
  };
  // 128 x 2048 top 8: Qwen3-30B-A3B's router; 60 x 576 top 4: odd widths (576 = 18 units).
  const Case cases[] = {{128, 2048, 8}, {60, 576, 4}};
  int ran = 0;
  for (DType act : {DType::kBF16, DType::kF16, DType::kF32}) {
    if (!gpu.supports(sig_of(Op::kMoeRoute, act))) continue;
    for (const WeightFormat& f : formats) {
      if (!gpu.supports(weight_sig(Op::kLinear, act, f))) continue;
      for (const Case& c : cases) {
        const HostMatrix h = random_matrix(rng, f, c.E, c.H);
        DeviceMem mg;
        const Matrix w = upload_matrix(gpu, mg, h);
        std::vector<float> nw(static_cast<std::size_t>(c.H));
        for (auto& v : nw) v = 0.5f + std::uniform_real_distribution<float>(0.0f, 1.0f)(rng);
        const float* nwg = mg.vec(gpu, nw);
        for (std::int64_t T : {1, 7, 64, 65}) {
          for (bool fused_norm : {false, true}) {
            for (bool renorm : {false, true}) {
              const auto src = randn(rng, static_cast<std::size_t>(T * c.H), 2.0f, act);
              const std::vector<float> zx(src.size()), zg(static_cast<std::size_t>(T * c.E));
              const std::size_t n = static_cast<std::size_t>(T * c.K);
              struct Out {
                std::vector<float> x, gates, weights;
                std::vector<std::int32_t> experts;
              };
              auto route = [&](bool together) {
                Act sa = mg.act(gpu, act, src, T, c.H), xa = mg.act(gpu, act, zx, T, c.H);
                Act ga = mg.act(gpu, act, zg, T, c.E);
                std::vector<std::int32_t> e0(n, -1);
                std::vector<float> w0(n, 0.0f);
                auto* eg = static_cast<std::int32_t*>(mg.raw(gpu, e0.data(), n * 4));
                auto* wg = static_cast<float*>(mg.raw(gpu, w0.data(), n * 4));
                LinearArgs la(fused_norm ? xa : sa, w, nullptr, ga, act);
                if (fused_norm) {
                  la.norm_weight = nwg;
                  la.norm_eps = 1e-6f;
                  la.norm_src = sa;
                }
                MoeRouteArgs r = route_args(ga, c.K, renorm, eg, wg, act);
                if (together) {
                  r.with_router = true;
                  r.router = la;
                } else {
                  gpu.linear(la);
                }
                gpu.moe_route(r);
                return Out{fused_norm ? read_act(gpu, xa) : std::vector<float>{}, read_act(gpu, ga),
                           read_raw<float>(gpu, wg, n), read_raw<std::int32_t>(gpu, eg, n)};
              };
              const Out apart = route(false), together = route(true), again = route(true);
              std::ostringstream s;
              s << "moe_route with router " << weight_sig(Op::kLinear, act, f).str() << " T " << T
                << " E " << c.E << " H " << c.H << " top_k " << c.K
                << (fused_norm ? " norm" : "") << (renorm ? " renorm" : "");
              EXPECT_EQ(together.x, apart.x) << s.str() << ": normalized x";
              EXPECT_EQ(together.gates, apart.gates) << s.str() << ": logits";
              EXPECT_EQ(together.experts, apart.experts) << s.str() << ": experts";
              EXPECT_EQ(together.weights, apart.weights) << s.str() << ": weights";
              EXPECT_EQ(again.experts, together.experts) << s.str() << ": repeated";
              EXPECT_EQ(again.weights, together.weights) << s.str() << ": repeated";
              int valid = 0;
              for (auto e : together.experts) valid += e >= 0 && e < c.E;
              EXPECT_EQ(valid, static_cast<int>(n)) << s.str() << ": expert ids";
              report(s.str(), 0, 0);
              ++ran;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(ran, 0);
}

TEST(BackendOps, MoeExperts) {
  DUT_OR_SKIP();
  std::mt19937 rng(8);
  const WeightFormat formats[] = {{QMode::kNone, 0, 0, DType::kBF16},
                                  {QMode::kNone, 0, 0, DType::kF32},
                                  {QMode::kAffine, 4, 64, DType::kBF16},
                                  {QMode::kAffine, 8, 32, DType::kBF16},
                                  {QMode::kMxfp4, 4, 32, DType::kU8}};
  struct Case {
    std::int64_t T, E, H, I;
    std::int64_t x_pad;  // x rows padded: not 16-byte aligned, so gate / up keep the GEMV
    bool skewed;         // expert 0 takes half the first choices (> 128 rows), E - 1 none
    int top_k = 2;
  };
  // T = 32769: 65,538 expert rows, past the 65,535 block rows one GPU launch can have (bf16
  // affine4 only, for time). T = 80 and 300 are prefill steps: by default on CUDA their
  // rows are grouped by expert for the matrix-unit GEMM (several tiles of one expert, an expert
  // without rows, odd expert counts and 576 / 192 widths).
  // T = 1 and 7 unpadded: decode steps whose gate and up take the matrix-unit GEMV (as one
  // launch by default; 640 = 10 groups of 64, 192 columns = 12 tiles). Qwen3-30B-A3B's expert
  // shape (H 2048, I 768, top 8; 16 of its 128 experts) and Qwen1.5-MoE's (I 1408, top 4) at
  // decode, 16-bit affine 4 only.
  const Case cases[] = {{1, 8, 256, 128, 0, false},    {7, 10, 640, 192, 0, false},
                        {1, 8, 256, 128, 4, false},    {33, 8, 256, 128, 4, false},
                        {80, 8, 256, 128, 4, false},   {300, 10, 576, 192, 0, true},
                        {300, 8, 256, 128, 0, false},  {32769, 8, 256, 128, 4, false},
                        {1, 16, 2048, 768, 0, false, 8}, {5, 16, 2048, 768, 0, false, 8},
                        {3, 12, 2048, 1408, 0, false, 4}};
  for (DType act : kActs) {
    for (const WeightFormat& f : formats) {
      const OpSignature sig = weight_sig(Op::kMoeExperts, act, f);
      if (!gpu.supports(sig)) {
        report("moe_experts SKIPPED " + sig.str(), -1, 0);
        continue;
      }
      for (const Case& c : cases) {
        const std::int64_t T = c.T, E = c.E, H = c.H, I = c.I;
        const bool big = T > 300, bf16_affine4 = act == DType::kBF16 &&
                                                 f.mode == QMode::kAffine && f.bits == 4;
        if ((big || c.skewed) && !bf16_affine4 && !(c.skewed && act == DType::kF16)) continue;
        const bool affine4_16 = act != DType::kF32 && f.mode == QMode::kAffine && f.bits == 4;
        if (H >= 2048 && !affine4_16) continue;
        const int K = c.top_k;
        HostMatrix hg = random_matrix(rng, f, I, H, E), hu = random_matrix(rng, f, I, H, E),
                   hd = random_matrix(rng, f, H, I, E);
        std::vector<std::int32_t> experts;
        std::vector<float> weights;
        std::uniform_int_distribution<int> pick(0, static_cast<int>(E) - (c.skewed ? 2 : 1));
        std::bernoulli_distribution half(0.5);
        for (std::int64_t t = 0; t < T && K > 2; ++t) {  // K distinct experts, unequal weights
          std::vector<int> ids(static_cast<std::size_t>(E));
          std::iota(ids.begin(), ids.end(), 0);
          std::shuffle(ids.begin(), ids.end(), rng);
          for (int j = 0; j < K; ++j) {
            experts.push_back(ids[static_cast<std::size_t>(j)]);
            weights.push_back(quant::round_to(act, static_cast<float>(K - j) / (K * (K + 1) / 2)));
          }
        }
        for (std::int64_t t = 0; t < T && K == 2; ++t) {
          const int a = c.skewed && half(rng) ? 0 : pick(rng);
          int b = pick(rng);
          if (b == a) b = (a + 1) % static_cast<int>(c.skewed ? E - 1 : E);
          experts.push_back(a);
          experts.push_back(b);
          const float w0 = quant::round_to(act, 0.3f + 0.4f * static_cast<float>(t % 3) / 3.0f);
          weights.push_back(w0);
          weights.push_back(quant::round_to(act, 1.0f - w0));
        }
        DeviceMem mg, mc;
        auto x = randn(rng, static_cast<std::size_t>(T * H), 1.0f, act);
        MoeExpertsArgs ag, ac;
        ag.x = mg.act(gpu, act, x, T, H, c.x_pad);
        ac.x = mc.act(cpu, act, x, T, H, c.x_pad);
        ag.gate = upload_matrix(gpu, mg, hg);
        ag.up = upload_matrix(gpu, mg, hu);
        ag.down = upload_matrix(gpu, mg, hd);
        ac.gate = upload_matrix(cpu, mc, hg);
        ac.up = upload_matrix(cpu, mc, hu);
        ac.down = upload_matrix(cpu, mc, hd);
        ag.num_experts = ac.num_experts = E;
        ag.top_k = ac.top_k = K;
        ag.experts = mg.vec(gpu, experts);
        ac.experts = experts.data();
        ag.weights = mg.vec(gpu, weights);
        ac.weights = weights.data();
        ag.out = mg.act(gpu, act, std::vector<float>(x.size()), T, H);
        ac.out = mc.act(cpu, act, std::vector<float>(x.size()), T, H);
        ag.round = ac.round = act;
        gpu.moe_experts(ag);
        cpu.moe_experts(ac);
        std::ostringstream s;
        s << "moe_experts " << sig.str() << " T " << T << " E " << E << " H " << H << " I " << I
          << " top_k " << K << (c.skewed ? " skewed" : "") << (c.x_pad ? " strided" : "");
        const auto moe_out = read_act(gpu, ag.out);
        EXPECT_CLOSE(s.str(), moe_out, read_act(cpu, ac.out), rounding_steps(act, 4));
        if (T <= 300) {
          // The same bits again: the expert grouping places rows in atomic order, which must not
          // reach the results.
          ag.out = mg.act(gpu, act, std::vector<float>(x.size()), T, H);
          gpu.moe_experts(ag);
          EXPECT_EQ(read_act(gpu, ag.out), moe_out) << s.str() << " repeated";
          // accumulate: out = round(out + the combine), exactly as moe then add
          const auto res = randn(rng, x.size(), 1.0f, act);
          ag.out = mg.act(gpu, act, res, T, H);
          ag.accumulate = true;
          gpu.moe_experts(ag);
          Act sum = mg.act(gpu, act, res, T, H), part = mg.act(gpu, act, moe_out, T, H);
          gpu.add({sum, part, sum, act});
          EXPECT_EQ(read_act(gpu, ag.out), read_act(gpu, sum)) << s.str() << " accumulating";
        }
      }
    }
  }
}

// A GPU backend never claims what it cannot run: --numerics mlx is refused on it, and a weight
// format without a kernel is answered false.
// Sampling must draw the same token as the CPU from the same logits (backend/sample_math.h), not
// just a close one: tokens, statuses and top-logprob ids are compared exactly, log-probabilities
// to fp32 accuracy. Logits are peaked (a few likely tokens over noise) with deliberate ties, so
// top-p, min-p and top-k cut inside the distribution and tie-breaking is exercised.
TEST(BackendOps, Sample) {
  DUT_OR_SKIP();
  std::mt19937 rng(11);
  for (DType act : kActs) {
    if (!gpu.supports(sig_of(Op::kSample, act))) {
      report("sample " + std::string(dtype_name(act)), -1, 0);
      continue;
    }
    for (std::int64_t vocab : {1LL, 33LL, 1000LL, 151936LL}) {
      // Rows 0-2 random with ties; row 3 has a NaN in its last logit and row 4 a +inf in its
      // middle one (the GPU's greedy rows split into parts: a part's flag must reach the row).
      const std::int64_t n_logit_rows = 5;
      std::vector<float> logits =
          randn(rng, static_cast<std::size_t>(n_logit_rows * vocab), 2.0f, act);
      logits[static_cast<std::size_t>(4 * vocab - 1)] = std::numeric_limits<float>::quiet_NaN();
      logits[static_cast<std::size_t>(4 * vocab + vocab / 2)] =
          std::numeric_limits<float>::infinity();
      for (std::int64_t r = 0; r < 3; ++r) {
        float* row = logits.data() + r * vocab;
        for (int j = 0; j < 6 && j < vocab; ++j)
          row[(j * 7919 + r) % vocab] =
              quant::round_to(act, 9.0f - static_cast<float>(j % 3));  // ties
      }
      std::vector<SampleRow> rows;
      std::vector<SampleProc> procs = {
          {0, SampleProcKind::kBias, 4.0f},
          {static_cast<std::int32_t>(vocab / 2), SampleProcKind::kRepetition, 1.3f},
          {static_cast<std::int32_t>(vocab / 2), SampleProcKind::kSubtract, 0.4f},
          {static_cast<std::int32_t>(vocab - 1), SampleProcKind::kSubtract, 0.25f},
          {static_cast<std::int32_t>(vocab - 1), SampleProcKind::kSubtract, 0.25f}};
      const std::int64_t words = (vocab + 31) / 32;
      // Mask row 0: every third token allowed; mask row 1: none.
      std::vector<std::uint32_t> masks(static_cast<std::size_t>(2 * words), 0u);
      for (std::int64_t t = 0; t < vocab; t += 3) masks[t >> 5] |= 1u << (t & 31);
      for (int i = 0; i < 96; ++i) {
        SampleRow r;
        r.logit_row = i % 3;
        const int kind = i % 8;
        r.temperature = kind == 0 ? 0.0f : (kind == 5 ? 0.3f : 1.1f);
        r.inv_temperature = r.temperature > 0 ? 1.0f / r.temperature : 1.0f;
        if (kind == 2 || kind == 7) r.top_p = kind == 2 ? 0.9f : 0.35f;
        if (kind == 3) r.log_min_p = std::log(0.05f), r.min_keep = 4;
        if (kind == 4 || kind == 7) r.top_k = kind == 4 ? 5 : 40;
        if (kind == 6)
          r.proc_begin = 0, r.proc_end = static_cast<std::int32_t>(procs.size()), r.mask_row = 0;
        r.n_top = i % 3 == 0 ? 5 : 0;
        r.logprobs = i % 5 == 4 ? 0 : 1;  // a request without logprobs: no normalizer pass
        r.seed = 1234 + i / 8;
        r.stream = i % 2;
        r.position = static_cast<std::uint64_t>(i);
        rows.push_back(r);
      }
      for (int i = 0; i < 9; ++i) {  // plain greedy without logprobs (the GPU's fast path)
        SampleRow r;
        r.logit_row = i < 6 ? i % 3 : i - 3;  // 6: NaN, 7: +inf, 8: all masked
        r.logprobs = 0;
        r.mask_row = i < 3 ? 0 : (i == 8 ? 1 : -1);
        rows.push_back(r);
      }
      auto run = [&](Backend& be, DeviceMem& m) {
        SampleArgs a;
        a.logits = m.act(be, act, logits, n_logit_rows, vocab);
        a.n = static_cast<std::int64_t>(rows.size());
        a.rows = m.vec(be, rows);
        a.procs = m.vec(be, procs);
        a.masks = m.vec(be, masks);
        a.mask_words = words;
        std::vector<float> zeros(backend::sample_scratch_bytes(a.n, vocab) / sizeof(float));
        a.scratch = m.vec(be, zeros);
        std::vector<SampleOut> none(rows.size());
        a.out = m.vec(be, none);
        be.sample(a);
        return read_raw<SampleOut>(be, a.out, rows.size());
      };
      DeviceMem mg, mc;
      const auto got = run(gpu, mg), want = run(cpu, mc);
      const std::string sig =
          "sample " + std::string(dtype_name(act)) + " vocab " + std::to_string(vocab);
      int token_mismatch = 0;
      double lp_err = 0;
      for (std::size_t i = 0; i < rows.size(); ++i) {
        EXPECT_EQ(static_cast<int>(got[i].status), static_cast<int>(want[i].status))
            << sig << " row " << i;
        if (got[i].token != want[i].token) ++token_mismatch;
        EXPECT_EQ(got[i].token, want[i].token) << sig << " row " << i << " (kind " << i % 8 << ")";
        EXPECT_EQ(got[i].n_top, want[i].n_top) << sig;
        for (int j = 0; j < want[i].n_top && j < got[i].n_top; ++j) {
          EXPECT_EQ(got[i].top_ids[j], want[i].top_ids[j]) << sig << " row " << i << " top " << j;
          lp_err = std::max(lp_err, static_cast<double>(std::fabs(got[i].top_logprobs[j] -
                                                                  want[i].top_logprobs[j])));
        }
        lp_err = std::max(lp_err, static_cast<double>(std::fabs(got[i].logprob - want[i].logprob)));
        if (!rows[i].logprobs) {
          EXPECT_EQ(got[i].logprob, 0.0f) << sig << " row " << i;
        }
      }
      report(sig + " token mismatches " + std::to_string(token_mismatch), lp_err, 1e-4);
      EXPECT_LE(lp_err, 1e-4) << sig;
    }
  }
}

TEST(BackendOps, ClaimsAndRefusals) {
  DUT_OR_SKIP();
  (void)cpu;
  EXPECT_THROW(create_backend(gpu.kind(), Numerics::kMlx), Error);
  OpSignature s = sig_of(Op::kLinear, DType::kBF16);
  s.qmode = QMode::kAffine;
  s.bits = 7;
  s.group_size = 64;
  s.weight_dtype = DType::kBF16;
  EXPECT_FALSE(gpu.supports(s));
  EXPECT_FALSE(gpu.supports(sig_of(Op::kAttention, DType::kBF16, 512)));
  EXPECT_FALSE(gpu.supports(sig_of(Op::kAdd, DType::kI32)));
}

TEST(BackendOps, CpuOnlyBuildRefusesGpu) {
  if (gpu::compiled_backend() != BackendKind::kCpu) GTEST_SKIP() << "GPU build";
  try {
    create_backend(BackendKind::kCuda);
    FAIL() << "expected unsupported";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("--device cpu"), std::string::npos) << e.what();
  }
}

}  // namespace
