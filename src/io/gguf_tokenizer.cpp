#include "io/gguf_tokenizer.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <numeric>
#include <unordered_map>

#include "core/error.h"

namespace mlxcel::gguf {

namespace {

using nlohmann::json;

// GPT-2's split rule (HF ByteLevel's use_regex pattern is this one).
// Qwen2 and Llama 3 patterns as their tokenizer.json files carry them.
constexpr const char* kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

json byte_level(bool use_regex) {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", false},
          {"trim_offsets", true},
          {"use_regex", use_regex}};
}

json split_then_byte_level(const char* pattern) {
  return {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"},
             {"pattern", {{"Regex", pattern}}},
             {"behavior", "Isolated"},
             {"invert", false}},
            byte_level(false)}}};
}

struct PreType {
  const char* name;
  json (*make)();
  bool ignore_merges;
};

// The `pre` names llama.cpp's convert_hf_to_gguf.py writes, grouped the way llama-vocab.cpp groups
// them by split rule.
const std::vector<PreType>& pre_types() {
  static const std::vector<PreType> kTypes = {
      // StarCoder-style vocabularies (SmolLM): every digit alone, then GPT-2 byte-level splitting.
      {"smollm",
       [] {
         return json{{"type", "Sequence"},
                     {"pretokenizers",
                      {{{"type", "Digits"}, {"individual_digits", true}}, byte_level(true)}}};
       },
       false},
      {"starcoder",
       [] {
         return json{{"type", "Sequence"},
                     {"pretokenizers",
                      {{{"type", "Digits"}, {"individual_digits", true}}, byte_level(true)}}};
       },
       false},
      {"gpt-2", [] { return byte_level(true); }, false},
      {"qwen2", [] { return split_then_byte_level(kQwen2Pattern); }, false},
      {"llama-bpe", [] { return split_then_byte_level(kLlama3Pattern); }, true},
  };
  return kTypes;
}

// SentencePiece BPE (`tokenizer.ggml.model` "llama") as Hugging Face converts it (transformers'
// LlamaConverter / SentencePieceExtractor): a BPE model with byte fallback whose merges are, for
// every piece in descending score order (ties in id order), each split of the piece into two
// vocabulary pieces at a character boundary, ordered by the ids of the two halves. Merging the
// lowest-ranked pair then merges the highest-scoring piece first, as SentencePiece (and
// llama.cpp's SPM tokenizer) do. Control and user-defined tokens are matched as added tokens and
// take no part in merges.
constexpr std::size_t kMaxSplitBytes = 1024;

json spm_merges(const std::string& file, const std::vector<std::string>& tokens,
                const std::vector<double>& scores, const std::vector<std::int64_t>& types) {
  auto mergeable = [&](std::size_t i) { return types.empty() || (types[i] != 3 && types[i] != 4); };
  std::unordered_map<std::string, std::int64_t> id;
  id.reserve(tokens.size() * 2);
  for (std::size_t i = 0; i < tokens.size(); ++i)
    if (mergeable(i)) id.emplace(tokens[i], static_cast<std::int64_t>(i));
  std::vector<std::size_t> order(tokens.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return scores[a] > scores[b]; });
  json merges = json::array();
  std::vector<std::pair<std::int64_t, std::int64_t>> local;
  for (const std::size_t i : order) {
    if (!mergeable(i)) continue;
    const std::string& t = tokens[i];
    // Splitting costs O(length^2); real SentencePiece pieces are short (16 characters by default,
    // Gemma's longest ~100 bytes), so a longer one is taken as unreachable by merges, as it would
    // be for any piece with no split.
    if (t.size() > kMaxSplitBytes) continue;
    local.clear();
    for (std::size_t k = 1; k < t.size(); ++k) {
      if ((static_cast<unsigned char>(t[k]) & 0xC0) == 0x80) continue;  // inside a character
      auto l = id.find(t.substr(0, k));
      if (l == id.end()) continue;
      auto r = id.find(t.substr(k));
      if (r != id.end()) local.emplace_back(l->second, r->second);
    }
    std::sort(local.begin(), local.end());
    for (const auto& [l, r] : local)
      merges.push_back(tokens[static_cast<std::size_t>(l)] + " " +
                       tokens[static_cast<std::size_t>(r)]);
  }
  if (merges.empty())
    throw_error(
        ErrorCategory::kBadInput,
        file + ": the SentencePiece vocabulary has no piece made of two others (no merges)");
  return merges;
}

