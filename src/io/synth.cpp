#include "io/synth.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/error.h"
#include "quant/quant_params.h"

namespace mlxcel::synth {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

// Hyperparameters of the real checkpoints (their config.json on the Hugging Face hub).
struct ModelShape {
  const char* like;
  const char* model_type;
  std::int64_t hidden, layers, intermediate, heads, kv_heads, head_dim, vocab;
  double rope_theta, eps;
  bool tied;
  std::int64_t max_pos;
  const char* tokenizer;  // fixture folder of the family's tokenizer (a stand-in where noted)
  // qwen3_moe
  std::int64_t experts = 0, experts_per_tok = 0, moe_intermediate = 0;
};

const ModelShape kShapes[] = {
    {"qwen3-0.6b", "qwen3", 1024, 28, 3072, 16, 8, 128, 151936, 1e6, 1e-6, true, 40960, "qwen3"},
    {"llama-3.1-8b", "llama", 4096, 32, 14336, 32, 8, 128, 128256, 500000.0, 1e-5, false, 131072,
     "llama3"},
    {"qwen3-30b-a3b", "qwen3_moe", 2048, 48, 6144, 32, 4, 128, 151936, 1e6, 1e-6, false, 40960,
     "qwen3", 128, 8, 768},
    // Gemma 3: no Gemma tokenizer in the fixtures, Phi-3's (32064 ids < vocab) stands in.
    {"gemma3-1b", "gemma3_text", 1152, 26, 6912, 4, 1, 256, 262144, 1e6, 1e-6, true, 32768, "phi3"},
    {"gemma3-4b", "gemma3_text", 2560, 34, 10240, 8, 4, 256, 262208, 1e6, 1e-6, true, 131072,
     "phi3"},
    // SmolLM2's own tokenizer is not in the fixtures; Mistral v0.3's (32768 ids) stands in.
    {"smollm2-135m", "llama", 576, 30, 1536, 9, 3, 64, 49152, 100000.0, 1e-5, true, 8192,
     "mistral"},
};

// Fixture tokenizer folders: source file -> name in the checkpoint.
struct TokenizerFiles {
  const char* family;
  const char* folder;
  std::vector<std::pair<const char*, const char*>> files;
};
const std::vector<TokenizerFiles>& tokenizer_table() {
  static const std::vector<TokenizerFiles> t = {
      {"qwen3",
       "qwen2.5",
       {{"vocab.json", "vocab.json"},
        {"merges.txt", "merges.txt"},
        {"tokenizer_config.Qwen3-0.6B.json", "tokenizer_config.json"}}},
      {"llama3",
       "llama3-tiktoken",
       {{"tokenizer.model", "tokenizer.model"},
        {"tokenizer_config.Llama-3.1-8B.json", "tokenizer_config.json"}}},
      {"mistral",
       "mistral-7b-v0.3-metaspace",
       {{"tokenizer.json", "tokenizer.json"}, {"tokenizer_config.json", "tokenizer_config.json"}}},
      {"phi3",
       "phi-3-mini",
       {{"tokenizer.json", "tokenizer.json"}, {"tokenizer_config.json", "tokenizer_config.json"}}},
  };
  return t;
}

struct QuantChoice {
  const char* name;
  bool quantized;
  QuantMode mode;
  int bits;
};
const QuantChoice kQuants[] = {
    {"affine4", true, QuantMode::kAffine, 4}, {"affine8", true, QuantMode::kAffine, 8},
    {"mxfp4", true, QuantMode::kMxfp4, 4},    {"mxfp8", true, QuantMode::kMxfp8, 8},
    {"nvfp4", true, QuantMode::kNvfp4, 4},    {"bf16", false, QuantMode::kAffine, 16},
};

// SplitMix64: a counter-based generator, so every byte depends only on (key, index) and the
// output is the same whatever the thread count or chunking.
inline std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
std::uint64_t name_key(std::uint64_t seed, const std::string& s) {
  std::uint64_t h = 0xcbf29ce484222325ull ^ mix(seed);  // FNV-1a over the name, then mixed
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return mix(h);
}

// Standard deviation of a code drawn uniformly from [0, 2^bits - 1].
double uniform_code_std(int bits) {
  const double n = std::ldexp(1.0, bits);
  return std::sqrt((n * n - 1) / 12.0);
}
// Standard deviation of an E2M1 value with every code equally likely: E[x^2] = 68.5/8.
double fp4_code_std() { return std::sqrt(68.5 / 8.0); }

// mxfp8 codes: byte b -> E4M3 encoding of the normal quantile (b + 0.5)/256, so uniform random
// bytes give normally distributed elements of unit scale without ever producing 0x7F/0xFF.
struct Fp8Lut {
  std::uint8_t code[256];
  double stddev;
  Fp8Lut() {
    double ss = 0;
    for (int b = 0; b < 256; ++b) {
      const double p = (b + 0.5) / 256.0;
      // Inverse normal CDF by bisection on erfc: plenty for 256 entries computed once.
      double lo = -8, hi = 8;
      for (int it = 0; it < 80; ++it) {
        const double mid = 0.5 * (lo + hi);
        if (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p)
          lo = mid;
        else
          hi = mid;
      }
      code[b] = float_to_fp8_e4m3(static_cast<float>(0.5 * (lo + hi)));
      const double v = fp8_e4m3_to_float(code[b]);
      ss += v * v;
    }
    stddev = std::sqrt(ss / 256.0);
  }
};
const Fp8Lut& fp8_lut() {
  static const Fp8Lut lut;
  return lut;
}

std::uint16_t bf16_bits(float f) { return bf16(f).bits; }

float affine_scale(const PlannedTensor& t, std::uint64_t group) {
  const std::uint64_t h = mix(t.key ^ (group * 0xd1b54a32d192ed03ull));
  const double u = static_cast<double>(h >> 11) * 0x1.0p-53;
  const double mag = t.sigma / uniform_code_std(t.bits) * (0.75 + 0.5 * u);
  // bf16-rounded, so the bias centres exactly what the loader will read.
  return static_cast<float>(bf16(static_cast<float>((h >> 63) ? -mag : mag)));
}

// Fills bytes [b, e) of tensor t into out (b, e aligned to the element size).
void fill(const PlannedTensor& t, std::uint64_t b, std::uint64_t e, std::uint8_t* out) {
  switch (t.fill) {
    case Fill::kRandomBytes:
    case Fill::kFp8Gauss: {
      // Chunks start on 8-byte boundaries (16 MiB items from tensor offset 0); only a tensor's
      // last word can be partial.
      const bool lut = t.fill == Fill::kFp8Gauss;
      const auto& L = fp8_lut();
      const std::uint64_t w0 = b / 8, full = e / 8;
      for (std::uint64_t w = w0; w < full; ++w) {
        std::uint64_t h = mix(t.key + w);
        if (lut) {
          std::uint64_t m = 0;
          for (int k = 0; k < 8; ++k)
            m |= static_cast<std::uint64_t>(L.code[(h >> (8 * k)) & 0xff]) << (8 * k);
          h = m;
        }
        std::memcpy(out + (w - w0) * 8, &h, 8);
      }
      if (full * 8 < e) {
        std::uint64_t h = mix(t.key + full);
        std::uint8_t bytes[8];
        std::memcpy(bytes, &h, 8);
        if (lut)
          for (auto& x : bytes) x = L.code[x];
        std::memcpy(out + (full * 8 - b), bytes, e - full * 8);
      }
      break;
    }
    case Fill::kAffineScale:
    case Fill::kAffineBias: {
      const double half_range = (std::ldexp(1.0, t.bits) - 1) / 2;
      for (std::uint64_t i = b / 2; i < e / 2; ++i) {
        const float s = affine_scale(t, i);
        const float v = t.fill == Fill::kAffineScale ? s : static_cast<float>(-s * half_range);
        const std::uint16_t x = bf16_bits(v);
        std::memcpy(out + (i * 2 - b), &x, 2);
      }
      break;
    }
    case Fill::kScaleByte:
      std::memset(out, static_cast<int>(t.value), e - b);
      break;
    case Fill::kBf16Uniform: {
      const double a = t.sigma * std::sqrt(3.0);  // uniform on [-a, a] has std a/sqrt(3)
      for (std::uint64_t i = b / 2; i < e / 2; ++i) {
        const std::uint64_t h = mix(t.key + i);
        const double u = static_cast<double>(h >> 11) * 0x1.0p-52 - 1.0;
        const std::uint16_t x = bf16_bits(static_cast<float>(a * u));
        std::memcpy(out + (i * 2 - b), &x, 2);
      }
      break;
    }
    case Fill::kBf16Const: {
      const std::uint16_t x = bf16_bits(t.value);
      for (std::uint64_t i = b / 2; i < e / 2; ++i) std::memcpy(out + (i * 2 - b), &x, 2);
      break;
    }
  }
}

struct Planner {
  const SynthOptions& o;
  QuantChoice q;
  QuantParams qp;
  std::vector<PlannedTensor> out;

