// mlxcel_quant_driver OP IN OUT [key=value ...]
//   quantize    IN{w[,global_scale]}                      -> OUT{weight,scales[,biases]}
//   dequantize  IN{weight,scales[,biases][,global_scale]}  -> OUT{w}           (dtype=F32|F16|BF16)
//   qmm         IN{x,weight,scales[,biases]}               -> OUT{y}           (transpose=0|1)
//   gather_qmm  IN{x,weight,scales[,biases][,lhs_indices][,rhs_indices]} -> OUT{y} (transpose=0|1)
//   embed       IN{ids,h,weight,scales[,biases]}           -> OUT{emb,logits}
//   convert     IN{weight,scales[,biases]}                 -> OUT{weight,scales[,biases],w} (to_mode= to_bits= to_gs=)
//   fp8         IN{weight,scale_inv}                       -> OUT{w,weight,scales} (block=128)
//   awq         IN{qweight,scales[,qzeros]}                -> OUT{weight,scales,biases} (gs=)
//   qmm_cpu     IN{x,weight,scales[,biases]}               -> OUT{y}  the CPU backend's
//               quantized linear (transpose=True): numerics=fast|mlx isa=scalar|avx2; y in x's dtype
//   dump        DIR OUT: every tensor of the checkpoint, as loaded by mlxcel
// Quantization parameters: mode= bits= gs= (unset: the mode's defaults).
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "backend/cpu/qmatmul.h"
#include "backend/cpu/mlx_matmul.h"
#include "core/error.h"
#include "io/quant_plan.h"
#include "io/safetensors.h"
#include "quant/capability.h"
#include "quant/fp8_block.h"
#include "quant/qmm.h"
#include "quant/quantize.h"

using namespace mlxcel;

namespace {

std::map<std::string, std::string> kv_args(int argc, char** argv, int first) {
  std::map<std::string, std::string> kv;
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    auto eq = a.find('=');
    if (eq != std::string::npos) kv[a.substr(0, eq)] = a.substr(eq + 1);
  }
  return kv;
}

QuantParams params(const std::map<std::string, std::string>& kv, const std::string& prefix = "") {
  QuantMode m = QuantMode::kAffine;
  auto it = kv.find(prefix + "mode");
  if (it != kv.end() && !parse_quant_mode(it->second, &m)) throw_error(ErrorCategory::kBadInput, "bad mode");
  int bits = kv.count(prefix + "bits") ? std::stoi(kv.at(prefix + "bits")) : 0;
  int gs = kv.count(prefix + "gs") ? std::stoi(kv.at(prefix + "gs")) : 0;
  return with_defaults(m, bits, gs);
}

