// `mlxcel convert --from-gguf FILE.gguf OUT_DIR [--dtype float16|bfloat16]`: a GGUF file
// (llama.cpp) to an MLX model folder that mlxcel and mlx-lm load; see io/gguf_convert.h for the
// mappings.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/gguf_convert.h"
#include "tools/cli/args.h"
#include "tools/cli/command.h"

namespace mlxcel::cli {
namespace {

int cmd_convert(const std::vector<std::string>& args) {
  std::string gguf, out, dtype = "float16";
  auto app_owner = make_app(
      "convert",
      "Converts a GGUF file (llama.cpp) into an MLX model folder.\n"
      "Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 map exactly to MLX affine 4/5/8-bit, group size 32\n"
      "(Q4_K and Q5_K too with --dtype float32; Q6_K is requantized to 8-bit);\n"
      "F32/F16/BF16 tensors are cast to --dtype. The vocabulary (byte-level BPE or SentencePiece)\n"
      "becomes tokenizer.json. Families: llama/mistral, qwen2, qwen3, qwen3moe, gemma3, phi3.");
  CLI::App& app = *app_owner;
  app.add_option("--from-gguf", gguf, "the GGUF file to convert")->type_name("FILE")->required();
  app.add_option("out_dir", out, "folder to write (created if missing)")
      ->type_name("OUT_DIR")
      ->required();
  app.add_option("--dtype", dtype,
                 "dtype of scales, biases and float tensors (default float16: keeps GGUF's fp16 "
                 "scales exact)")
      ->type_name("float16|bfloat16|float32")
      ->check(CLI::IsMember({"float16", "bfloat16", "float32"}));
  if (!parse_args(app, args)) return 0;
  gguf::ConvertOptions opt;
  opt.dtype = dtype == "bfloat16" ? DType::kBF16 : dtype == "float32" ? DType::kF32 : DType::kF16;
  const auto t0 = std::chrono::steady_clock::now();
  const auto rep = gguf::convert_gguf(gguf, out, opt);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr,
               "converted %s (%s -> model_type %s): %zu quantized tensors exact, %zu with rounded "
               "scales, %zu float "
               "tensors; %.1f MiB written to %s in %.1f s\n",
               gguf.c_str(), rep.architecture.c_str(), rep.model_type.c_str(), rep.exact,
               rep.inexact, rep.dense, rep.bytes_written / 1048576.0, out.c_str(), s);
  if (rep.shifted > 0)
    std::fprintf(stderr,
                 "%zu Gemma norm weights stored by llama.cpp as 1 + w were converted back to w "
                 "(exact only where w + 1 was; see docs/convert.md)\n",
                 rep.shifted);
  if (rep.requantized > 0)
    std::fprintf(stderr,
                 "requantized %zu Q6_K tensors to affine 8-bit: largest absolute error %.3g\n",
                 rep.requantized, rep.max_requant_error);
  return 0;
}

}  // namespace

MLXCEL_COMMAND("convert", "convert a GGUF file into an MLX model folder (--from-gguf)",
               cmd_convert);

}  // namespace mlxcel::cli
