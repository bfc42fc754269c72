#include "io/gguf_convert.h"

#include <algorithm>
#include <charconv>
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
  std::uint16_t d_bits;  // fp16 scale as stored
  float bias;            // exact value of the bias in fp32
  bool bias_is_half;     // bias stored as an fp16 (Q4_1/Q5_1 m): copy its bits
  std::uint16_t bias_bits;
};

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
    default:
      return 0;
  }
}

void decode_block(TensorType t, const std::uint8_t* b, Block& o) {
  o.d_bits = half_bits_at(b);
  const float d = half_at(b);
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
  const std::int64_t vocab =
      static_cast<std::int64_t>(f->get_string_array("tokenizer.ggml.tokens").size());

  const TensorInfo* embd = f->find_tensor("token_embd.weight");
  if (!embd) throw_error(ErrorCategory::kBadInput, path + ": tensor token_embd.weight is missing");
  if (embd->dims.size() != 2 || static_cast<std::int64_t>(embd->dims[0]) != hidden)
    throw_error(ErrorCategory::kBadInput,
                path + ": token_embd.weight is not [vocab, " + std::to_string(hidden) + "]");
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
      Block blk;
      for (std::int64_t r = 0; r < n_rows; ++r) {
        const std::uint8_t* src =
            f->data(t) + static_cast<std::uint64_t>(src_row(r)) * groups * traits->type_size;
        for (std::int64_t g = 0; g < groups; ++g) {
          decode_block(t.type, src + g * traits->type_size, blk);
          pack_group(blk.q, bits, wp + (r * groups + g) * bits);
          const std::size_t at = static_cast<std::size_t>(r * groups + g) * es;
          if (dt == DType::kF16) {
            std::memcpy(sp + at, &blk.d_bits, 2);
            if (blk.bias_is_half)
              std::memcpy(bp + at, &blk.bias_bits, 2);
            else
              exact &= store(dt, blk.bias, bp + at);
          } else {
            exact &= store(dt, f16::from_bits(blk.d_bits).to_float(), sp + at);
            exact &= store(dt, blk.bias, bp + at);
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
      throw_error(ErrorCategory::kUnsupported,
                  path + ": tensor " + t.name + " is " + tensor_type_name(t.type) +
                      ", which has no exact MLX form (supported: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, "
                      "F16, BF16, F32); "
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
      {"vocab_size", vocab},
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
    tensors.push_back(e);
  }
  write_json("mlxcel_convert.json", {{"source", fs::path(gguf_path).filename().string()},
                                     {"architecture", arch_name},
                                     {"dtype", dtype_config_name(dt)},
                                     {"exact_quantized", rep.exact},
                                     {"rounded_quantized", rep.inexact},
                                     {"dense", rep.dense},
                                     {"tensors", tensors}});
  return rep;
}

}  // namespace mlxcel::gguf
