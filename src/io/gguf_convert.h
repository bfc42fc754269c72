#pragma once
// GGUF -> MLX checkpoint (`mlxcel convert --from-gguf`). Writes config.json, model.safetensors
// (MLX tensor names), tokenizer.json, tokenizer_config.json and mlxcel_convert.json (what each
// tensor became). Mappings:
// - Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 (blocks of 32) are exactly MLX affine 4/5/8-bit with
//   group size 32: Q4_1 / Q5_1 scale = d, bias = m; Q4_0 scale = d, bias = -8d; Q5_0 bias = -16d;
//   Q8_0 bias = -128d. With float16 scales every dequantized value equals ggml's in fp32 (d is
//   fp16 and d*q is exact in fp32; only a zero's sign can differ: ggml's d*(q-8) is -0.0 for
//   d < 0, d*q + bias is +0.0), so the mapping is lossless; float32 is lossless too (and runs
//   in fp32 activations), bfloat16 rounds the scales.
// - F32 / F16 / BF16 are cast to the output dtype (norms, biases, unquantized matrices).
// - Q4_K / Q5_K super-blocks are 8 groups of 32 with scale d*sc and bias -dmin*m: exact with
//   float32 scales, rounded to float16/bfloat16 otherwise ("rounded scales").
// - Q6_K (groups of 16) is dequantized and requantized to affine 8-bit, group size 32, with
//   MLX's quantizer; the largest absolute error is reported.
// - Other ggml types (Q2_K, Q3_K, IQ*, TQ*, MXFP4) are refused, naming the tensor and its type.
// llama.cpp's converter permutes the q/k projection rows of llama-family models for its RoPE
// layout; that permutation is undone here so the weights are in Hugging Face / MLX order. It
// stores Gemma's norm weights as 1 + w (rounded in the checkpoint's dtype); 1 is subtracted in
// fp32, which recovers w only where w + 1 was exact (docs/convert.md).
// Families: llama (and Mistral, which llama.cpp writes as llama), qwen2, qwen3, qwen3moe,
// gemma3 (-> gemma3_text), phi3; see archs() in gguf_convert.cpp.
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace mlxcel::gguf {

struct ConvertOptions {
  DType dtype = DType::kF16;  // scales, biases and float tensors: kF16, kBF16 or kF32
};

struct TensorReport {
  std::string gguf_name;
  std::string mlx_name;  // the module path for quantized weights, else the tensor name
  std::string gguf_type;
  std::string mapping;       // "exact affine", "cast", "copy", or "rounded scales"
  int bits = 0;              // affine bits when quantized
  double max_abs_error = 0;  // requantized tensors: largest |MLX value - ggml value|
};

struct ConvertReport {
  std::string architecture;  // GGUF general.architecture
  std::string model_type;    // config.json model_type
  std::vector<TensorReport> tensors;
  std::uint64_t bytes_written = 0;
  std::size_t exact = 0;        // quantized tensors mapped losslessly
  std::size_t inexact = 0;      // quantized tensors whose scales or biases were rounded
  std::size_t requantized = 0;  // Q6_K tensors, requantized to affine 8-bit
  double max_requant_error = 0;
  std::size_t dense = 0;
  std::size_t shifted = 0;  // Gemma norms stored by llama.cpp as 1 + w, converted back to w
};

ConvertReport convert_gguf(const std::string& gguf_path, const std::string& out_dir,
                           const ConvertOptions& opt);

std::vector<std::string> supported_architectures();

}  // namespace mlxcel::gguf
