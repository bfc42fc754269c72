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
  bool permute_qk;   // llama.cpp's LlamaModel.permute was applied to q/k rows
  float norm_shift;  // llama.cpp stored (norm_shift + w) for every *norm.weight (Gemma: 1)
  // GGUF block tensor suffixes that mean something else in this family (overrides of
  // common_block_names()), and the ones every layer must have.
  std::vector<std::pair<std::string, std::string>> names;
  std::vector<const char*> required;
};

const std::vector<const char*> kDenseRequired = {"attn_q",      "attn_k",    "attn_v",
                                                 "attn_output", "attn_norm", "ffn_norm",
                                                 "ffn_gate",    "ffn_up",    "ffn_down"};

const std::vector<Arch>& archs() {
  static const std::vector<Arch> kArchs = {
      // llama.cpp writes Mistral (MistralForCausalLM) as "llama" too.
      {"llama", "llama", "LlamaForCausalLM", true, 0.0f, {}, kDenseRequired},
      {"qwen2", "qwen2", "Qwen2ForCausalLM", false, 0.0f, {}, kDenseRequired},
      {"qwen3", "qwen3", "Qwen3ForCausalLM", false, 0.0f, {}, kDenseRequired},
      // Experts are stacked 3-D tensors [n_expert, out, in] in both formats; mlx-lm's
      // qwen3_moe sanitize stacks Hugging Face's per-expert tensors into switch_mlp.* likewise.
      {"qwen3moe",
       "qwen3_moe",
       "Qwen3MoeForCausalLM",
       false,
       0.0f,
       {{"ffn_gate_inp", "mlp.gate"},
        {"ffn_gate_exps", "mlp.switch_mlp.gate_proj"},
        {"ffn_up_exps", "mlp.switch_mlp.up_proj"},
        {"ffn_down_exps", "mlp.switch_mlp.down_proj"}},
       {"attn_q", "attn_k", "attn_v", "attn_output", "attn_norm", "ffn_norm", "attn_q_norm",
        "attn_k_norm", "ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"}},
      // Gemma 3 has four norms per layer; llama.cpp calls the pre-FFN one ffn_norm.
      {"gemma3",
       "gemma3_text",
       "Gemma3ForCausalLM",
       false,
       1.0f,
       {{"ffn_norm", "pre_feedforward_layernorm"},
        {"post_attention_norm", "post_attention_layernorm"},
        {"post_ffw_norm", "post_feedforward_layernorm"}},
       {"attn_q", "attn_k", "attn_v", "attn_output", "attn_norm", "post_attention_norm", "ffn_norm",
        "post_ffw_norm", "attn_q_norm", "attn_k_norm", "ffn_gate", "ffn_up", "ffn_down"}},
      // Phi-3 keeps q/k/v and gate/up fused in both formats (ffn_up is gate_up_proj).
      {"phi3",
       "phi3",
       "Phi3ForCausalLM",
       false,
       0.0f,
       {{"attn_qkv", "self_attn.qkv_proj"}, {"ffn_up", "mlp.gate_up_proj"}},
       {"attn_qkv", "attn_output", "attn_norm", "ffn_norm", "ffn_up", "ffn_down"}},
  };
  return kArchs;
}

// GGUF block tensor suffix -> MLX module path inside model.layers.N, for the llama layout.
const std::map<std::string, std::string>& common_block_names() {
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

const std::string* block_name(const Arch& arch, const std::string& part) {
  for (const auto& [g, m] : arch.names)
    if (g == part) return &m;
  auto it = common_block_names().find(part);
  return it == common_block_names().end() ? nullptr : &it->second;
}

// Returns the MLX module path ("model.layers.3.mlp.up_proj") and the parameter ("weight"/"bias"),
// or throws naming the tensor.
std::pair<std::string, std::string> mlx_name(const std::string& file, const Arch& arch,
                                             const std::string& name) {
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
      const std::string* m = block_name(arch, part);
      if (digits && m) return {"model.layers." + layer + "." + *m, param};
    }
  }
  if (base == "rope_freqs")
    throw_error(ErrorCategory::kUnsupported,
                file + ": tensor rope_freqs (Llama 3 RoPE scaling) is not supported yet");
  throw_error(ErrorCategory::kUnsupported, file + ": tensor " + name +
                                               " has no MLX counterpart in this converter (" +
                                               arch.gguf_name + ")");
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