  void norm(const std::string& name, std::int64_t n, float value) {
    PlannedTensor t;
    t.name = name;
    t.dtype = DType::kBF16;
    t.shape = {n};
    t.fill = Fill::kBf16Const;
    t.value = value;
    out.push_back(std::move(t));
  }

  // A Linear / Embedding / SwitchLinear weight [experts?, rows, cols]. As mlx-lm's quantize
  // predicate: quantized when cols is a multiple of the group size, else left in bf16.
  // `override_params` forces a mode (the MoE router is affine 8-bit in mlx-lm).
  void matrix(const std::string& prefix, std::int64_t experts, std::int64_t rows, std::int64_t cols,
              const QuantParams* override_params = nullptr) {
    Shape lead;
    if (experts > 0) lead.push_back(experts);
    lead.push_back(rows);
    const float sigma = static_cast<float>(1.0 / std::sqrt(static_cast<double>(cols)));
    const std::uint64_t key = name_key(o.seed, prefix);
    const QuantParams p = override_params ? *override_params : qp;
    const bool quantized = (q.quantized || override_params) && cols % p.group_size == 0;
    if (!quantized) {
      PlannedTensor t;
      t.name = prefix + ".weight";
      t.dtype = DType::kBF16;
      t.shape = lead;
      t.shape.push_back(cols);
      t.fill = Fill::kBf16Uniform;
      t.sigma = sigma;
      t.key = key;
      out.push_back(std::move(t));
      return;
    }
    PlannedTensor w;
    w.name = prefix + ".weight";
    w.dtype = DType::kU32;
    w.shape = lead;
    w.shape.push_back(cols * p.bits / 32);
    w.fill = p.mode == QuantMode::kMxfp8 ? Fill::kFp8Gauss : Fill::kRandomBytes;
    w.key = mix(key + 1);
    Shape sshape = lead;
    sshape.push_back(cols / p.group_size);
    PlannedTensor s;
    s.name = prefix + ".scales";
    s.shape = sshape;
    s.sigma = sigma;
    s.key = key;
    if (p.mode == QuantMode::kAffine) {
      s.dtype = DType::kBF16;
      s.fill = Fill::kAffineScale;
      s.bits = p.bits;
      PlannedTensor bias = s;
      bias.name = prefix + ".biases";
      bias.fill = Fill::kAffineBias;
      out.push_back(std::move(w));
      out.push_back(std::move(s));
      out.push_back(std::move(bias));
      return;
    }
    s.dtype = DType::kU8;
    s.fill = Fill::kScaleByte;
    const double elem_std = p.mode == QuantMode::kMxfp8 ? fp8_lut().stddev : fp4_code_std();
    const double scale = sigma / elem_std;
    if (p.mode == QuantMode::kNvfp4) {
      s.value = float_to_fp8_e4m3(static_cast<float>(scale));  // E4M3 scale (MLX_FORMATS.md §2)
    } else {
      const long b = std::lround(std::log2(scale)) + 127;  // E8M0: 2^(b-127)
      s.value = static_cast<float>(std::clamp(b, 1L, 254L));
    }
    out.push_back(std::move(w));
    out.push_back(std::move(s));
  }
};

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

const ModelShape& find_shape(const std::string& like) {
  for (const auto& s : kShapes)
    if (lower(like) == s.like) return s;
  std::string names;
  for (const auto& n : shape_names()) names += (names.empty() ? "" : ", ") + n;
  throw_error(ErrorCategory::kBadInput,
              "--like '" + like + "' is not a known shape; choose one of: " + names);
}

const QuantChoice& find_quant(const std::string& name) {
  for (const auto& q : kQuants)
    if (lower(name) == q.name) return q;
  std::string names;
  for (const auto& n : quant_names()) names += (names.empty() ? "" : ", ") + n;
  throw_error(ErrorCategory::kBadInput,
              "--quant '" + name + "' is not known; choose one of: " + names);
}

json quant_json(const QuantParams& p) {
  json j;
  j["group_size"] = p.group_size;
  j["bits"] = p.bits;
  if (p.mode != QuantMode::kAffine) j["mode"] = std::string(quant_mode_name(p.mode));
  return j;
}

// Writes whole buffers with pwrite, retrying short writes; throws naming the file.
void pwrite_all(int fd, const std::uint8_t* p, std::uint64_t n, std::uint64_t off,
                const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(off));
    if (w < 0) {
      if (errno == EINTR) continue;
      throw_error(ErrorCategory::kBadInput,
                  path + ": write failed (" + std::strerror(errno) + "); is the disk full?");
    }
    p += w;
    n -= static_cast<std::uint64_t>(w);
    off += static_cast<std::uint64_t>(w);
  }
}

