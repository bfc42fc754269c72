#include "tokenizer/unigram.h"

#include <cstdio>
#include <limits>

#include "core/error.h"
#include "tokenizer/json_ids.h"
#include "tokenizer/unicode.h"

namespace mlxcel::tok {

namespace {
constexpr double kUnkPenalty = 10.0;
}

Unigram::Unigram(const nlohmann::json& j) {
  std::unordered_map<std::string, int32_t> v;
  const auto& vocab = j.at("vocab");
  scores_.reserve(vocab.size());
  min_score_ = std::numeric_limits<double>::max();
  for (size_t i = 0; i < vocab.size(); ++i) {
    auto piece = vocab[i].at(0).get<std::string>();
    double score = vocab[i].at(1).get<double>();
    v.emplace(piece, static_cast<int32_t>(i));
    scores_.push_back(score);
    min_score_ = std::min(min_score_, score);
    max_piece_bytes_ = std::max(max_piece_bytes_, piece.size());
  }
  set_vocab(std::move(v));
  if (j.contains("unk_id") && j["unk_id"].is_number_integer()) unk_id_ = json_token_id(j["unk_id"], "Unigram unk_id");
  byte_fallback_ = j.value("byte_fallback", false);
}

void Unigram::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  const size_t n = word.size();
  struct Node {
    double score = 0;
    int64_t start = -1;  // -1: unreached
    int32_t id = -1;
  };
  std::vector<Node> best(n + 1);
  best[0].start = 0;
  const double unk_score = min_score_ - kUnkPenalty;
  for (size_t s = 0; s < n;) {
    int mblen = utf8_seq_len(static_cast<unsigned char>(word[s]));
    if (best[s].start < 0) {
      s += mblen;
      continue;
    }
    bool single = false;
    for (size_t len = 1; len <= max_piece_bytes_ && s + len <= n; ++len) {
      auto id = token_to_id(word.substr(s, len));
      if (!id) continue;
      double cand = best[s].score + scores_[*id];
      Node& t = best[s + len];
      if (t.start < 0 || cand > t.score) t = {cand, static_cast<int64_t>(s), *id};
      if (len == static_cast<size_t>(mblen)) single = true;
    }
    if (!single) {
      double cand = best[s].score + unk_score;
      Node& t = best[s + mblen];
      if (t.start < 0 || cand > t.score) t = {cand, static_cast<int64_t>(s), unk_id_ ? *unk_id_ : -1};
    }
    s += mblen;
  }
  // Backtrack; consecutive unknown pieces are fused into one (HF fuse_unk default for Unigram).
  struct Tok {
    size_t b, e;
    int32_t id;
  };
  std::vector<Tok> toks;
  for (size_t e = n; e > 0;) {
    const Node& nd = best[e];
    size_t b = static_cast<size_t>(nd.start);
    bool unk = !unk_id_ ? nd.id < 0 : nd.id == *unk_id_;
    if (unk && !toks.empty()) {
      const Tok& last = toks.back();
      bool last_unk = !unk_id_ ? last.id < 0 : last.id == *unk_id_;
      if (last_unk) {
        toks.back().b = b;
        e = b;
        continue;
      }
    }
    toks.push_back({b, e, nd.id});
    e = b;
  }
  for (size_t k = toks.size(); k-- > 0;) {
    const Tok& t = toks[k];
    std::string_view piece = word.substr(t.b, t.e - t.b);
    if (auto id = token_to_id(piece)) {
      out.push_back(*id);
      continue;
    }
    if (byte_fallback_) {
      std::vector<int32_t> ids;
      bool ok = true;
      for (unsigned char c : piece) {
        char buf[8];
        std::snprintf(buf, sizeof(buf), "<0x%02X>", c);
        auto id = token_to_id(buf);
        if (!id) {
          ok = false;
          break;
        }
        ids.push_back(*id);
      }
      if (ok) {
        out.insert(out.end(), ids.begin(), ids.end());
        continue;
      }
    }
    if (!unk_id_) throw_error(ErrorCategory::kBadInput, "tokenizer: Unigram model has no unk_id for unknown text");
    out.push_back(*unk_id_);
  }
}

}  // namespace mlxcel::tok