json replace_space(const char* from, const char* to) {
  return {{"type", "Replace"}, {"pattern", {{"String", from}}}, {"content", to}};
}

}  // namespace

std::vector<std::string> supported_pre_types() {
  std::vector<std::string> out;
  for (const auto& p : pre_types()) out.push_back(p.name);
  return out;
}

TokenizerFiles build_tokenizer(const File& f, std::int64_t context_length) {
  const std::string model = f.get_string_or("tokenizer.ggml.model", "");
  if (model.empty())
    throw_error(ErrorCategory::kUnsupported,
                f.path() + ": no tokenizer.ggml.model key, so there is no vocabulary to convert");
  if (model != "gpt2" && model != "llama")
    throw_error(ErrorCategory::kUnsupported,
                f.path() + ": tokenizer model \"" + model +
                    "\" is not supported yet (supported: gpt2 byte-level BPE, llama "
                    "SentencePiece BPE); convert the original Hugging Face checkpoint instead");
  const bool spm = model == "llama";
  const std::string pre = f.get_string_or("tokenizer.ggml.pre", "");
  const PreType* pt = nullptr;
  for (const auto& p : pre_types())
    if (pre == p.name) pt = &p;
  if (!pt && !spm) {
    std::string list;
    for (const auto& n : supported_pre_types()) list += (list.empty() ? "" : ", ") + n;
    throw_error(ErrorCategory::kUnsupported,
                f.path() + ": pre-tokenizer \"" + pre +
                    "\" (tokenizer.ggml.pre) is not supported (supported: " + list + ")");
  }

  const std::vector<std::string> tokens = f.get_string_array("tokenizer.ggml.tokens");
  const std::vector<std::string> merges =
      spm ? std::vector<std::string>{} : f.get_string_array("tokenizer.ggml.merges");
  std::vector<std::int64_t> types = f.get_int_array_or_empty("tokenizer.ggml.token_type");
  if (!types.empty() && types.size() != tokens.size())
    throw_error(ErrorCategory::kBadInput, f.path() + ": tokenizer.ggml.token_type has " +
                                              std::to_string(types.size()) + " entries for " +
                                              std::to_string(tokens.size()) + " tokens");
  if (tokens.empty())
    throw_error(ErrorCategory::kBadInput, f.path() + ": tokenizer.ggml.tokens is empty");
  std::vector<double> scores;
  if (spm) {
    scores = f.get_float_array_or_empty("tokenizer.ggml.scores");
    if (scores.size() != tokens.size())
      throw_error(ErrorCategory::kBadInput,
                  f.path() +
                      ": a SentencePiece vocabulary needs tokenizer.ggml.scores with one "
                      "score per token (" +
                      std::to_string(scores.size()) + " scores for " +
                      std::to_string(tokens.size()) + " tokens)");
    if (f.get_bool_or("tokenizer.ggml.remove_extra_whitespaces", false))
      throw_error(ErrorCategory::kUnsupported,
                  f.path() +
                      ": tokenizer.ggml.remove_extra_whitespaces (whitespace-collapsing "
                      "SentencePiece normalization) is not supported");
  }

  json vocab = json::object();
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (vocab.contains(tokens[i]))
      throw_error(ErrorCategory::kBadInput,
                  f.path() + ": token \"" + tokens[i] + "\" appears twice in the vocabulary");
    vocab[tokens[i]] = i;
  }
  for (const auto& m : merges) {
    const auto sp = m.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 == m.size() ||
        m.find(' ', sp + 1) != std::string::npos)
      throw_error(ErrorCategory::kBadInput,
                  f.path() + ": merge \"" + m + "\" is not two tokens separated by one space");
  }

  auto id_key = [&](const char* key) -> std::int64_t {
    const Value* v = f.find(key);
    if (!v) return -1;
    const std::uint64_t id = f.get_uint(key);
    if (id >= tokens.size())
      throw_error(ErrorCategory::kBadInput, f.path() + ": " + key + " = " + std::to_string(id) +
                                                " is outside the vocabulary");
    return static_cast<std::int64_t>(id);
  };
  const std::int64_t bos = id_key("tokenizer.ggml.bos_token_id");
  const std::int64_t eos = id_key("tokenizer.ggml.eos_token_id");
  const std::int64_t eot = id_key("tokenizer.ggml.eot_token_id");
  const std::int64_t unk = id_key("tokenizer.ggml.unknown_token_id");
  const std::int64_t pad = id_key("tokenizer.ggml.padding_token_id");
  // llama.cpp adds BOS by default for SentencePiece vocabularies, not for byte-level BPE.
  const bool add_bos = f.get_bool_or("tokenizer.ggml.add_bos_token", spm) && bos >= 0;
  const bool add_eos = f.get_bool_or("tokenizer.ggml.add_eos_token", false) && eos >= 0;

  // Whitespace after a Phi-3 chat token belongs to the token: Phi-3's tokenizer.json marks them
  // rstrip, and llama.cpp (llama-vocab.cpp), whose GGUF has no such attribute, sets it for every
  // special token but <unk>, <s> and <|endoftext|> when general.name contains "phi-3" or "phi3".
  std::string name = f.get_string_or("general.name", "");
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const bool phi3 =
      name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos;

  // llama.cpp token types: 1 normal, 2 unknown, 3 control, 4 user defined, 5 unused, 6 byte.
  json added = json::array();
  json added_decoder = json::object();
  for (std::size_t i = 0; i < types.size(); ++i) {
    // SentencePiece's unknown piece is a special added token in Hugging Face's files too.
    if (types[i] != 3 && types[i] != 4 && !(spm && types[i] == 2)) continue;
    const bool special = types[i] != 4;
    const bool rstrip =
        phi3 && tokens[i] != "<unk>" && tokens[i] != "<s>" && tokens[i] != "<|endoftext|>";
    json t = {{"id", i},          {"content", tokens[i]}, {"single_word", false}, {"lstrip", false},
              {"rstrip", rstrip}, {"normalized", false},  {"special", special}};
    added.push_back(t);
    json d = t;
    d.erase("id");
    added_decoder[std::to_string(i)] = d;
  }

  json post;
  if (spm) {
    json single = json::array(), pair = json::array(), special = json::object();
    auto special_item = [&](std::int64_t i) {
      special[tokens[i]] = {{"id", tokens[i]}, {"ids", {i}}, {"tokens", {tokens[i]}}};
      return json{{"SpecialToken", {{"id", tokens[i]}, {"type_id", 0}}}};
    };
    for (const char* seq : {"A", "B"}) {
      json& dst = seq[0] == 'A' ? single : pair;
      if (add_bos) dst.push_back(special_item(bos));
      dst.push_back({{"Sequence", {{"id", seq}, {"type_id", seq[0] == 'A' ? 0 : 1}}}});
      if (add_eos) dst.push_back(special_item(eos));
      if (seq[0] == 'A') pair = single;
    }
    post = {{"type", "TemplateProcessing"},
            {"single", single},
            {"pair", pair},
            {"special_tokens", special}};
  } else if (add_bos) {
    json bos_item = {{"SpecialToken", {{"id", tokens[bos]}, {"type_id", 0}}}};
    post = {{"type", "TemplateProcessing"},
            {"single", {bos_item, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
            {"pair",
             {bos_item,
              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
              bos_item,
              {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
            {"special_tokens",
             {{tokens[bos], {{"id", tokens[bos]}, {"ids", {bos}}, {"tokens", {tokens[bos]}}}}}}};
  } else {
    post = {{"type", "ByteLevel"},
            {"add_prefix_space", false},
            {"trim_offsets", false},
            {"use_regex", false}};
  }

  TokenizerFiles out;
  if (spm) {
    // Llama 2's own tokenizer.json layout: spaces become U+2581 and, unless the GGUF says
    // add_space_prefix = false (Gemma), one is prepended to each text segment (llama.cpp
    // prefixes the first segment and each one after a special token, which is what a Prepend
    // normalizer does once added tokens have split the text). Byte-fallback <0xNN> pieces
    // decode back to bytes.
    const bool prefix = f.get_bool_or("tokenizer.ggml.add_space_prefix", true);
    json normalizer = replace_space(" ", "\u2581");
    if (prefix)
      normalizer = {{"type", "Sequence"},
                    {"normalizers",
                     {{{"type", "Prepend"}, {"prepend", "\u2581"}}, replace_space(" ", "\u2581")}}};
    json decoders = {replace_space("\u2581", " "), {{"type", "ByteFallback"}}, {{"type", "Fuse"}}};
    if (prefix)
      decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    out.tokenizer = {{"version", "1.0"},
                     {"truncation", nullptr},
                     {"padding", nullptr},
                     {"added_tokens", added},
                     {"normalizer", normalizer},
                     {"pre_tokenizer", nullptr},
                     {"post_processor", post},
                     {"decoder", {{"type", "Sequence"}, {"decoders", decoders}}},
                     {"model",
                      {{"type", "BPE"},
                       {"dropout", nullptr},
                       {"unk_token", unk >= 0 ? json(tokens[unk]) : json(nullptr)},
                       {"continuing_subword_prefix", nullptr},
                       {"end_of_word_suffix", nullptr},
                       {"fuse_unk", true},
                       {"byte_fallback", true},
                       {"ignore_merges", false},
                       {"vocab", vocab},
                       {"merges", spm_merges(f.path(), tokens, scores, types)}}}};
  } else {
    out.tokenizer = {{"version", "1.0"},
                     {"truncation", nullptr},
                     {"padding", nullptr},
                     {"added_tokens", added},
                     {"normalizer", nullptr},
                     {"pre_tokenizer", pt->make()},
                     {"post_processor", post},
                     {"decoder",
                      {{"type", "ByteLevel"},
                       {"add_prefix_space", true},
                       {"trim_offsets", true},
                       {"use_regex", true}}},
                     {"model",
                      {{"type", "BPE"},
                       {"dropout", nullptr},
                       {"unk_token", nullptr},
                       {"continuing_subword_prefix", nullptr},
                       {"end_of_word_suffix", nullptr},
                       {"fuse_unk", false},
                       {"byte_fallback", false},
                       {"ignore_merges", pt->ignore_merges},
                       {"vocab", vocab},
                       {"merges", merges}}}};
  }

  json cfg = {{"tokenizer_class", "PreTrainedTokenizerFast"},
              {"clean_up_tokenization_spaces", false},
              {"add_bos_token", add_bos},
              {"add_eos_token", add_eos},
              {"added_tokens_decoder", added_decoder}};
  if (bos >= 0) cfg["bos_token"] = tokens[bos];
  if (eos >= 0) cfg["eos_token"] = tokens[eos];
  if (unk >= 0) cfg["unk_token"] = tokens[unk];
  if (pad >= 0) cfg["pad_token"] = tokens[pad];
  if (context_length > 0) cfg["model_max_length"] = context_length;
  if (const Value* t = f.find("tokenizer.chat_template")) {
    if (t->type != ValueType::kString)
      throw_error(ErrorCategory::kBadInput,
                  f.path() + ": tokenizer.chat_template must be a string");
    cfg["chat_template"] = t->s;
  }
  out.tokenizer_config = cfg;
  out.bos_id = bos;
  if (eos >= 0) out.eos_ids.push_back(eos);
  if (eot >= 0 && eot != eos) out.eos_ids.push_back(eot);
  return out;
}

}  // namespace mlxcel::gguf