struct Shard {
  std::string name;
  std::vector<std::size_t> tensors;    // indices into the plan
  std::vector<std::uint64_t> offsets;  // absolute file offsets of each tensor's data
  std::string header;                  // 8-byte length + JSON, padded to a multiple of 8
  std::uint64_t size = 0;
};

}  // namespace

std::uint64_t PlannedTensor::nbytes() const {
  std::uint64_t n = dtype_size(dtype);
  for (auto d : shape) n *= static_cast<std::uint64_t>(d);
  return n;
}

std::uint64_t SynthPlan::total_bytes() const {
  std::uint64_t n = 0;
  for (const auto& t : tensors) n += t.nbytes();
  return n;
}

std::vector<std::string> shape_names() {
  std::vector<std::string> v;
  for (const auto& s : kShapes) v.push_back(s.like);
  return v;
}

std::vector<std::string> quant_names() {
  std::vector<std::string> v;
  for (const auto& q : kQuants) v.push_back(q.name);
  return v;
}

std::vector<std::string> default_tokenizer_roots() {
  std::vector<std::string> v;
  if (const char* e = std::getenv("MLXCEL_TOKENIZERS"); e && *e) v.push_back(e);
  v.push_back("shared/fixtures/tokenizers");
  v.push_back("../shared/fixtures/tokenizers");
  v.push_back("/work/shared/fixtures/tokenizers");
  return v;
}

