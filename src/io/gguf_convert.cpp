#include "io/gguf_convert.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/tensor.h"
#include "io/gguf.h"
#include "io/gguf_tokenizer.h"
#include "io/safetensors.h"
#include "quant/quantize.h"

namespace mlxcel::gguf {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int kGroupSize = 32;  // every exactly-mapped ggml type has blocks of 32

struct Arch {
  const char* gguf_name;
  const char* model_type;
  const char* hf_class;
  bool permute_qk;  // llama.cpp's LlamaModel.permute was applied to q/k rows
};

const std::vector<Arch>& archs() {
  static const std::vector<Arch> kArchs = {
      {"llama", "llama", "LlamaForCausalLM", true},
      {"qwen2", "qwen2", "Qwen2ForCausalLM", false},
      {"qwen3", "qwen3", "Qwen3ForCausalLM", false},
  };
  return kArchs;
}

// GGUF block tensor suffix -> MLX module path inside model.layers.N.
const std::map<std::string, std::string>& block_names() {
  static const std::map<std::string, std::string> kNames = {
      {"attn_norm", "input_layernorm"},    {"ffn_norm", "post_attention_layernorm"},
      {"attn_q", "self_attn.q_proj"},      {"attn_k", "self_attn.k_proj"},
      {"attn_v", "self_attn.v_proj"},      {"attn_output", "self_attn.o_proj"},
      {"attn_q_norm", "self_attn.q_norm"}, {"attn_k_norm", "self_attn.k_norm"},
      {"ffn_gate", "mlp.gate_proj"},       {"ffn_up", "mlp.up_proj"},
      {"ffn_down", "mlp.down_proj"},
  };
  return kNames;
}

// Returns the MLX module path ("model.layers.3.mlp.up_proj") and the parameter ("weight"/"bias"),
// or throws naming the tensor.
std::pair<std::string, std::string> mlx_name(const std::string& file, const std::string& name) {
  const auto dot = name.rfind('.');
  const std::string param = dot == std::string::npos ? "" : name.substr(dot + 1);
  const std::string base = dot == std::string::npos ? name : name.substr(0, dot);
  if (param != "weight" && param != "bias")
    throw_error(ErrorCategory::kUnsupported,
                file + ": tensor " + name + " has no MLX counterpart (unknown parameter)");
  if (base == "token_embd") return {"model.embed_tokens", param};
  if (base == "output_norm") return {"model.norm", param};
  if (base == "output") return {"lm_head", param};
  if (base.rfind("blk.", 0) == 0) {
    const auto d2 = base.find('.', 4);
    if (d2 != std::string::npos) {
      const std::string layer = base.substr(4, d2 - 4);
      const std::string part = base.substr(d2 + 1);
      const bool digits = !layer.empty() && std::all_of(layer.begin(), layer.end(), [](char c) {
        return c >= '0' && c <= '9';
      });
      auto it = block_names().find(part);
      if (digits && it != block_names().end())
        return {"model.layers." + layer + "." + it->second, param};
    }
  }
  if (base == "rope_freqs")
    throw_error(ErrorCategory::kUnsupported,
                file + ": tensor rope_freqs (Llama 3 RoPE scaling) is not supported yet");
  throw_error(ErrorCategory::kUnsupported,
              file + ": tensor " + name + " has no MLX counterpart in this converter");
}

float half_at(const std::uint8_t* p) {
  std::uint16_t b;
  std::memcpy(&b, p, 2);
  return f16::from_bits(b).to_float();
}
std::uint16_t half_bits_at(const std::uint8_t* p) {
  std::uint16_t b;
  std::memcpy(&b, p, 2);
  return b;
}

// One ggml block of 32 decoded to unsigned levels q and the affine pair with x = d*q + bias.
struct Block {
  std::uint8_t q[kGroupSize];
  float scale;         // exact value of the scale in fp32
  bool scale_is_half;  // the scale is a stored fp16 (d): copy its bits
  std::uint16_t d_bits;
  float bias;         // exact value of the bias in fp32
  bool bias_is_half;  // bias stored as an fp16 (Q4_1/Q5_1 m): copy its bits
  std::uint16_t bias_bits;
};

// Q4_K / Q5_K 6-bit sub-block scale and min j (ggml's get_scale_min_k4): 8 pairs packed in 12
// bytes, the low 6 bits of bytes 0-7 for j < 4, nibbles of bytes 8-11 plus the top bits of
// bytes 0-7 for j >= 4.
void scale_min_k4(int j, const std::uint8_t* s, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// A Q4_K / Q5_K super-block (256 elements) as 8 affine groups of 32: x = (d*sc)*q - dmin*m.
// Both products are exact in fp32 (11-bit fp16 mantissa times a 6-bit integer), so with float32
// scales the mapping is exact; float16 rounds d*sc and dmin*m.
void decode_kblock(TensorType t, const std::uint8_t* b, Block* out) {
  const float d = half_at(b), dmin = half_at(b + 2);
  const std::uint8_t* scales = b + 4;
  const std::uint8_t* qh = t == TensorType::kQ5_K ? b + 16 : nullptr;
  const std::uint8_t* qs = t == TensorType::kQ5_K ? b + 48 : b + 16;
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    scale_min_k4(j, scales, &sc, &m);
    Block& o = out[j];
    o.scale = d * static_cast<float>(sc);
    o.scale_is_half = false;
    o.bias = -(dmin * static_cast<float>(m));
    o.bias_is_half = false;
    // Sub-blocks 2c and 2c+1 are the low and high nibbles of qs[32c .. 32c+32).
    const std::uint8_t* q = qs + 32 * (j / 2);
    for (int l = 0; l < 32; ++l) {
      std::uint8_t v = (j % 2 == 0) ? (q[l] & 0x0F) : (q[l] >> 4);
      if (qh) v = static_cast<std::uint8_t>(v | (((qh[l] >> j) & 1) << 4));
      o.q[l] = v;
    }
  }
}

// Q6_K (256 elements, 16 int8 scales of 16 elements each) dequantized to fp32 as ggml does.
void dequant_q6_k(const std::uint8_t* b, float* y) {
  const std::uint8_t* ql = b;
  const std::uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const std::int8_t*>(b + 192);
  const float d = half_at(b + 208);
  for (int e = 0; e < 256; ++e) {
    const int r = e / 32, l = e % 32, c = r / 4, s = r % 4;
    const std::uint8_t lo = ql[64 * c + (s % 2) * 32 + l];
    const int low = s < 2 ? (lo & 0x0F) : (lo >> 4);
    const int high = (qh[32 * c + l] >> (2 * s)) & 3;
    y[e] = d * static_cast<float>(sc[e / 16]) * static_cast<float>((low | (high << 4)) - 32);
  }
}

int exact_bits(TensorType t) {
  switch (t) {
    case TensorType::kQ4_0:
    case TensorType::kQ4_1:
      return 4;
    case TensorType::kQ5_0:
    case TensorType::kQ5_1:
      return 5;
    case TensorType::kQ8_0:
      return 8;
    case TensorType::kQ4_K:
      return 4;
    case TensorType::kQ5_K:
      return 5;
    default:
      return 0;
  }
}

void decode_block(TensorType t, const std::uint8_t* b, Block& o) {
  o.d_bits = half_bits_at(b);
  const float d = half_at(b);
  o.scale = d;
  o.scale_is_half = true;
  o.bias_is_half = false;
  switch (t) {
    case TensorType::kQ4_0:  // d, qs[16]: element j is the low nibble of qs[j], j+16 the high one
      for (int j = 0; j < 16; ++j) {
        o.q[j] = b[2 + j] & 0x0F;
        o.q[j + 16] = b[2 + j] >> 4;
      }
      o.bias = -8.0f * d;
      break;
    case TensorType::kQ4_1:  // d, m, qs[16]
      for (int j = 0; j < 16; ++j) {
        o.q[j] = b[4 + j] & 0x0F;
        o.q[j + 16] = b[4 + j] >> 4;
      }
      o.bias_is_half = true;
      o.bias_bits = half_bits_at(b + 2);
      o.bias = half_at(b + 2);
      break;
    case TensorType::kQ5_0: {  // d, qh (u32: bit j is element j's fifth bit), qs[16]
      std::uint32_t qh;
      std::memcpy(&qh, b + 2, 4);
      for (int j = 0; j < 16; ++j) {
        o.q[j] = static_cast<std::uint8_t>((b[6 + j] & 0x0F) | (((qh >> j) & 1u) << 4));
        o.q[j + 16] = static_cast<std::uint8_t>((b[6 + j] >> 4) | (((qh >> (j + 16)) & 1u) << 4));
      }
      o.bias = -16.0f * d;
      break;
    }
    case TensorType::kQ5_1: {  // d, m, qh, qs[16]
      std::uint32_t qh;
      std::memcpy(&qh, b + 4, 4);
      for (int j = 0; j < 16; ++j) {
        o.q[j] = static_cast<std::uint8_t>((b[8 + j] & 0x0F) | (((qh >> j) & 1u) << 4));
        o.q[j + 16] = static_cast<std::uint8_t>((b[8 + j] >> 4) | (((qh >> (j + 16)) & 1u) << 4));
      }
      o.bias_is_half = true;
      o.bias_bits = half_bits_at(b + 2);
      o.bias = half_at(b + 2);
      break;
    }
    case TensorType::kQ8_0:  // d, qs[32] as int8: level q+128 with bias -128d
      for (int j = 0; j < 32; ++j)
        o.q[j] = static_cast<std::uint8_t>(static_cast<std::int8_t>(b[2 + j]) + 128);
      o.bias = -128.0f * d;
      break;
    default:
      break;
  }
}

// MLX affine packing (MLX_FORMATS.md §1.2): element j of a row occupies stream bits
// [j*bits, (j+1)*bits), LSB first; a group of 32 fills exactly `bits` words.
void pack_group(const std::uint8_t* q, int bits, std::uint32_t* out) {
  for (int w = 0; w < bits; ++w) out[w] = 0;
  for (int j = 0; j < kGroupSize; ++j) {
    const int pos = j * bits, word = pos / 32, sh = pos % 32;
    out[word] |= static_cast<std::uint32_t>(q[j]) << sh;
    if (sh + bits > 32) out[word + 1] |= static_cast<std::uint32_t>(q[j]) >> (32 - sh);
  }
}

// Stores fp32 `v` in `dt` (F32/F16/BF16) and says whether the stored value equals v.
float round_stored(DType dt, float v) {
  return dt == DType::kF32 ? v : dt == DType::kF16 ? f16(v).to_float() : bf16(v).to_float();
}

bool store(DType dt, float v, void* dst) {
  if (dt == DType::kF32) {
    std::memcpy(dst, &v, 4);
    return true;
  }
  if (dt == DType::kF16) {
    const f16 h(v);
    std::memcpy(dst, &h.bits, 2);
    return h.to_float() == v;
  }
  const bf16 h(v);
  std::memcpy(dst, &h.bits, 2);
  return h.to_float() == v;
}

float dense_at(TensorType t, const std::uint8_t* p, std::uint64_t i) {
  switch (t) {
    case TensorType::kF32: {
      float v;
      std::memcpy(&v, p + 4 * i, 4);
      return v;
    }
    case TensorType::kF16:
      return half_at(p + 2 * i);
    case TensorType::kBF16: {
      std::uint16_t b;
      std::memcpy(&b, p + 2 * i, 2);
      return bf16::from_bits(b).to_float();
    }
    default:
      return 0;
  }
}

// Source row for output row r when undoing llama.cpp's LlamaModel.permute, which maps Hugging
// Face row (head h, half s, index i) of a rotary projection to GGUF row (h, i, s).
std::int64_t unpermuted_row(std::int64_t r, std::int64_t head_dim) {
  const std::int64_t h = r / head_dim, rem = r % head_dim, half = head_dim / 2;
  return h * head_dim + 2 * (rem % half) + rem / half;
}

// An f32 metadata value as the shortest decimal that reads back as the same float (1e-05, not
// 9.999999747378752e-06), as the Hugging Face config the GGUF was made from wrote it.
double metadata_number(const File& f, const std::string& key, double fallback) {
  const double v = f.get_float_or(key, fallback);
  const Value* m = f.find(key);
  if (!m || m->type != ValueType::kF32) return v;
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, static_cast<float>(v));
  return std::strtod(std::string(buf, r.ptr).c_str(), nullptr);
}

