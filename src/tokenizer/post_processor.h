#pragma once
// Post-processors of HF tokenizer.json ("post_processor" key), single-sequence form only:
// TemplateProcessing, RobertaProcessing, BertProcessing, ByteLevel (no id change), Sequence.
#include <cstdint>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

namespace mlxcel::tok {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Adds the special tokens around one encoded sequence.
  virtual void process(std::vector<int32_t>& ids) const = 0;
};

std::unique_ptr<PostProcessor> make_post_processor(const nlohmann::json& j);
// Prefix / suffix ids (e.g. BOS for tokenizers built from vocab.json or tiktoken files).
std::unique_ptr<PostProcessor> make_affix_processor(std::vector<int32_t> prefix, std::vector<int32_t> suffix);

}  // namespace mlxcel::tok