SynthPlan plan(const SynthOptions& o) {
  const ModelShape& shape_in = find_shape(o.like);
  const QuantChoice& q = find_quant(o.quant);
  QuantParams qp = default_params(q.mode);
  qp.bits = q.bits;
  if (o.group_size > 0) {
    if (!q.quantized)
      throw_error(ErrorCategory::kBadInput,
                  "--group-size applies to quantized modes, not --quant bf16");
    qp.group_size = o.group_size;
  }
  if (q.quantized) check_params(qp, "--quant " + std::string(q.name) + " --group-size");
  if (o.layers < 0) throw_error(ErrorCategory::kBadInput, "--layers must be positive");
  const std::int64_t layers = o.layers > 0 ? o.layers : shape_in.layers;
  if (o.vocab < 0) throw_error(ErrorCategory::kBadInput, "--vocab must be positive");
  ModelShape s = shape_in;
  if (o.vocab > 0) s.vocab = o.vocab;
  const bool gemma = std::string(s.model_type) == "gemma3_text";
  const bool moe = s.experts > 0;
  const bool qk_norm = std::string(s.model_type) != "llama";

  Planner p{o, q, qp, {}};
  // Gemma's RMSNorm multiplies by (1 + w): weight 0 is a unit norm.
  const float unit = gemma ? 0.0f : 1.0f;
  const QuantParams router{QuantMode::kAffine, 8, 64};  // qwen3_moe quant_predicate
  p.matrix("model.embed_tokens", 0, s.vocab, s.hidden);
  for (std::int64_t l = 0; l < layers; ++l) {
    const std::string L = "model.layers." + std::to_string(l) + ".";
    p.norm(L + "input_layernorm.weight", s.hidden, unit);
    p.norm(L + "post_attention_layernorm.weight", s.hidden, unit);
    if (gemma) {
      p.norm(L + "pre_feedforward_layernorm.weight", s.hidden, unit);
      p.norm(L + "post_feedforward_layernorm.weight", s.hidden, unit);
    }
    p.matrix(L + "self_attn.q_proj", 0, s.heads * s.head_dim, s.hidden);
    p.matrix(L + "self_attn.k_proj", 0, s.kv_heads * s.head_dim, s.hidden);
    p.matrix(L + "self_attn.v_proj", 0, s.kv_heads * s.head_dim, s.hidden);
    p.matrix(L + "self_attn.o_proj", 0, s.hidden, s.heads * s.head_dim);
    if (qk_norm) {
      p.norm(L + "self_attn.q_norm.weight", s.head_dim, unit);
      p.norm(L + "self_attn.k_norm.weight", s.head_dim, unit);
    }
    if (moe) {
      p.matrix(L + "mlp.gate", 0, s.experts, s.hidden, q.quantized ? &router : nullptr);
      p.matrix(L + "mlp.switch_mlp.gate_proj", s.experts, s.moe_intermediate, s.hidden);
      p.matrix(L + "mlp.switch_mlp.up_proj", s.experts, s.moe_intermediate, s.hidden);
      p.matrix(L + "mlp.switch_mlp.down_proj", s.experts, s.hidden, s.moe_intermediate);
    } else {
      p.matrix(L + "mlp.gate_proj", 0, s.intermediate, s.hidden);
      p.matrix(L + "mlp.up_proj", 0, s.intermediate, s.hidden);
      p.matrix(L + "mlp.down_proj", 0, s.hidden, s.intermediate);
    }
  }
  p.norm("model.norm.weight", s.hidden, unit);
  if (!s.tied) p.matrix("lm_head", 0, s.vocab, s.hidden);

  json c;
  c["model_type"] = s.model_type;
  c["architectures"] = json::array();
  c["hidden_size"] = s.hidden;
  c["num_hidden_layers"] = layers;
  c["intermediate_size"] = s.intermediate;
  c["num_attention_heads"] = s.heads;
  c["num_key_value_heads"] = s.kv_heads;
  c["head_dim"] = s.head_dim;
  c["vocab_size"] = s.vocab;
  c["rms_norm_eps"] = s.eps;
  c["rope_theta"] = s.rope_theta;
  c["max_position_embeddings"] = s.max_pos;
  c["tie_word_embeddings"] = s.tied;
  c["torch_dtype"] = "bfloat16";
  const std::string like = s.like;
  if (like == "llama-3.1-8b") {
    c["architectures"].push_back("LlamaForCausalLM");
    c["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", 8.0},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 8192}};
    c["bos_token_id"] = 128000;
    c["eos_token_id"] = {128001, 128008, 128009};
    c["attention_bias"] = false;
    c["mlp_bias"] = false;
  } else if (like == "smollm2-135m") {
    c["architectures"].push_back("LlamaForCausalLM");
    c["bos_token_id"] = 1;
    c["eos_token_id"] = 2;
  } else if (gemma) {
    c["architectures"].push_back("Gemma3ForCausalLM");
    c["query_pre_attn_scalar"] = 256;
    c["rope_local_base_freq"] = 10000.0;
    c["sliding_window"] = like == "gemma3-1b" ? 512 : 1024;
    c["sliding_window_pattern"] = 6;
    c["hidden_activation"] = "gelu_pytorch_tanh";
    if (like == "gemma3-4b") c["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
    c["bos_token_id"] = 2;
    c["eos_token_id"] = {1, 106};
  } else {
    c["architectures"].push_back(moe ? "Qwen3MoeForCausalLM" : "Qwen3ForCausalLM");
    c["bos_token_id"] = 151643;
    c["eos_token_id"] = 151645;
    c["attention_bias"] = false;
    if (moe) {
      c["num_experts"] = s.experts;
      c["num_experts_per_tok"] = s.experts_per_tok;
      c["moe_intermediate_size"] = s.moe_intermediate;
      c["decoder_sparse_step"] = 1;
      c["mlp_only_layers"] = json::array();
      c["norm_topk_prob"] = true;
    }
  }
  if (q.quantized) {
    json qj = quant_json(qp);
    if (q.mode == QuantMode::kAffine) qj["mode"] = "affine";
    if (moe)
      for (std::int64_t l = 0; l < layers; ++l)
        qj["model.layers." + std::to_string(l) + ".mlp.gate"] = quant_json(router);
    c["quantization"] = qj;
    c["quantization_config"] = qj;
  }
  c["mlxcel_synth"] = {
      {"like", s.like},
      {"quant", q.name},
      {"seed", o.seed},
      {"note", "random weights with this model's shapes, written by mlxcel synth"}};
  SynthPlan plan;
  plan.config_json = c.dump(2) + "\n";
  plan.tensors = std::move(p.out);
  plan.tokenizer_family = s.tokenizer;
  return plan;
}

