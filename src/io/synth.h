#pragma once
// Random-weight MLX checkpoints with the shapes of real models (`mlxcel synth`), so benchmarks
// never need downloads. The writer emits the quantized bytes directly — random codes plus
// scales/biases chosen so the dequantized weights have mean 0 and standard deviation
// 1/sqrt(fan_in) (norm weights 1), which keeps activations finite through every layer — in
// parallel, streaming each shard to disk with pwrite. Names, shapes, dtypes, config.json
// `quantization` and shard/index layout follow mlx-lm's save (MLX_FORMATS.md §1, §2, §4).
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace mlxcel::synth {

struct SynthOptions {
  std::string like;               // a name of shape_names()
  std::string quant = "affine4";  // affine4, affine8, mxfp4, mxfp8, nvfp4, bf16
  int group_size = 0;             // 0 = the mode's default (affine 64)
  std::uint64_t seed = 0;
  int layers = 0;          // 0 = the real model's layer count (tests use 2)
  std::int64_t vocab = 0;  // 0 = the real vocabulary (tests shrink it: MLX's CPU matmuls are slow)
  std::string tokenizer_dir;  // "" = search the fixture folders (see default_tokenizer_roots)
  bool no_tokenizer = false;
  bool force = false;  // replace the checkpoint files in a non-empty OUT
  int threads = 0;     // 0 = hardware concurrency
  std::uint64_t shard_bytes = std::uint64_t{5} << 30;  // mlx-lm's make_shards limit (5 GiB)
};

// One tensor of the plan, with what fills it.
enum class Fill : std::uint8_t {
  kRandomBytes = 0,  // packed affine / fp4 codes: uniform over every code
  kFp8Gauss = 1,     // packed E4M3 codes drawn from a normal distribution (mxfp8)
  kAffineScale = 2,  // bf16 scales, random sign and +-25 % spread per group
  kAffineBias = 3,   // bf16 biases centring the group: -scale * (2^bits - 1) / 2
  kScaleByte = 4,    // one E8M0 / E4M3 byte for the whole tensor (fp modes)
  kBf16Uniform = 5,  // unquantized weight, uniform with the target standard deviation
  kBf16Const = 6,    // norm weights
};

struct PlannedTensor {
  std::string name;
  DType dtype = DType::kU8;
  Shape shape;
  Fill fill = Fill::kRandomBytes;
  float sigma = 0;        // target standard deviation of the dequantized weight
  float value = 0;        // kBf16Const value; kScaleByte: the byte
  int bits = 0;           // affine bits (bias centring)
  std::uint64_t key = 0;  // RNG stream; a weight's scales and biases share one
  std::uint64_t nbytes() const;
};

struct SynthPlan {
  std::string config_json;             // the config.json text
  std::vector<PlannedTensor> tensors;  // mlx-lm parameter-tree order (what shards split on)
  std::string tokenizer_family;        // fixture tokenizer folder used for this shape
  std::uint64_t total_bytes() const;
};

struct SynthReport {
  std::uint64_t bytes = 0;  // tensor bytes written
  std::size_t tensors = 0;
  std::size_t shards = 0;
  double seconds = 0;
  int threads = 0;
  std::string tokenizer;  // folder copied from, or "" when none
};

std::vector<std::string> shape_names();
std::vector<std::string> quant_names();

// The plan for a shape and quantization (no I/O). Throws kBadInput for an unknown --like or
// --quant or a group size the mode does not allow.
SynthPlan plan(const SynthOptions& o);

// Folders searched for the fixture tokenizers when --tokenizer is not given: $MLXCEL_TOKENIZERS,
// ./shared/fixtures/tokenizers, ../shared/fixtures/tokenizers, /work/shared/fixtures/tokenizers.
std::vector<std::string> default_tokenizer_roots();

// Writes OUT/config.json, the shards (+ model.safetensors.index.json when more than one) and the
// tokenizer files. Throws kBadInput when OUT is a non-empty folder and !force.
SynthReport write_checkpoint(const SynthOptions& o, const std::string& out_dir);

}  // namespace mlxcel::synth