// Gemma 3's sliding-window period: `<arch>.attention.sliding_window_pattern` as a period, or as
// llama.cpp's per-layer array (true = sliding), which must then be periodic with the last layer
// of each period global; absent, llama.cpp's fixed 6.
std::int64_t sliding_pattern(const File& f, const std::string& p, std::int64_t n_layers) {
  const std::string key = p + "attention.sliding_window_pattern";
  const Value* v = f.find(key);
  if (!v) return 6;
  if (v->type != ValueType::kArray) {
    const std::int64_t n = static_cast<std::int64_t>(f.get_uint(key));
    if (n <= 0) throw_error(ErrorCategory::kBadInput, f.path() + ": " + key + " is 0");
    return n;
  }
  if (v->array_type != ValueType::kBool || static_cast<std::int64_t>(v->items.size()) != n_layers)
    throw_error(ErrorCategory::kBadInput,
                f.path() + ": " + key + " must be an integer or one bool per layer");
  std::int64_t period = 0;
  while (period < n_layers && v->items[static_cast<std::size_t>(period)].u != 0) ++period;
  ++period;
  for (std::int64_t l = 0; l < n_layers; ++l)
    if ((v->items[static_cast<std::size_t>(l)].u != 0) != ((l + 1) % period != 0))
      throw_error(
          ErrorCategory::kUnsupported,
          f.path() + ": " + key +
              " is not periodic (every Nth layer global), which gemma3_text cannot express");
  return period;
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
  const bool moe = std::string(arch->model_type) == "qwen3_moe";
  const std::int64_t expert_ff =
      moe ? static_cast<std::int64_t>(f->get_uint(p + "expert_feed_forward_length")) : 0;
  // A Qwen3-MoE GGUF may leave out the dense width (no dense layer uses it).
  const std::int64_t ff = static_cast<std::int64_t>(
      moe ? f->get_uint_or(p + "feed_forward_length", static_cast<std::uint64_t>(expert_ff))
          : f->get_uint(p + "feed_forward_length"));
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
  // Neither mlx-lm's gemma3_text nor ours caps logits (Gemma 3 checkpoints have no cap).
  for (const char* k : {"final_logit_softcapping", "attn_logit_softcapping"})
    if (f->find(p + k))
      throw_error(ErrorCategory::kUnsupported,
                  path + ": " + p + k + " (logit soft-capping) is not supported");

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

  // Phi-3 LongRoPE: llama.cpp stores the per-dimension factors as two F32 tensors; in an MLX
  // folder they are config.json's rope_scaling lists.
  std::vector<double> rope_long, rope_short;
  for (const TensorInfo& t : f->tensors()) {
    if (t.name != "rope_factors_long.weight" && t.name != "rope_factors_short.weight") continue;
    if (std::string(arch->model_type) != "phi3" || t.type != TensorType::kF32 || t.dims.size() != 1)
      throw_error(ErrorCategory::kUnsupported,
                  path + ": tensor " + t.name + " (" + tensor_type_name(t.type) +
                      ") is supported only as Phi-3's F32 LongRoPE factors");
    auto& dst = t.name == "rope_factors_long.weight" ? rope_long : rope_short;
    for (std::uint64_t i = 0; i < t.n_elements; ++i)
      dst.push_back(static_cast<double>(dense_at(TensorType::kF32, f->data(t), i)));
  }

  for (const TensorInfo& t : f->tensors()) {
    if (t.name == "rope_factors_long.weight" || t.name == "rope_factors_short.weight") continue;
    auto [module, param] = mlx_name(path, *arch, t.name);
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
      // Gemma: llama.cpp stored 1 + w (Gemma's RMSNorm scales by 1 + w); MLX stores w.
      const bool is_norm = module.size() >= 4 && module.compare(module.size() - 4, 4, "norm") == 0;
      const float shift = is_norm && param == "weight" ? arch->norm_shift : 0.0f;
      const bool copy = shift == 0.0f && ((t.type == TensorType::kF16 && dt == DType::kF16) ||
                                          (t.type == TensorType::kBF16 && dt == DType::kBF16) ||
                                          (t.type == TensorType::kF32 && dt == DType::kF32));
      const std::int64_t es = static_cast<std::int64_t>(dtype_size(dt));
      for (std::int64_t r = 0; r < n_rows; ++r) {
        const std::int64_t sr = src_row(r);
        if (copy) {
          std::memcpy(op + r * row_len * es, src + sr * row_len * es,
                      static_cast<std::size_t>(row_len * es));
        } else {
          for (std::int64_t c = 0; c < row_len; ++c)
            store(dt, dense_at(t.type, src, static_cast<std::uint64_t>(sr * row_len + c)) - shift,
                  op + (r * row_len + c) * es);
        }
      }
      out.emplace_back(full, o);
      tr.mapping = copy ? "copy" : shift != 0.0f ? "cast, minus 1" : "cast";
      ++rep.dense;
      if (shift != 0.0f) ++rep.shifted;
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
    for (const char* need : arch->required)
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
      {"torch_dtype", dtype_config_name(dt)}};
  const std::string mt = arch->model_type;
  if (mt == "gemma3_text") {
    // llama.cpp hard-codes what Gemma 3 checkpoints share: every 6th layer global, local RoPE
    // base 10000, attention scaled by head_dim^-0.5 (hidden/heads for the 62-layer 27B).
    config["hidden_activation"] = "gelu_pytorch_tanh";
    config["query_pre_attn_scalar"] = n_layers == 62 ? hidden / n_heads : head_dim;
    config["rope_local_base_freq"] = 10000.0;
    const std::int64_t window =
        static_cast<std::int64_t>(f->get_uint_or(p + "attention.sliding_window", 0));
    config["sliding_window"] = window > 0 ? window : (ctx > 0 ? ctx : 131072);
    config["sliding_window_pattern"] = window > 0 ? sliding_pattern(*f, p, n_layers) : 1;
    config["rope_scaling"] = nullptr;
  } else {
    config["hidden_act"] = "silu";
  }
  if (moe) {
    // llama.cpp's qwen3moe graph renormalizes the top-k weights and makes every layer sparse.
    config["num_experts"] = f->get_uint(p + "expert_count");
    config["num_experts_per_tok"] = f->get_uint(p + "expert_used_count");
    config["moe_intermediate_size"] = expert_ff;
    config["decoder_sparse_step"] = 1;
    config["mlp_only_layers"] = json::array();
    config["norm_topk_prob"] = f->get_bool_or(p + "expert_weights_norm", true);
    // ggml's LLAMA_EXPERT_GATING_FUNC_TYPE: 1 softmax (Qwen3-MoE's), 2 sigmoid.
    if (const std::uint64_t g = f->get_uint_or(p + "expert_gating_func", 1); g != 1)
      throw_error(ErrorCategory::kUnsupported,
                  path + ": " + p + "expert_gating_func " + std::to_string(g) +
                      " is not supported (qwen3_moe routes with a softmax, 1)");
  }
  if (mt == "phi3") {
    config.erase("head_dim");  // Phi-3 derives it from hidden_size / heads
    const std::int64_t rot =
        static_cast<std::int64_t>(f->get_uint_or(p + "rope.dimension_count", head_dim));
    if (rot != head_dim) config["partial_rotary_factor"] = static_cast<double>(rot) / head_dim;
    if (f->find(p + "attention.sliding_window"))
      config["sliding_window"] = f->get_uint(p + "attention.sliding_window");
    if (!rope_long.empty() || !rope_short.empty()) {
      if (rope_long.size() != rope_short.size() ||
          static_cast<std::int64_t>(rope_long.size()) * 2 != rot)
        throw_error(ErrorCategory::kBadInput,
                    path + ": rope_factors_long/short must both have rope.dimension_count/2 = " +
                        std::to_string(rot / 2) + " entries");
      config["rope_scaling"] = {
          {"type", "longrope"}, {"long_factor", rope_long}, {"short_factor", rope_short}};
      config["original_max_position_embeddings"] =
          f->get_uint(p + "rope.scaling.original_context_length");
    } else {
      config["original_max_position_embeddings"] = ctx > 0 ? ctx : 4096;
    }
  }
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
                                     {"norms_minus_1", rep.shifted},
                                     {"tensors", tensors}});
  return rep;
}

}  // namespace mlxcel::gguf