SynthReport write_checkpoint(const SynthOptions& o, const std::string& out_dir) {
  const auto t0 = std::chrono::steady_clock::now();
  SynthPlan pl = plan(o);
  SynthReport rep;

  // The tokenizer is resolved before anything is written, so a bad --tokenizer leaves no files.
  const TokenizerFiles* tf = nullptr;
  for (const auto& t : tokenizer_table())
    if (pl.tokenizer_family == t.family) tf = &t;
  std::string tok_src;
  if (!o.no_tokenizer && tf) {
    auto complete = [&](const fs::path& d) {
      for (const auto& [src, dst] : tf->files)
        if (!fs::is_regular_file(d / src)) return false;
      return true;
    };
    if (!o.tokenizer_dir.empty()) {
      fs::path d = o.tokenizer_dir;
      if (complete(d / tf->folder)) d /= tf->folder;
      if (!complete(d)) {
        std::string need;
        for (const auto& [src, dst] : tf->files)
          need += std::string(need.empty() ? "" : ", ") + src;
        throw_error(ErrorCategory::kBadInput, "--tokenizer " + o.tokenizer_dir + ": needs " + need +
                                                  " (directly or in a '" + tf->folder +
                                                  "' subfolder); or pass --no-tokenizer");
      }
      tok_src = d.string();
    } else {
      for (const auto& root : default_tokenizer_roots())
        if (complete(fs::path(root) / tf->folder)) {
          tok_src = (fs::path(root) / tf->folder).string();
          break;
        }
    }
  }

  fs::path out(out_dir);
  std::error_code ec;
  if (fs::exists(out) && !fs::is_directory(out))
    throw_error(ErrorCategory::kBadInput,
                out_dir + ": exists and is not a folder; choose another OUT");
  if (fs::is_directory(out) && !fs::is_empty(out)) {
    if (!o.force)
      throw_error(
          ErrorCategory::kBadInput,
          out_dir +
              ": folder is not empty; choose a new OUT or pass --force to replace its checkpoint");
    for (const auto& e : fs::directory_iterator(out)) {
      const std::string n = e.path().filename().string();
      if (n.rfind("model", 0) == 0 && (n.ends_with(".safetensors") || n.ends_with(".json")))
        fs::remove(e.path(), ec);
    }
  }
  fs::create_directories(out, ec);
  if (ec)
    throw_error(ErrorCategory::kBadInput,
                out_dir + ": cannot create folder (" + ec.message() + ")");

  // Shards: greedy in plan order at shard_bytes, as mlx-lm's make_shards.
  std::vector<Shard> shards(1);
  std::uint64_t cur = 0;
  for (std::size_t i = 0; i < pl.tensors.size(); ++i) {
    const std::uint64_t n = pl.tensors[i].nbytes();
    if (cur > 0 && cur + n > o.shard_bytes) {
      shards.emplace_back();
      cur = 0;
    }
    shards.back().tensors.push_back(i);
    cur += n;
  }
  const std::size_t ns = shards.size();
  json index_map = json::object();
  for (std::size_t k = 0; k < ns; ++k) {
    Shard& sh = shards[k];
    char buf[64];
    std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", k + 1, ns);
    sh.name = ns == 1 ? "model.safetensors" : buf;
    // The header lists tensors by name (sorted JSON object); data follows in plan order.
    nlohmann::json h = nlohmann::json::object();
    h["__metadata__"] = {{"format", "mlx"}};
    std::uint64_t off = 0;
    std::vector<std::uint64_t> rel;
    for (std::size_t i : sh.tensors) {
      const auto& t = pl.tensors[i];
      h[t.name] = {{"dtype", std::string(dtype_name(t.dtype))},
                   {"shape", t.shape},
                   {"data_offsets", {off, off + t.nbytes()}}};
      rel.push_back(off);
      off += t.nbytes();
      index_map[t.name] = sh.name;
    }
    std::string js = h.dump();
    while ((8 + js.size()) % 8 != 0) js.push_back(' ');  // aligned data, as the reference writer
    const std::uint64_t hl = js.size();
    sh.header.resize(8);
    for (int b = 0; b < 8; ++b) sh.header[b] = static_cast<char>((hl >> (8 * b)) & 0xff);
    sh.header += js;
    for (auto r : rel) sh.offsets.push_back(sh.header.size() + r);
    sh.size = sh.header.size() + off;
  }

  // Work items of at most 16 MiB, written by a pool of threads straight into the files.
  struct Item {
    std::size_t shard, slot;
    std::uint64_t b, e;
  };
  constexpr std::uint64_t kChunk = std::uint64_t{16} << 20;
  std::vector<Item> items;
  for (std::size_t k = 0; k < ns; ++k)
    for (std::size_t j = 0; j < shards[k].tensors.size(); ++j) {
      const std::uint64_t n = pl.tensors[shards[k].tensors[j]].nbytes();
      for (std::uint64_t b = 0; b < n; b += kChunk)
        items.push_back({k, j, b, std::min(n, b + kChunk)});
    }
  std::vector<int> fds(ns, -1);
  std::vector<std::string> partial(ns);
  auto cleanup = [&] {
    for (std::size_t k = 0; k < ns; ++k) {
      if (fds[k] >= 0) ::close(fds[k]);
      fds[k] = -1;
      if (!partial[k].empty()) fs::remove(partial[k], ec);
    }
  };
  for (std::size_t k = 0; k < ns; ++k) {
    partial[k] = (out / (shards[k].name + ".partial")).string();
    fds[k] = ::open(partial[k].c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fds[k] < 0) {
      const std::string why = std::strerror(errno);
      cleanup();
      throw_error(ErrorCategory::kBadInput, partial[k] + ": cannot create (" + why + ")");
    }
    if (::ftruncate(fds[k], static_cast<off_t>(shards[k].size)) != 0) {
      const std::string why = std::strerror(errno);
      cleanup();
      throw_error(ErrorCategory::kBadInput, partial[k] + ": cannot size to " +
                                                std::to_string(shards[k].size) + " bytes (" + why +
                                                ")");
    }
  }
  int threads = o.threads > 0 ? o.threads
                              : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(threads),
                                                   std::max<std::size_t>(1, items.size())));
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  std::string failure;
  std::mutex failure_mu;
  auto worker = [&] {
    std::vector<std::uint8_t> buf(kChunk);
    try {
      for (std::size_t i = next++; i < items.size() && !failed; i = next++) {
        const Item& it = items[i];
        const Shard& sh = shards[it.shard];
        const PlannedTensor& t = pl.tensors[sh.tensors[it.slot]];
        fill(t, it.b, it.e, buf.data());
        pwrite_all(fds[it.shard], buf.data(), it.e - it.b, sh.offsets[it.slot] + it.b,
                   partial[it.shard]);
      }
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lk(failure_mu);
      if (!failed.exchange(true)) failure = e.what();
    }
  };
  try {
    for (std::size_t k = 0; k < ns; ++k)
      pwrite_all(fds[k], reinterpret_cast<const std::uint8_t*>(shards[k].header.data()),
                 shards[k].header.size(), 0, partial[k]);
  } catch (...) {
    cleanup();
    throw;
  }
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
  if (failed) {
    cleanup();
    throw_error(ErrorCategory::kBadInput, failure);
  }
  for (std::size_t k = 0; k < ns; ++k) {
    ::close(fds[k]);
    fds[k] = -1;
    fs::rename(partial[k], out / shards[k].name, ec);
    if (ec) {
      cleanup();
      throw_error(ErrorCategory::kBadInput, partial[k] + ": cannot rename (" + ec.message() + ")");
    }
    partial[k].clear();
  }

  auto write_text = [&](const fs::path& p, const std::string& text) {
    std::ofstream f(p);
    f << text;
    if (!f) throw_error(ErrorCategory::kBadInput, p.string() + ": cannot write");
  };
  if (ns > 1) {
    json idx;
    idx["metadata"] = {{"total_size", pl.total_bytes()}};
    idx["weight_map"] = index_map;
    write_text(out / "model.safetensors.index.json", idx.dump(2) + "\n");
  }
  write_text(out / "config.json", pl.config_json);
  if (!tok_src.empty()) {
    for (const auto& [src, dst] : tf->files) {
      fs::copy_file(fs::path(tok_src) / src, out / dst, fs::copy_options::overwrite_existing, ec);
      if (ec)
        throw_error(ErrorCategory::kBadInput,
                    (fs::path(tok_src) / src).string() + ": cannot copy (" + ec.message() + ")");
      // Fixture files may be read-only; the copies belong to the new checkpoint.
      fs::permissions(out / dst, fs::perms::owner_read | fs::perms::owner_write,
                      fs::perm_options::add, ec);
    }
  }
  rep.bytes = pl.total_bytes();
  rep.tensors = pl.tensors.size();
  rep.shards = ns;
  rep.threads = threads;
  rep.tokenizer = tok_src;
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

}  // namespace mlxcel::synth
