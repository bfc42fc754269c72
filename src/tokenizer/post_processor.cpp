#include "tokenizer/post_processor.h"

#include "core/error.h"
#include "tokenizer/json_ids.h"

namespace mlxcel::tok {
namespace {

class Affix : public PostProcessor {
 public:
  Affix(std::vector<int32_t> pre, std::vector<int32_t> suf)
      : pre_(std::move(pre)), suf_(std::move(suf)) {}
  void process(std::vector<int32_t>& ids) const override {
    ids.insert(ids.begin(), pre_.begin(), pre_.end());
    ids.insert(ids.end(), suf_.begin(), suf_.end());
  }

 private:
  std::vector<int32_t> pre_, suf_;
};

// TemplateProcessing "single": a list of {SpecialToken:{id}} and {Sequence:{id:"A"}} items; the
// special token's ids come from the "special_tokens" table.
class Template : public PostProcessor {
 public:
  explicit Template(const nlohmann::json& j) {
    const auto& table = j.value("special_tokens", nlohmann::json::object());
    for (const auto& item : j.at("single")) {
      if (item.contains("Sequence")) {
        parts_.push_back({true, {}});
      } else if (item.contains("SpecialToken")) {
        auto name = item["SpecialToken"].at("id").get<std::string>();
        if (!table.contains(name))
          throw_error(ErrorCategory::kBadInput, "tokenizer.json: TemplateProcessing uses '" + name +
                                                    "' missing from special_tokens");
        std::vector<int32_t> ids;
        for (const auto& id : table[name].at("ids"))
          ids.push_back(json_token_id(id, "special token '" + name + "'"));
        parts_.push_back({false, std::move(ids)});
      }
    }
  }
  void process(std::vector<int32_t>& ids) const override {
    std::vector<int32_t> out;
    out.reserve(ids.size() + 4);
    for (const auto& p : parts_) {
      if (p.seq)
        out.insert(out.end(), ids.begin(), ids.end());
      else
        out.insert(out.end(), p.ids.begin(), p.ids.end());
    }
    ids.swap(out);
  }

 private:
  struct Part {
    bool seq;
    std::vector<int32_t> ids;
  };
  std::vector<Part> parts_;
};

class Noop : public PostProcessor {
 public:
  void process(std::vector<int32_t>&) const override {}
};

class Sequence : public PostProcessor {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PostProcessor>> v) : v_(std::move(v)) {}
  void process(std::vector<int32_t>& ids) const override {
    for (const auto& p : v_) p->process(ids);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> v_;
};

}  // namespace

std::unique_ptr<PostProcessor> make_affix_processor(std::vector<int32_t> prefix,
                                                    std::vector<int32_t> suffix) {
  return std::make_unique<Affix>(std::move(prefix), std::move(suffix));
}

std::unique_ptr<PostProcessor> make_post_processor(const nlohmann::json& j) {
  if (j.is_null()) return nullptr;
  std::string type = j.value("type", "");
  if (type == "TemplateProcessing") return std::make_unique<Template>(j);
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    // "cls"/"sep" are [token, id] pairs.
    return std::make_unique<Affix>(
        std::vector<int32_t>{json_token_id(j.at("cls").at(1), "post_processor cls")},
        std::vector<int32_t>{json_token_id(j.at("sep").at(1), "post_processor sep")});
  }
  if (type == "ByteLevel") return std::make_unique<Noop>();  // changes offsets only
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PostProcessor>> v;
    for (const auto& p : j.at("processors")) {
      auto q = make_post_processor(p);
      if (q) v.push_back(std::move(q));
    }
    return std::make_unique<Sequence>(std::move(v));
  }
  throw_error(ErrorCategory::kUnsupported,
              "tokenizer.json: post_processor type '" + type +
                  "' is not supported (TemplateProcessing, "
                  "RobertaProcessing, BertProcessing, ByteLevel, Sequence)");
}

}  // namespace mlxcel::tok