std::string dtype_config_name(DType t) {
  return t == DType::kBF16 ? "bfloat16" : t == DType::kF32 ? "float32" : "float16";
}

}  // namespace

std::vector<std::string> supported_architectures() {
  std::vector<std::string> out;
  for (const auto& a : archs()) out.push_back(a.gguf_name);
  return out;
}

ConvertReport convert_gguf(const std::string& gguf_path, const std::string& out_dir,
                           const ConvertOptions& opt) {
  MLXCEL_CHECK(opt.dtype == DType::kF16 || opt.dtype == DType::kBF16 || opt.dtype == DType::kF32,
               ErrorCategory::kBadInput, "convert: --dtype must be float16, bfloat16 or float32");
  const auto f = File::open(gguf_path);
  const std::string& path = f->path();
  const std::string arch_name = f->get_string("general.architecture");
  const Arch* arch = nullptr;
  for (const auto& a : archs())
    if (arch_name == a.gguf_name) arch = &a;
  if (!arch) {
    std::string list;
    for (const auto& n : supported_architectures()) list += (list.empty() ? "" : ", ") + n;
    throw_error(ErrorCategory::kUnsupported,
                path + ": architecture \"" + arch_name +
                    "\" is not supported by the GGUF converter (supported: " + list + ")");
  }
  const std::string p = arch_name + ".";

  // Hyperparameters (llama.cpp's LLM_KV names).
  const std::int64_t n_layers = static_cast<std::int64_t>(f->get_uint(p + "block_count"));
  const std::int64_t hidden = static_cast<std::int64_t>(f->get_uint(p + "embedding_length"));
  const std::int64_t ff = static_cast<std::int64_t>(f->get_uint(p + "feed_forward_length"));
  const std::int64_t n_heads = static_cast<std::int64_t>(f->get_uint(p + "attention.head_count"));
  const std::int64_t n_kv =
      static_cast<std::int64_t>(f->get_uint_or(p + "attention.head_count_kv", n_heads));
  if (n_heads <= 0 || n_kv <= 0 || n_heads % n_kv != 0 || hidden <= 0 || n_layers <= 0 || ff <= 0)
    throw_error(ErrorCategory::kBadInput, path + ": inconsistent hyperparameters (heads " +
                                              std::to_string(n_heads) + ", kv heads " +
                                              std::to_string(n_kv) + ", hidden " +
                                              std::to_string(hidden) + ")");
  const std::int64_t head_dim =
      static_cast<std::int64_t>(f->get_uint_or(p + "attention.key_length", hidden / n_heads));
  if (head_dim <= 0 || head_dim % 2 != 0)
    throw_error(ErrorCategory::kBadInput,
                path + ": head dimension " + std::to_string(head_dim) + " is not even");
  const std::int64_t ctx = static_cast<std::int64_t>(f->get_uint_or(p + "context_length", 0));
  if (const Value* rs = f->find(p + "rope.scaling.type"); rs && rs->s != "none")
    throw_error(ErrorCategory::kUnsupported, path + ": RoPE scaling \"" + rs->s + "\" (" + p +
                                                 "rope.scaling.type) is not supported yet");

  TokenizerFiles tok = build_tokenizer(*f, ctx);
  const std::int64_t n_tokens =
      static_cast<std::int64_t>(f->get_string_array("tokenizer.ggml.tokens").size());

  const TensorInfo* embd = f->find_tensor("token_embd.weight");
  if (!embd) throw_error(ErrorCategory::kBadInput, path + ": tensor token_embd.weight is missing");
  if (embd->dims.size() != 2 || static_cast<std::int64_t>(embd->dims[0]) != hidden)
    throw_error(ErrorCategory::kBadInput,
                path + ": token_embd.weight is not [vocab, " + std::to_string(hidden) + "]");
  // The embedding's rows are the model's vocabulary (llama.cpp keeps padded rows); a tokenizer
  // with more tokens than rows could emit ids the model cannot embed.
  const std::int64_t vocab = static_cast<std::int64_t>(embd->dims[1]);
  if (n_tokens > vocab)
    throw_error(ErrorCategory::kBadInput,
                path + ": the vocabulary has " + std::to_string(n_tokens) +
                    " tokens but token_embd.weight only " + std::to_string(vocab) + " rows");
  const bool tied = f->find_tensor("output.weight") == nullptr;

  ConvertReport rep;
  rep.architecture = arch_name;
  rep.model_type = arch->model_type;
  std::vector<std::pair<std::string, Tensor>> out;
  std::map<std::string, int> module_bits;  // quantized module path -> bits
  const DType dt = opt.dtype;

  for (const TensorInfo& t : f->tensors()) {
    auto [module, param] = mlx_name(path, t.name);
    const std::string full = module + "." + param;
    const bool is_q = module.size() > 7 && module.compare(module.size() - 7, 7, ".q_proj") == 0;
    const bool is_k = module.size() > 7 && module.compare(module.size() - 7, 7, ".k_proj") == 0;
    const bool permute = arch->permute_qk && (is_q || is_k);
    const std::int64_t row_len = t.dims.size() == 1 ? 1 : static_cast<std::int64_t>(t.dims[0]);
    const std::int64_t n_rows = static_cast<std::int64_t>(t.n_elements) / row_len;
    if (permute && n_rows != (is_q ? n_heads : n_kv) * head_dim)
      throw_error(ErrorCategory::kBadInput, path + ": tensor " + t.name + " has " +
                                                std::to_string(n_rows) + " rows, expected " +
                                                std::to_string((is_q ? n_heads : n_kv) * head_dim));
    auto src_row = [&](std::int64_t r) { return permute ? unpermuted_row(r, head_dim) : r; };
    const Shape shape = t.shape();
    TensorReport tr{t.name, full, tensor_type_name(t.type), "", 0};

    const int bits = exact_bits(t.type);
    if (bits > 0) {
      if (t.dims.size() < 2)
        throw_error(
            ErrorCategory::kUnsupported,
            path + ": tensor " + t.name + " is a quantized vector; MLX quantizes matrices only");
      const TypeTraits* traits = type_traits(static_cast<std::uint32_t>(t.type));
      const std::int64_t groups = row_len / kGroupSize;
      Shape wshape = shape, sshape = shape;
      wshape.back() = row_len * bits / 32;
      sshape.back() = groups;
      Tensor w = Tensor::empty(DType::kU32, wshape);
      Tensor s = Tensor::empty(dt, sshape);
      Tensor b = Tensor::empty(dt, sshape);
      auto* wp = w.data<std::uint32_t>();
      auto* sp = static_cast<std::uint8_t*>(s.raw());
      auto* bp = static_cast<std::uint8_t*>(b.raw());
      bool exact = true;
      const std::size_t es = dtype_size(dt);
      const bool k_quant = t.type == TensorType::kQ4_K || t.type == TensorType::kQ5_K;
      const std::int64_t per_block = traits->block_size / kGroupSize;
      const std::int64_t blocks = row_len / traits->block_size;
      Block blk[8];
      for (std::int64_t r = 0; r < n_rows; ++r) {
        const std::uint8_t* src =
            f->data(t) + static_cast<std::uint64_t>(src_row(r)) * blocks * traits->type_size;
        for (std::int64_t bi = 0; bi < blocks; ++bi) {
          if (k_quant)
            decode_kblock(t.type, src + bi * traits->type_size, blk);
          else
            decode_block(t.type, src + bi * traits->type_size, blk[0]);
          for (std::int64_t j = 0; j < per_block; ++j) {
            const std::int64_t g = bi * per_block + j;
            pack_group(blk[j].q, bits, wp + (r * groups + g) * bits);
            const std::size_t at = static_cast<std::size_t>(r * groups + g) * es;
            if (dt == DType::kF16 && blk[j].scale_is_half)
              std::memcpy(sp + at, &blk[j].d_bits, 2);
            else
              exact &= store(dt, blk[j].scale, sp + at);
            if (dt == DType::kF16 && blk[j].bias_is_half)
              std::memcpy(bp + at, &blk[j].bias_bits, 2);
            else
              exact &= store(dt, blk[j].bias, bp + at);
          }
        }
      }
      out.emplace_back(module + ".weight", w);
      out.emplace_back(module + ".scales", s);
      out.emplace_back(module + ".biases", b);
      module_bits[module] = bits;
      tr.mlx_name = module;
      tr.bits = bits;
      tr.mapping = exact ? "exact affine" : "rounded scales";
      ++(exact ? rep.exact : rep.inexact);
    } else if (t.type == TensorType::kQ6_K && t.dims.size() >= 2) {
      // 16-element groups have no MLX form: dequantize as ggml does and requantize to affine
      // 8-bit, group size 32, with MLX's quantizer; the largest error is reported.
      const std::int64_t blocks = row_len / 256;
      std::vector<float> x(static_cast<std::size_t>(n_rows * row_len));
      for (std::int64_t r = 0; r < n_rows; ++r)
        for (std::int64_t bi = 0; bi < blocks; ++bi)
          dequant_q6_k(f->data(t) + (static_cast<std::uint64_t>(src_row(r)) * blocks + bi) * 210,
                       x.data() + r * row_len + bi * 256);
      QuantParams qp;
      qp.bits = 8;
      qp.group_size = kGroupSize;
      const Tensor xf = Tensor::from_f32(x, {n_rows, row_len}, DType::kF32);
      QuantizedTensor qt = quantize(xf, qp);
      const std::int64_t groups = row_len / kGroupSize;
      Shape wshape = shape, sshape = shape;
      wshape.back() = row_len / 4;
      sshape.back() = groups;
      Tensor s = Tensor::empty(dt, sshape), b = Tensor::empty(dt, sshape);
      const float* qs = qt.scales.data<float>();
      const float* qb = qt.biases.data<float>();
      const std::uint32_t* qw = qt.weight.data<std::uint32_t>();
      const std::size_t es = dtype_size(dt);
      double max_err = 0;
      for (std::int64_t gi = 0; gi < n_rows * groups; ++gi) {
        store(dt, qs[gi], static_cast<std::uint8_t*>(s.raw()) + gi * es);
        store(dt, qb[gi], static_cast<std::uint8_t*>(b.raw()) + gi * es);
        const float sc = round_stored(dt, qs[gi]), bs = round_stored(dt, qb[gi]);
        for (int l = 0; l < kGroupSize; ++l) {
          const std::int64_t e = gi * kGroupSize + l;
          const float v = sc * static_cast<float>((qw[e / 4] >> (8 * (e % 4))) & 0xFF) + bs;
          max_err =
              std::max(max_err, static_cast<double>(std::fabs(v - x[static_cast<std::size_t>(e)])));
        }
      }
      out.emplace_back(module + ".weight", qt.weight.reshape(wshape));
      out.emplace_back(module + ".scales", s);
      out.emplace_back(module + ".biases", b);
      module_bits[module] = 8;
      tr.mlx_name = module;
      tr.bits = 8;
      tr.mapping = "requantized";
      tr.max_abs_error = max_err;
      rep.max_requant_error = std::max(rep.max_requant_error, max_err);
      ++rep.requantized;
    } else if (t.type == TensorType::kF32 || t.type == TensorType::kF16 ||
               t.type == TensorType::kBF16) {
      Tensor o = Tensor::empty(dt, shape);
      auto* op = static_cast<std::uint8_t*>(o.raw());
      const std::uint8_t* src = f->data(t);
      const bool copy = (t.type == TensorType::kF16 && dt == DType::kF16) ||
                        (t.type == TensorType::kBF16 && dt == DType::kBF16) ||
                        (t.type == TensorType::kF32 && dt == DType::kF32);
      const std::int64_t es = static_cast<std::int64_t>(dtype_size(dt));
      for (std::int64_t r = 0; r < n_rows; ++r) {
        const std::int64_t sr = src_row(r);
        if (copy) {
          std::memcpy(op + r * row_len * es, src + sr * row_len * es,
                      static_cast<std::size_t>(row_len * es));
        } else {
          for (std::int64_t c = 0; c < row_len; ++c)
            store(dt, dense_at(t.type, src, static_cast<std::uint64_t>(sr * row_len + c)),
                  op + (r * row_len + c) * es);
        }
      }
      out.emplace_back(full, o);
      tr.mapping = copy ? "copy" : "cast";
      ++rep.dense;
    } else {
      throw_error(
          ErrorCategory::kUnsupported,
          path + ": tensor " + t.name + " is " + tensor_type_name(t.type) +
              ", which has no exact MLX form (supported: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, "
              "F16, BF16, F32; Q4_K, Q5_K exact with --dtype float32; Q6_K requantized to 8-bit); "
              "use a GGUF quantized with one of those, or convert the original checkpoint");
    }
    rep.tensors.push_back(tr);
  }
  for (std::int64_t l = 0; l < n_layers; ++l)
    for (const char* need :
         {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_down", "attn_norm", "ffn_norm"})
      if (!f->find_tensor("blk." + std::to_string(l) + "." + need + ".weight"))
        throw_error(ErrorCategory::kBadInput,
                    path + ": tensor blk." + std::to_string(l) + "." + need + ".weight is missing");
  if (!f->find_tensor("output_norm.weight"))
    throw_error(ErrorCategory::kBadInput, path + ": tensor output_norm.weight is missing");

  json config = {
      {"architectures", {arch->hf_class}},
      {"model_type", arch->model_type},
      {"hidden_size", hidden},
      {"intermediate_size", ff},
      {"num_hidden_layers", n_layers},
      {"num_attention_heads", n_heads},
      {"num_key_value_heads", n_kv},
      {"head_dim", head_dim},
      {"rms_norm_eps", metadata_number(*f, p + "attention.layer_norm_rms_epsilon", 1e-6)},
      {"rope_theta", metadata_number(*f, p + "rope.freq_base", 10000.0)},
      {"vocab_size", vocab},  // the embedding's rows: may be padded past the tokenizer's
      {"tie_word_embeddings", tied},
      {"torch_dtype", dtype_config_name(dt)},
      {"hidden_act", "silu"}};
  if (ctx > 0) config["max_position_embeddings"] = ctx;
  if (std::string(arch->model_type) == "llama") {
    config["attention_bias"] = f->find_tensor("blk.0.attn_q.bias") != nullptr;
    config["mlp_bias"] = false;
  }
  if (tok.bos_id >= 0) config["bos_token_id"] = tok.bos_id;
  if (tok.eos_ids.size() == 1)
    config["eos_token_id"] = tok.eos_ids[0];
  else if (!tok.eos_ids.empty())
    config["eos_token_id"] = tok.eos_ids;
  if (!module_bits.empty()) {
    // The most common width is the default; every other quantized module gets its own entry
    // (mlx-lm's per-path "quantization" overrides).
    std::map<int, int> count;
    for (const auto& [m, b] : module_bits) ++count[b];
    const int def = std::max_element(count.begin(), count.end(), [](auto& a, auto& b) {
                      return a.second < b.second;
                    })->first;
    json q = {{"group_size", kGroupSize}, {"bits", def}};
    for (const auto& [m, b] : module_bits)
      if (b != def) q[m] = {{"group_size", kGroupSize}, {"bits", b}};
    config["quantization"] = q;
    config["quantization_config"] = q;
  }

  fs::create_directories(out_dir);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  const std::string st = (fs::path(out_dir) / "model.safetensors").string();
  write_safetensors(st, out, {{"format", "mlx"}});
  rep.bytes_written = fs::file_size(st);
  auto write_json = [&](const char* name, const json& j) {
    const std::string fp = (fs::path(out_dir) / name).string();
    std::ofstream o(fp);
    if (!o) throw_error(ErrorCategory::kBadInput, fp + ": cannot write");
    o << j.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
    if (!o) throw_error(ErrorCategory::kBadInput, fp + ": write failed (disk full?)");
  };
  write_json("config.json", config);
  write_json("tokenizer.json", tok.tokenizer);
  write_json("tokenizer_config.json", tok.tokenizer_config);
  json tensors = json::array();
  for (const auto& t : rep.tensors) {
    json e = {{"gguf_name", t.gguf_name},
              {"gguf_type", t.gguf_type},
              {"mlx_name", t.mlx_name},
              {"mapping", t.mapping}};
    if (t.bits) e["bits"] = t.bits;
    if (t.mapping == "requantized") e["max_abs_error"] = t.max_abs_error;
    tensors.push_back(e);
  }
  write_json("mlxcel_convert.json", {{"source", fs::path(gguf_path).filename().string()},
                                     {"architecture", arch_name},
                                     {"dtype", dtype_config_name(dt)},
                                     {"exact_quantized", rep.exact},
                                     {"rounded_quantized", rep.inexact},
                                     {"requantized", rep.requantized},
                                     {"max_requantization_error", rep.max_requant_error},
                                     {"dense", rep.dense},
                                     {"tensors", tensors}});
  return rep;
}

}  // namespace mlxcel::gguf
