#pragma once
// Normalizers of HF tokenizer.json ("normalizer" key): NFC, NFD, NFKC, NFKD, Lowercase, Strip,
// StripAccents, Prepend, Replace, BertNormalizer, Sequence. Each maps a UTF-8 string to a UTF-8
// string; offsets are not tracked because mlxcel only needs ids.
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace mlxcel::tok {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual std::string normalize(std::string_view s) const = 0;
};

// nullptr for a JSON null. Throws kUnsupported for a type we do not implement (e.g. Precompiled).
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j);

}  // namespace mlxcel::tok
