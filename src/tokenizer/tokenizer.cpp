#include "tokenizer/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/log.h"
#include "tokenizer/bounded_json.h"
#include "tokenizer/bpe.h"
#include "tokenizer/json_ids.h"
#include "tokenizer/tiktoken.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace mlxcel {

using tok::TokenizerImpl;
namespace fs = std::filesystem;

namespace tok {

std::vector<int32_t> TokenizerImpl::encode(std::string_view text, bool add_special) const {
  std::vector<Segment> segs;
  segs.push_back({sanitize_utf8(text), -1, true});
  added.split(segs, false);
  for (auto& s : segs) {
    if (s.id < 0 && normalizer) s.text = normalizer->normalize(s.text);
  }
  added.split(segs, true);
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  std::vector<Piece> pieces;
  for (auto& s : segs) {
    if (s.id >= 0) {
      ids.push_back(s.id);
      continue;
    }
    if (s.text.empty()) continue;
    pieces.clear();
    pieces.push_back({std::move(s.text), s.at_start});
    if (pre_tokenizer) pre_tokenizer->apply(pieces);
    for (const auto& p : pieces) model->tokenize(p.text, ids);
  }
  if (add_special && post_processor) post_processor->process(ids);
  return ids;
}

std::optional<std::string> TokenizerImpl::id_to_token(int32_t id) const {
  if (const auto* t = added.by_id(id)) return t->content;
  if (const auto* s = model->id_to_token(id)) return *s;
  return std::nullopt;
}

std::string TokenizerImpl::decode(const int32_t* ids, size_t n, bool skip_special) const {
  std::vector<std::string> toks;
  toks.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (const auto* t = added.by_id(ids[i])) {
      if (skip_special && t->skippable) continue;
      toks.push_back(t->decode_content);
    } else if (const auto* s = model->id_to_token(ids[i])) {
      toks.push_back(*s);
    }
  }
  if (!decoder) {
    std::string out;
    for (size_t i = 0; i < toks.size(); ++i) out += (i ? " " : "") + toks[i];
    return out;
  }
  decoder->decode_chain(toks);
  std::string out;
  for (auto& t : toks) out += t;
  return out;
}

}  // namespace tok