std::optional<float> global_scale(const SafetensorsFile& f) {
  if (!f.has("global_scale")) return std::nullopt;
  return f.tensor("global_scale").to_f32()[0];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: mlxcel_quant_driver OP IN OUT [key=value ...]\n");
    return 2;
  }
  const std::string op = argv[1], in = argv[2], out = argv[3];
  const auto kv = kv_args(argc, argv, 4);
  try {
    std::vector<std::pair<std::string, Tensor>> res;
    if (op == "dump") {
      Checkpoint c = Checkpoint::open(in);
      for (const auto& n : c.names()) res.emplace_back(n, c.tensor(n));
      write_safetensors(out, res);
      return 0;
    }
    auto f = SafetensorsFile::open(in);
    const QuantParams p = params(kv);
    const bool transpose = !kv.count("transpose") || kv.at("transpose") != "0";
    Tensor biases;
    if (f->has("biases")) biases = f->tensor("biases");
    const Tensor* bp = biases.defined() ? &biases : nullptr;
    if (op == "quantize") {
      QuantizedTensor q = quantize(f->tensor("w"), p, global_scale(*f));
      res = {{"weight", q.weight}, {"scales", q.scales}};
      if (q.biases.defined()) res.emplace_back("biases", q.biases);
    } else if (op == "dequantize") {
      std::optional<DType> dt;
      if (kv.count("dtype")) {
        DType t;
        if (!parse_dtype(kv.at("dtype"), &t)) throw_error(ErrorCategory::kBadInput, "bad dtype");
        dt = t;
      }
      res = {{"w", dequantize(f->tensor("weight"), f->tensor("scales"), bp, p, dt, global_scale(*f))}};
    } else if (op == "qmm") {
      res = {{"y", quantized_matmul(f->tensor("x"), f->tensor("weight"), f->tensor("scales"), bp, transpose, p)}};
    } else if (op == "qmm_cpu") {
      Tensor x = f->tensor("x"), w = f->tensor("weight").contiguous(), s = f->tensor("scales").contiguous();
      if (biases.defined()) biases = biases.contiguous();
      const std::int64_t k = x.dim(-1), m = x.numel() / k, n = w.dim(0);
      cpu::QWeight q;
      q.w = static_cast<const std::uint32_t*>(w.raw());
      q.scales = s.raw();
      q.scales_dtype = s.dtype();
      q.biases = biases.defined() ? biases.raw() : nullptr;
      q.mode = static_cast<cpu::QMode>(p.mode);
      q.bits = p.bits;
      q.group_size = p.group_size;
      q.n = n;
      q.k = k;
      const cpu::CpuIsa isa = kv.count("isa") ? cpu::resolve_isa(kv.at("isa").c_str(), cpu::cpu_features())
                                              : cpu::active_isa();
      std::vector<float> x32 = x.contiguous().to_f32(), y(static_cast<std::size_t>(m * n));
      if (kv.count("numerics") && kv.at("numerics") == "mlx") cpu::qmatmul_mlx(q, x32.data(), m, x.dtype(), y.data(), isa);
      else cpu::qmatmul(q, x32.data(), m, nullptr, y.data(), isa);
      Shape ys = x.shape();
      ys.back() = n;
      Tensor yt = Tensor::empty(x.dtype(), ys);
      for (std::int64_t i = 0; i < m * n; ++i) quant::store_float(yt.raw(), x.dtype(), i, y[static_cast<std::size_t>(i)]);
      res = {{"y", yt}};
    } else if (op == "gather_qmm") {
      Tensor l, r;
      if (f->has("lhs_indices")) l = f->tensor("lhs_indices");
      if (f->has("rhs_indices")) r = f->tensor("rhs_indices");
      res = {{"y", gather_qmm(f->tensor("x"), f->tensor("weight"), f->tensor("scales"), bp,
                              l.defined() ? &l : nullptr, r.defined() ? &r : nullptr, transpose, p)}};
    } else if (op == "embed") {
      res = {{"emb", quantized_embedding(f->tensor("ids"), f->tensor("weight"), f->tensor("scales"), bp, p)},
             {"logits", as_linear(f->tensor("h"), f->tensor("weight"), f->tensor("scales"), bp, p)}};
    } else if (op == "convert") {
      const QuantParams to = params(kv, "to_");
      QuantizedTensor q = convert_weight(f->tensor("weight"), f->tensor("scales"), bp, p, to);
      res = {{"weight", q.weight}, {"scales", q.scales}};
      if (q.biases.defined()) res.emplace_back("biases", q.biases);
      res.emplace_back("w", dequantize(q.weight, q.scales, q.biases.defined() ? &q.biases : nullptr, to, DType::kF32));
    } else if (op == "fp8") {
      const int block = kv.count("block") ? std::stoi(kv.at("block")) : 128;
      Tensor w = f->tensor("weight");
      if (w.dtype() == DType::kU8) w = Tensor(w.buffer(), DType::kF8E4M3, w.shape(), w.offset_bytes());
      const Fp8Block b{block, block};
      QuantizedTensor q = requantize_fp8_block_to_mxfp8(w, f->tensor("scale_inv"), b);
      res = {{"w", dequantize_fp8_block(w, f->tensor("scale_inv"), b, DType::kBF16)},
             {"w32", dequantize_fp8_block(w, f->tensor("scale_inv"), b, DType::kF32)},
             {"weight", q.weight},
             {"scales", q.scales}};
    } else if (op == "awq") {
      Tensor qz;
      if (f->has("qzeros")) qz = f->tensor("qzeros");
      QuantizedTensor q = repack_awq(f->tensor("qweight"), f->tensor("scales"), qz.defined() ? &qz : nullptr,
                                     p.group_size, "awq");
      res = {{"weight", q.weight}, {"scales", q.scales}, {"biases", q.biases}};
    } else {
      std::fprintf(stderr, "unknown op %s\n", op.c_str());
      return 2;
    }
    write_safetensors(out, res);
  } catch (const Error& e) {
    std::fprintf(stderr, "error (%s): %s\n", std::string(category_name(e.category())).c_str(), e.what());
    return 3;
  }
  return 0;
}
