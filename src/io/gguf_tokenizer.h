#pragma once
// Rebuilds Hugging Face tokenizer files from a GGUF vocabulary (`tokenizer.ggml.*` keys), so a
// converted checkpoint loads in mlxcel, HF `tokenizers` and mlx-lm alike.
//   tokenizer.ggml.model "gpt2": byte-level BPE; the pre-tokenizer comes from tokenizer.ggml.pre
//   (the names llama.cpp's converter writes), see supported_pre_types().
// Other tokenizer models (SentencePiece "llama", "bert", "t5", "rwkv") and unknown `pre` names
// are refused with kUnsupported naming what is missing.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/gguf.h"

namespace mlxcel::gguf {

struct TokenizerFiles {
  nlohmann::json tokenizer;         // tokenizer.json
  nlohmann::json tokenizer_config;  // tokenizer_config.json
  std::vector<std::int64_t> eos_ids;
  std::int64_t bos_id = -1;
};

// `context_length` becomes model_max_length (0: left out).
TokenizerFiles build_tokenizer(const File& f, std::int64_t context_length);

std::vector<std::string> supported_pre_types();

}  // namespace mlxcel::gguf
