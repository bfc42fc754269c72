#include "tokenizer/tiktoken.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <tuple>

#include "core/error.h"
#include "tokenizer/pre_tokenizer.h"

namespace mlxcel::tok {

static std::string base64_decode(const std::string& in, const std::string& path, size_t line) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  int buf = 0, bits = 0;
  for (char c : in) {
    if (c == '=') break;
    int v = val(c);
    if (v < 0) throw_error(ErrorCategory::kBadInput, path + ":" + std::to_string(line) + ": bad base64 token");
    buf = (buf << 6) | v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((buf >> bits) & 0xFF));
    }
  }
  return out;
}

TiktokenData load_tiktoken(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw_error(ErrorCategory::kBadInput, "tokenizer: cannot open tiktoken file " + path);
  std::unordered_map<std::string, int32_t> ranks;
  std::vector<std::string> by_rank;
  std::string line;
  size_t ln = 0;
  while (std::getline(f, line)) {
    ++ln;
    if (line.empty()) continue;
    auto sp = line.find(' ');
    if (sp == std::string::npos)
      throw_error(ErrorCategory::kBadInput, path + ":" + std::to_string(ln) +
                                                ": expected '<base64> <rank>' (is this a SentencePiece model?)");
    std::string tok = base64_decode(line.substr(0, sp), path, ln);
    int32_t rank = std::stoi(line.substr(sp + 1));
    ranks[tok] = rank;
    if (static_cast<size_t>(rank) >= by_rank.size()) by_rank.resize(rank + 1);
    by_rank[rank] = tok;
  }
  TiktokenData d;
  d.vocab.reserve(ranks.size());
  for (auto& [t, r] : ranks) d.vocab.emplace(bytes_to_byte_level(t), r);
  struct M {
    int32_t rank, l, r;
    std::string a, b;
  };
  std::vector<M> ms;
  for (size_t r = 0; r < by_rank.size(); ++r) {
    const std::string& t = by_rank[r];
    if (t.size() < 2) continue;
    size_t first = ms.size();
    for (size_t i = 1; i < t.size(); ++i) {
      auto il = ranks.find(t.substr(0, i));
      if (il == ranks.end()) continue;
      auto ir = ranks.find(t.substr(i));
      if (ir == ranks.end()) continue;
      ms.push_back({static_cast<int32_t>(r), il->second, ir->second, il->first, ir->first});
    }
    std::sort(ms.begin() + first, ms.end(),
              [](const M& x, const M& y) { return std::tie(x.l, x.r) < std::tie(y.l, y.r); });
  }
  d.merges.reserve(ms.size());
  for (auto& m : ms) d.merges.emplace_back(bytes_to_byte_level(m.a), bytes_to_byte_level(m.b));
  return d;
}

}  // namespace mlxcel::tok
