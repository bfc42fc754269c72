#pragma once
// Decoders of HF tokenizer.json ("decoder" key): ByteLevel, Metaspace, Replace, ByteFallback,
// Fuse, Strip, WordPiece, BPEDecoder, Sequence. Like HF's decode_chain they map a list of token
// strings to a list of strings; the caller joins the result.
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace mlxcel::tok {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

std::unique_ptr<Decoder> make_decoder(const nlohmann::json& j);
std::unique_ptr<Decoder> make_byte_level_decoder();

}  // namespace mlxcel::tok
