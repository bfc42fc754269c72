// ops_driver: runs one CPU kernel on .npy inputs so tests/python/test_cpu_ops_mlx.py can compare
// it with live MLX. Interchange: inputs and outputs are little-endian float32 (or int32) .npy
// files; parameters are key=value arguments; `dtype=bf16|f16|f32` rounds the inputs to that
// dtype, runs the kernel in it and widens the result back to f32; `isa=scalar|avx2` picks the
// kernel path (default: the process default).
//
//   ops_driver matmul    OUT X[M,K] W[N,K] [BIAS[N]]
//   ops_driver softmax   OUT X[R,C] [MASK[R,C]]
//   ops_driver rope      OUT X[H,L,D] [FREQS[dims/2]]  dims= traditional=0|1 base= scale= offset=
//                                                       input_scale=
//   ops_driver rope_freqs OUT [LONG_FACTOR] type=default|llama3|su|yarn dims= base= factor=
//                        low_freq_factor= high_freq_factor= original_max= max_pos= beta_fast=
//                        beta_slow= mscale= mscale_all_dim=   (prints input_scale=<float>)
//   ops_driver attention OUT Q[H,L,D] K[Hkv,C,D] V[Hkv,C,D] kv_len= offset= window= scale=
//                        causal=0|1
//   ops_driver act       OUT X kind=silu|gelu|gelu_tanh
//   ops_driver gated     OUT GATE UP kind=silu|gelu|gelu_tanh
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "backend/cpu/activations.h"
#include "backend/cpu/attention.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/rope.h"
#include "backend/cpu/softmax.h"
#include "core/error.h"
#include "io/npy.h"

using namespace mlxcel;
using namespace mlxcel::cpu;
using mlxcel::io::NpyArray;

namespace {

struct Args {
  std::string op, out;
  std::vector<std::string> inputs;
  std::map<std::string, std::string> kv;
  std::string get(const std::string& k, const std::string& def) const {
    auto it = kv.find(k);
    return it == kv.end() ? def : it->second;
  }
  float f(const std::string& k, float def) const { return std::stof(get(k, std::to_string(def))); }
  long i(const std::string& k, long def) const { return std::stol(get(k, std::to_string(def))); }
};

DType parse_dt(const std::string& s) {
  if (s == "f32") return DType::kF32;
  if (s == "bf16") return DType::kBF16;
  if (s == "f16") return DType::kF16;
  throw_error(ErrorCategory::kBadInput, "ops_driver: dtype " + s + " (use f32, bf16, f16)");
}

std::vector<std::uint8_t> to_dtype(const std::vector<float>& v, DType t) {
  std::vector<std::uint8_t> out(v.size() * dtype_size(t));
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (t == DType::kF32) reinterpret_cast<float*>(out.data())[i] = v[i];
    else if (t == DType::kBF16) reinterpret_cast<bf16*>(out.data())[i] = bf16(v[i]);
    else reinterpret_cast<f16*>(out.data())[i] = f16(v[i]);
  }
  return out;
}

std::vector<float> from_dtype(const std::vector<std::uint8_t>& b, DType t) {
  const std::size_t n = b.size() / dtype_size(t);
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (t == DType::kF32) out[i] = reinterpret_cast<const float*>(b.data())[i];
    else if (t == DType::kBF16) out[i] = reinterpret_cast<const bf16*>(b.data())[i].to_float();
    else out[i] = reinterpret_cast<const f16*>(b.data())[i].to_float();
  }
  return out;
}

ActKind parse_kind(const std::string& s) {
  if (s == "silu") return ActKind::kSilu;
  if (s == "gelu") return ActKind::kGelu;
  if (s == "gelu_tanh") return ActKind::kGeluTanh;
  throw_error(ErrorCategory::kBadInput, "ops_driver: kind " + s);
}

