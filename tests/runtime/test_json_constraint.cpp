#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/json_constraint.h"

using mlxcel::runtime::JsonPrefix;
using mlxcel::runtime::json_token_mask;

namespace {

const std::vector<std::string> kValid = {
    "{}",
    " {\n} ",
    "{\"a\":1}",
    "{\"a\": [1, 2.5e-3, -0, 0.5E+7, true, false, null, \"x\\u00e9\\n\\\"\"], \"b\": {\"c\": {}}}",
    "{\"\xc3\xa9\xe6\x9d\xb1\xf0\x9f\x9a\x80\": \"\xf4\x8f\xbf\xbf\", \"e\": []}",
    "{\"n\": -12.75e10, \"m\": [[], [[]], {}]}",
};

// Index of the first byte the automaton refuses, or -1 when it accepts everything.
int refused_at(const std::string& s, bool object_only = true) {
  JsonPrefix p(object_only);
  for (std::size_t i = 0; i < s.size(); ++i)
    if (!p.feed_byte(static_cast<unsigned char>(s[i]))) return static_cast<int>(i);
  return -1;
}

}  // namespace

TEST(JsonPrefix, AcceptsValidDocumentsAndEveryPrefix) {
  for (const auto& doc : kValid) {
    ASSERT_TRUE(nlohmann::json::accept(doc)) << doc;  // the reference parser agrees
    JsonPrefix p;
    std::size_t last = doc.find_last_not_of(" \n");
    for (std::size_t i = 0; i < doc.size(); ++i) {
      ASSERT_TRUE(p.feed_byte(static_cast<unsigned char>(doc[i]))) << doc << " at " << i;
      EXPECT_EQ(p.complete(), i >= last) << doc << " at " << i;
      EXPECT_EQ(p.closing_distance() == 0, i >= last) << doc << " at " << i;
    }
  }
}

TEST(JsonPrefix, RefusesInvalidBytesWhereTheyOccur) {
  struct Case {
    std::string text;
    int at;
  };
  const std::vector<Case> cases = {
      {"[1]", 0},              // json_object: the top level is an object
      {"1", 0},
      {"{\"a\"1}", 4},
      {"{\"a\":01}", 6},
      {"{\"a\":1,}", 7},
      {"{,}", 1},
      {"{\"a\":tru e}", 8},
      {"{\"a\":\"\x01\"}", 6},  // raw control character in a string
      {"{\"a\":\"\\q\"}", 7},
      {"{\"a\":\"\\u12g4\"}", 10},
      {"{\"a\":1.}", 7},
      {"{\"a\":1e}", 7},
      {"{\"a\":-}", 6},
      {"{\"a\":\"\xc0\xaf\"}", 6},  // overlong
      {"{\"a\":\"\xed\xa0\x80\"}", 7},  // surrogate
      {"{\"a\":\"\xe2\x82\"}", 8},  // truncated character
      {"{\"a\":[}", 6},
      {"{\"a\":{]}", 6},
      {"{}}", 2},
      {"{} x", 3},
      {"{\"a\":1 2}", 7},
      {"{1:2}", 1},
  };
  for (const auto& c : cases) {
    if (c.text != "[1]" && c.text != "1") {
      EXPECT_FALSE(nlohmann::json::accept(c.text)) << c.text;
    }
    EXPECT_EQ(refused_at(c.text), c.at) << c.text;
  }
  EXPECT_EQ(refused_at("[1, \"x\", null]", false), -1);
  EXPECT_EQ(refused_at("-3.5", false), -1);
  // Exponents have at most two digits, so every number is a finite double.
  EXPECT_EQ(refused_at("{\"a\":1e99}"), -1);
  EXPECT_EQ(refused_at("{\"a\":1e-999}"), 10);
  // At most 16 whitespace bytes in a row outside strings; inside strings any number.
  EXPECT_EQ(refused_at("{" + std::string(17, ' ') + "}"), 17);
  EXPECT_EQ(refused_at("{" + std::string(16, '\n') + "\"a\"" + std::string(16, '\t') + ":1}"), -1);
  EXPECT_EQ(refused_at("{\"a\":\"" + std::string(40, ' ') + "\"}"), -1);
}