namespace {

// tokenizer.json comes with a model download, so it is untrusted: the components built from it
// (normalizer / pre-tokenizer / decoder Sequences) recurse once per level, and real files nest a
// handful of levels. Deeper files are refused while parsing, before any recursive copy (the
// message says "nests deeper than 64 levels").
constexpr int kMaxJsonDepth = 64;

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw_error(ErrorCategory::kBadInput, "tokenizer: cannot open " + path);
  std::string error;
  auto j = json_util::parse_bounded(f, kMaxJsonDepth, &error);
  if (!j)
    throw_error(ErrorCategory::kBadInput, "tokenizer: " + path + " is not valid JSON: " + error);
  return std::move(*j);
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw_error(ErrorCategory::kBadInput, "tokenizer: cannot open " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// bos_token / eos_token in tokenizer_config.json: a string, an AddedToken dict, or null.
std::string token_string(const nlohmann::json& cfg, const char* key) {
  if (!cfg.is_object() || !cfg.contains(key)) return {};
  const auto& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content")) return v["content"].get<std::string>();
  return {};
}

tok::AddedToken parse_added(const nlohmann::json& j, int32_t id) {
  tok::AddedToken t;
  t.id = id;
  t.content = j.at("content").get<std::string>();
  t.single_word = j.value("single_word", false);
  t.lstrip = j.value("lstrip", false);
  t.rstrip = j.value("rstrip", false);
  t.special = j.value("special", false);
  t.normalized = j.value("normalized", !t.special);
  return t;
}

void add_config_tokens(TokenizerImpl& impl, const nlohmann::json& cfg) {
  if (!cfg.is_object() || !cfg.contains("added_tokens_decoder")) return;
  for (auto it = cfg["added_tokens_decoder"].begin(); it != cfg["added_tokens_decoder"].end(); ++it)
    impl.added.add(parse_added(it.value(), tok::string_token_id(it.key(), "added_tokens_decoder entry")));
}

std::string config_chat_template(const nlohmann::json& cfg) {
  if (!cfg.is_object() || !cfg.contains("chat_template")) return {};
  const auto& t = cfg["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array()) {
    for (const auto& e : t)
      if (e.value("name", "") == "default") return e.value("template", "");
    if (!t.empty()) return t[0].value("template", "");
  }
  return {};
}

// Fills bos/eos, the chat template and the id bound once the vocabulary is complete.
void finish(TokenizerImpl& impl, const nlohmann::json& cfg) {
  impl.added.build(impl.normalizer.get());
  impl.bos_token = token_string(cfg, "bos_token");
  impl.eos_token = token_string(cfg, "eos_token");
  auto lookup = [&](const std::string& s) -> std::optional<int32_t> {
    if (s.empty()) return std::nullopt;
    if (const auto* t = impl.added.by_content(s)) return t->id;
    return impl.model->token_to_id(s);
  };
  impl.bos_id = lookup(impl.bos_token);
  impl.eos_id = lookup(impl.eos_token);
  if (impl.eos_id) impl.eos_ids.push_back(*impl.eos_id);
  // End-of-turn markers of the chat formats mlx-community models use.
  for (const char* s : {"<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
                        "<|endoftext|>", "<|return|>", "<|end_of_text|>", "</s>"}) {
    const auto* t = impl.added.by_content(s);
    if (t && t->special && std::find(impl.eos_ids.begin(), impl.eos_ids.end(), t->id) == impl.eos_ids.end())
      impl.eos_ids.push_back(t->id);
  }
  impl.chat_template = config_chat_template(cfg);
  impl.id_bound = impl.model->id_bound();
  for (const auto& t : impl.added.tokens())
    impl.id_bound = std::max(impl.id_bound, static_cast<size_t>(t.id) + 1);
}

nlohmann::json read_config(const std::string& path) {
  if (path.empty() || !fs::exists(path)) return nlohmann::json::object();
  return read_json(path);
}

// Affix processor from add_bos_token / add_eos_token for formats without a post_processor.
void config_post_processor(TokenizerImpl& impl, const nlohmann::json& cfg, bool default_bos) {
  std::vector<int32_t> pre, suf;
  bool add_bos = cfg.is_object() && cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean()
                     ? cfg["add_bos_token"].get<bool>()
                     : default_bos;
  bool add_eos = cfg.is_object() && cfg.value("add_eos_token", false);
  if (add_bos && impl.bos_id) pre.push_back(*impl.bos_id);
  if (add_eos && impl.eos_id) suf.push_back(*impl.eos_id);
  if (!pre.empty() || !suf.empty()) impl.post_processor = tok::make_affix_processor(pre, suf);
}

}  // namespace

Tokenizer Tokenizer::from_json(const nlohmann::json& j, const nlohmann::json& config) {
  auto impl = std::make_shared<TokenizerImpl>();
  nlohmann::json cfg = config.is_object() ? config : nlohmann::json::object();
  impl->normalizer = tok::make_normalizer(j.value("normalizer", nlohmann::json()));
  impl->pre_tokenizer = tok::make_pre_tokenizer(j.value("pre_tokenizer", nlohmann::json()));
  impl->model = tok::make_model(j.at("model"));
  impl->post_processor = tok::make_post_processor(j.value("post_processor", nlohmann::json()));
  impl->decoder = tok::make_decoder(j.value("decoder", nlohmann::json()));
  if (j.contains("added_tokens")) {
    for (const auto& t : j["added_tokens"]) impl->added.add(parse_added(t, tok::json_token_id(t.at("id"), "added token")));
  }
  finish(*impl, cfg);
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_tokenizer_json(const std::string& path, const std::string& config_path) {
  auto j = read_json(path);
  try {
    return from_json(j, read_config(config_path));
  } catch (const nlohmann::json::exception& e) {
    throw_error(ErrorCategory::kBadInput, "tokenizer: " + path + ": unexpected structure: " + e.what());
  }
}

Tokenizer Tokenizer::from_vocab_merges(const std::string& vocab_path, const std::string& merges_path,
                                       const std::string& config_path) {
  auto cfg = read_config(config_path);
  auto vj = read_json(vocab_path);
  std::unordered_map<std::string, int32_t> vocab;
  for (auto it = vj.begin(); it != vj.end(); ++it) vocab.emplace(it.key(), tok::json_token_id(it.value(), "vocabulary token '" + it.key() + "'"));
  std::vector<std::pair<std::string, std::string>> merges;
  std::istringstream ms(read_text(merges_path));
  std::string line;
  size_t ln = 0;
  while (std::getline(ms, line)) {
    ++ln;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (ln == 1 && line.rfind("#version", 0) == 0)) continue;
    auto sp = line.find(' ');
    if (sp == std::string::npos)
      throw_error(ErrorCategory::kBadInput, merges_path + ":" + std::to_string(ln) + ": expected 'a b'");
    merges.emplace_back(line.substr(0, sp), line.substr(sp + 1));
  }
  auto impl = std::make_shared<TokenizerImpl>();
  impl->model = std::make_unique<tok::Bpe>(std::move(vocab), merges, tok::BpeOptions{});
  std::string cls = cfg.is_object() ? cfg.value("tokenizer_class", "") : "";
  bool prefix = cfg.is_object() && cfg.value("add_prefix_space", false);
  if (cls.rfind("Qwen2", 0) == 0 || cls.rfind("Qwen3", 0) == 0) {
    // As transformers' Qwen2Tokenizer builds it: NFC, Qwen2 Split regex, ByteLevel without regex.
    impl->normalizer = tok::make_normalizer({{"type", "NFC"}});
    impl->pre_tokenizer = tok::make_pre_tokenizer(
        {{"type", "Sequence"},
         {"pretokenizers",
          {{{"type", "Split"}, {"pattern", {{"Regex", tok::kQwen2Pattern}}}, {"behavior", "Isolated"}, {"invert", false}},
           {{"type", "ByteLevel"}, {"add_prefix_space", prefix}, {"use_regex", false}}}}});
  } else {
    // GPT-2 family (GPT2Tokenizer, CodeGenTokenizer, RobertaTokenizer...): ByteLevel with its regex.
    impl->pre_tokenizer = tok::make_pre_tokenizer({{"type", "ByteLevel"}, {"add_prefix_space", prefix}, {"use_regex", true}});
  }
  impl->decoder = tok::make_byte_level_decoder();
  add_config_tokens(*impl, cfg);
  if (impl->added.empty()) {
    // GPT2Tokenizer's default unk/bos/eos is <|endoftext|>.
    if (auto id = impl->model->token_to_id("<|endoftext|>")) {
      tok::AddedToken eot;
      eot.id = *id;
      eot.content = "<|endoftext|>";
      eot.normalized = false;
      eot.special = true;
      impl->added.add(eot);
      if (!cfg.contains("eos_token")) cfg["eos_token"] = "<|endoftext|>";
      if (!cfg.contains("bos_token")) cfg["bos_token"] = "<|endoftext|>";
    }
  }
  finish(*impl, cfg);
  config_post_processor(*impl, cfg, false);
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_tiktoken(const std::string& model_path, const std::string& config_path) {
  auto cfg = read_config(config_path);
  auto data = tok::load_tiktoken(model_path);
  auto impl = std::make_shared<TokenizerImpl>();
  tok::BpeOptions o;
  o.ignore_merges = true;
  impl->model = std::make_unique<tok::Bpe>(std::move(data.vocab), data.merges, o);
  impl->pre_tokenizer = tok::make_pre_tokenizer(
      {{"type", "Sequence"},
       {"pretokenizers",
        {{{"type", "Split"}, {"pattern", {{"Regex", tok::kLlama3Pattern}}}, {"behavior", "Isolated"}, {"invert", false}},
         {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}});
  impl->decoder = tok::make_byte_level_decoder();
  add_config_tokens(*impl, cfg);
  if (impl->added.empty())
    LOG_WARN("tokenizer: " << model_path << " has no tokenizer_config.json added_tokens_decoder; "
                           << "special tokens such as <|begin_of_text|> will be split as text");
  finish(*impl, cfg);
  // Meta's published Llama 3 tokenizer.json prepends <|begin_of_text|> (TemplateProcessing).
  config_post_processor(*impl, cfg, true);
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::load(const std::string& dir) {
  fs::path d(dir);
  if (!fs::is_directory(d))
    throw_error(ErrorCategory::kBadInput, "tokenizer: " + dir + " is not a directory");
  std::string cfg = (d / "tokenizer_config.json").string();
  Tokenizer t = [&] {
    if (fs::exists(d / "tokenizer.json")) return from_tokenizer_json((d / "tokenizer.json").string(), cfg);
    if (fs::exists(d / "vocab.json") && fs::exists(d / "merges.txt"))
      return from_vocab_merges((d / "vocab.json").string(), (d / "merges.txt").string(), cfg);
    if (fs::exists(d / "tokenizer.model")) return from_tiktoken((d / "tokenizer.model").string(), cfg);
    throw_error(ErrorCategory::kBadInput, "tokenizer: " + dir +
                                              " has no tokenizer.json, vocab.json + merges.txt or "
                                              "tokenizer.model; download the full model repository");
  }();
  if (t.impl_->chat_template.empty() && fs::exists(d / "chat_template.jinja")) {
    auto impl = std::const_pointer_cast<TokenizerImpl>(t.impl_);
    impl->chat_template = read_text((d / "chat_template.jinja").string());
  }
  return t;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  return impl_->encode(text, add_special_tokens);
}
std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  return impl_->decode(ids.data(), ids.size(), skip_special_tokens);
}
std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (const auto* t = impl_->added.by_content(std::string(token))) return t->id;
  return impl_->model->token_to_id(token);
}
std::optional<std::string> Tokenizer::id_to_token(int32_t id) const { return impl_->id_to_token(id); }
size_t Tokenizer::vocab_size() const { return impl_->id_bound; }
std::optional<int32_t> Tokenizer::bos_id() const { return impl_->bos_id; }
std::optional<int32_t> Tokenizer::eos_id() const { return impl_->eos_id; }
const std::vector<int32_t>& Tokenizer::eos_ids() const { return impl_->eos_ids; }
const std::string& Tokenizer::bos_token() const { return impl_->bos_token; }
const std::string& Tokenizer::eos_token() const { return impl_->eos_token; }
bool Tokenizer::is_special(int32_t id) const {
  const auto* t = impl_->added.by_id(id);
  return t && t->special;
}
const std::string& Tokenizer::chat_template() const { return impl_->chat_template; }

}  // namespace mlxcel