int run(const Args& a) {
  const DType t = parse_dt(a.get("dtype", "f32"));
  CpuIsa isa = active_isa();
  if (a.kv.count("isa")) isa = resolve_isa(a.get("isa", "").c_str(), cpu_features());
  std::vector<NpyArray> in;
  for (const auto& p : a.inputs) in.push_back(io::npy_load(p));
  auto need = [&](std::size_t n) {
    MLXCEL_CHECK(in.size() >= n, ErrorCategory::kBadInput, "ops_driver " + a.op + ": needs " +
                                                               std::to_string(n) + " inputs");
  };

  if (a.op == "matmul") {
    need(2);
    const std::int64_t m = in[0].shape[0], k = in[0].shape[1], n = in[1].shape[0];
    auto x = to_dtype(in[0].f32, t), w = to_dtype(in[1].f32, t);
    std::vector<std::uint8_t> b = in.size() > 2 ? to_dtype(in[2].f32, t) : std::vector<std::uint8_t>();
    std::vector<std::uint8_t> y(static_cast<std::size_t>(m * n) * dtype_size(t));
    MatmulArgs ma;
    ma.x = x.data(); ma.x_dtype = t; ma.w = w.data(); ma.w_dtype = t;
    ma.bias = b.empty() ? nullptr : b.data(); ma.y = y.data(); ma.y_dtype = t;
    ma.m = m; ma.n = n; ma.k = k;
    matmul(ma, isa);
    io::npy_save_f32(a.out, from_dtype(y, t), {m, n});
  } else if (a.op == "softmax") {
    need(1);
    const std::int64_t r = in[0].shape[0], c = in[0].shape[1];
    auto x = to_dtype(in[0].f32, t);
    std::vector<std::uint8_t> y(x.size());
    SoftmaxArgs sa;
    sa.x = x.data(); sa.y = y.data(); sa.dtype = t; sa.rows = r; sa.cols = c;
    if (in.size() > 1) { sa.mask = in[1].f32.data(); sa.mask_row_stride = c; }
    softmax(sa, isa);
    io::npy_save_f32(a.out, from_dtype(y, t), {r, c});
  } else if (a.op == "rope") {
    need(1);
    const auto& s = in[0].shape;
    auto x = to_dtype(in[0].f32, t);
    std::vector<std::uint8_t> y(x.size());
    RopeArgs ra;
    ra.x = x.data(); ra.y = y.data(); ra.dtype = t;
    ra.n_heads = s[0]; ra.seq_len = s[1]; ra.head_dim = s[2];
    ra.dims = a.i("dims", s[2]); ra.traditional = a.i("traditional", 0) != 0;
    ra.base = a.f("base", 10000.0f); ra.scale = a.f("scale", 1.0f); ra.offset = a.i("offset", 0);
    ra.input_scale = a.f("input_scale", 1.0f);
    if (in.size() > 1) ra.freqs = in[1].f32.data();
    rope(ra, isa);
    io::npy_save_f32(a.out, from_dtype(y, t), s);
  } else if (a.op == "rope_freqs") {
    const std::string type = a.get("type", "default");
    const std::int64_t dims = a.i("dims", 64);
    const float base = a.f("base", 10000.0f);
    std::vector<float> f;
    float input_scale = 1.0f;
    if (type == "default") {
      f = rope_freqs_default(dims, base);
    } else if (type == "llama3") {
      f = rope_freqs_llama3(dims, base, a.f("factor", 8), a.f("low_freq_factor", 1),
                            a.f("high_freq_factor", 4), a.f("original_max", 8192));
    } else if (type == "su") {
      need(1);
      f = rope_freqs_su(dims, base, in[0].f32);
      input_scale = rope_su_mscale(a.f("max_pos", 131072), a.f("original_max", 4096));
    } else if (type == "yarn") {
      f = rope_freqs_yarn(dims, base, a.f("factor", 4), a.f("original_max", 4096),
                          a.f("beta_fast", 32), a.f("beta_slow", 1));
      input_scale = rope_yarn_mscale(a.f("factor", 4), a.f("mscale", 1), a.f("mscale_all_dim", 0));
    } else {
      throw_error(ErrorCategory::kBadInput, "ops_driver: rope type " + type);
    }
    std::printf("input_scale=%.9g\n", static_cast<double>(input_scale));
    io::npy_save_f32(a.out, f, {static_cast<std::int64_t>(f.size())});
  } else if (a.op == "attention") {
    need(3);
    const auto& qs = in[0].shape;
    const auto& ks = in[1].shape;
    auto q = to_dtype(in[0].f32, t), k = to_dtype(in[1].f32, t), v = to_dtype(in[2].f32, t);
    std::vector<std::uint8_t> o(q.size());
    AttentionArgs aa;
    aa.q = q.data(); aa.k = k.data(); aa.v = v.data(); aa.out = o.data(); aa.dtype = t;
    aa.n_heads = qs[0]; aa.q_len = qs[1]; aa.head_dim = qs[2];
    aa.n_kv_heads = ks[0];
    aa.kv_len = a.i("kv_len", ks[1]);
    aa.k_head_stride = aa.v_head_stride = ks[1] * ks[2];  // capacity ks[1] >= kv_len
    aa.k_row_stride = aa.v_row_stride = ks[2];
    aa.q_offset = a.i("offset", aa.kv_len - aa.q_len);
    aa.window = a.i("window", 0);
    aa.causal = a.i("causal", 1) != 0;
    aa.scale = a.f("scale", 1.0f);
    attention(aa, isa);
    io::npy_save_f32(a.out, from_dtype(o, t), qs);
  } else if (a.op == "act" || a.op == "gated") {
    need(a.op == "act" ? 1 : 2);
    const ActKind kind = parse_kind(a.get("kind", "silu"));
    auto x = to_dtype(in[0].f32, t);
    std::vector<std::uint8_t> y(x.size());
    if (a.op == "act") {
      activation(kind, x.data(), y.data(), t, in[0].numel(), isa);
    } else {
      auto u = to_dtype(in[1].f32, t);
      gated_activation(kind, x.data(), u.data(), y.data(), t, in[0].numel(), isa);
    }
    io::npy_save_f32(a.out, from_dtype(y, t), in[0].shape);
  } else {
    throw_error(ErrorCategory::kBadInput, "ops_driver: unknown op " + a.op);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: ops_driver OP OUT.npy [IN.npy ...] [key=value ...]\n");
    return 2;
  }
  Args a;
  a.op = argv[1];
  a.out = argv[2];
  for (int i = 3; i < argc; ++i) {
    std::string s = argv[i];
    auto eq = s.find('=');
    if (eq != std::string::npos && s.find(".npy") == std::string::npos) {
      a.kv[s.substr(0, eq)] = s.substr(eq + 1);
    } else {
      a.inputs.push_back(s);
    }
  }
  try {
    return run(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ops_driver: %s\n", e.what());
    return 1;
  }
}