TEST(JsonPrefix, ClosingDistanceIsTheShortestCompletion) {
  // For every prefix of the valid documents: no byte lowers the distance by more than one (a
  // lower bound), and following bytes that lower it by one completes the value in exactly that
  // many bytes (achievable), so the distance is the shortest completion's length.
  for (const auto& doc : kValid) {
    JsonPrefix p;
    for (std::size_t i = 0; i <= doc.size(); ++i) {
      JsonPrefix q = p;
      const int d = q.closing_distance();
      std::string tail;
      for (int step = 0; step < d; ++step) {
        const int cur = q.closing_distance();
        int pick = -1;
        for (int b = 0; b < 256; ++b) {
          JsonPrefix r = q;
          if (!r.feed_byte(static_cast<unsigned char>(b))) continue;
          EXPECT_GE(r.closing_distance(), cur - 1) << doc.substr(0, i) << " + byte " << b;
          if (r.closing_distance() == cur - 1 && pick < 0) pick = b;
        }
        ASSERT_GE(pick, 0) << "no byte shortens " << doc.substr(0, i) << tail;
        q.feed_byte(static_cast<unsigned char>(pick));
        tail += static_cast<char>(pick);
      }
      EXPECT_TRUE(q.complete()) << doc.substr(0, i) << tail;
      EXPECT_TRUE(nlohmann::json::accept(doc.substr(0, i) + tail)) << doc.substr(0, i) << tail;
      if (i < doc.size()) {
        ASSERT_TRUE(p.feed_byte(static_cast<unsigned char>(doc[i])));
      }
    }
  }
}

TEST(JsonTokenMask, BudgetAndValidity) {
  const std::vector<std::string> vocab = {"{", "}", "\"a\"", ":", "1", "", "{\"k\": ", "]", " ", "\"", "x"};
  std::vector<std::uint8_t> allowed;
  JsonPrefix start;
  json_token_mask(start, vocab, 5, allowed);
  EXPECT_EQ(allowed, (std::vector<std::uint8_t>{1, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0}));
  json_token_mask(start, vocab, 2, allowed);  // `{"k": ` or a space leave 2 bytes: over the budget
  EXPECT_EQ(allowed, (std::vector<std::uint8_t>{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}));
  JsonPrefix open;
  ASSERT_TRUE(open.feed("{\"a\":\"te"));
  json_token_mask(open, vocab, 3, allowed);  // inside a string: any text that stays in it
  EXPECT_EQ(allowed, (std::vector<std::uint8_t>{1, 1, 0, 1, 1, 0, 0, 1, 1, 1, 1}));
  json_token_mask(open, vocab, 2, allowed);  // budget for the quote and '}' only
  EXPECT_EQ(allowed, (std::vector<std::uint8_t>{0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0}));
  json_token_mask(open, vocab, 1, allowed);  // nothing completes in one token
  for (auto a : allowed) EXPECT_EQ(a, 0);
}

TEST(JsonTokenMask, RandomAllowedTokensAlwaysFinishValidWithinTheBudget) {
  // Multi-byte tokens plus every single byte, as in byte-level BPE vocabularies (the budget
  // guarantee relies on single-byte tokens).
  std::vector<std::string> vocab = {"true", "null", "fa", "lse", "00e9", "ab", "\"key\": ", "{\"", "\"}",
                                    "],", "\xc3\xa9", "{}", "[[", "]]", "\": ", ", \"", "\\u00"};
  for (int b = 1; b < 256; ++b) vocab.push_back(std::string(1, static_cast<char>(b)));
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 300; ++trial) {
    const std::int64_t budget = 2 + trial % 40;
    JsonPrefix s;
    std::string out;
    std::vector<std::uint8_t> allowed;
    std::int64_t used = 0;
    while (!s.complete()) {
      ASSERT_LT(used, budget) << out;
      json_token_mask(s, vocab, budget - used, allowed);
      std::vector<std::size_t> ok;
      for (std::size_t t = 0; t < allowed.size(); ++t)
        if (allowed[t]) ok.push_back(t);
      ASSERT_FALSE(ok.empty()) << out;
      const std::string& tok = vocab[ok[rng() % ok.size()]];
      ASSERT_TRUE(s.feed(tok));
      out += tok;
      ++used;
    }
    EXPECT_TRUE(nlohmann::json::accept(out)) << out;
    EXPECT_TRUE(nlohmann::json::parse(out).is_object()) << out;
  }
}
