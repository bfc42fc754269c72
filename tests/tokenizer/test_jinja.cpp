// Jinja interpreter: constructs, Python-compatible printing, error messages, limits.
#include <gtest/gtest.h>

#include "core/error.h"
#include "tokenizer/chat_template.h"

using mlxcel::ChatTemplate;
using ojson = nlohmann::ordered_json;

namespace {

std::string render(const std::string& src, const ojson& extra = ojson::object(), const ojson& messages = ojson::array()) {
  return ChatTemplate::from_source(src, "<s>", "</s>").render(messages, ojson(), false, extra);
}

std::string error_of(const std::string& src, const ojson& extra = ojson::object()) {
  try {
    render(src, extra);
  } catch (const mlxcel::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Jinja, ExpressionsAndPythonPrinting) {
  EXPECT_EQ(render("{{ [1, 2.5, 'a', none, true, {'k': (1, 2)}] }}"), "[1, 2.5, 'a', None, True, {'k': (1, 2)}]");
  EXPECT_EQ(render("{{ 1e20 }} {{ 0.00001 }} {{ 10/4 }} {{ 7//2 }} {{ -7 % 3 }} {{ 2**10 }} {{ 1.0 }}"),
            "1e+20 1e-05 2.5 3 2 1024 1.0");
  EXPECT_EQ(render("{{ 'abc'[::-1] }} {{ 'héllo'|length }} {{ 'a,b'.split(',') }}"), "cba 5 ['a', 'b']");
  EXPECT_EQ(render("{{ \"it's\" }} {{ [\"it's\"] }}"), "it's [\"it's\"]");
  EXPECT_EQ(render("{{ 'a' ~ 1 ~ none }}"), "a1None");
  EXPECT_EQ(render("{{ x or 'd' }}|{{ 0 and 1 }}|{{ 'y' if false }}|{{ 3 if true else 4 }}"), "d|0||3");
  EXPECT_EQ(render("{{ 1 < 2 < 3 }} {{ 'b' in 'abc' }} {{ 2 not in [1] }} {{ 1 == 1.0 }}"), "True True True True");
}

TEST(Jinja, StatementsLoopsMacrosNamespace) {
  EXPECT_EQ(render("{% for i in [1,2,3] %}{{ loop.index }}{{ '/' if not loop.last }}{% endfor %}"), "1/2/3");
  EXPECT_EQ(render("{% for i in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for i in range(5) if i is odd %}{{ i }}{% endfor %}"), "13");
  EXPECT_EQ(render("{% for i in range(9) %}{% if i == 3 %}{% break %}{% endif %}{% if i == 1 %}{% continue %}{% endif %}{{ i }}{% endfor %}"),
            "02");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for i in [1,2] %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"), "3");
  EXPECT_EQ(render("{% for i in [1,2] %}{% set x = i %}{% endfor %}[{{ x }}]"), "[]");
  EXPECT_EQ(render("{% macro m(a, b=2) %}{{ a }}-{{ b }}{% endmacro %}{{ m(1) }}{{ m(1, b=3) }}"), "1-21-3");
  EXPECT_EQ(render("{% set x %}a{{ 1 }}{% endset %}{{ x }}"), "a1");
  EXPECT_EQ(render("{% for k, v in {'a': 1, 'b': 2}|items %}{{ k }}={{ v }};{% endfor %}"), "a=1;b=2;");
  EXPECT_EQ(render("{{ bos_token }}{{ eos_token }}"), "<s></s>");
}

TEST(Jinja, Filters) {
  EXPECT_EQ(render("{{ {'a': 'é', 'b': [1, 2]}|tojson }}"), "{\"a\": \"é\", \"b\": [1, 2]}");
  EXPECT_EQ(render("{{ {'a': [1]}|tojson(indent=2) }}"), "{\n  \"a\": [\n    1\n  ]\n}");
  EXPECT_EQ(render("{{ '  a b  '|trim }}|{{ 'ab'|upper }}|{{ [3,1,2]|sort }}|{{ 'hello world'|title }}"),
            "a b|AB|[1, 2, 3]|Hello World");
  EXPECT_EQ(render("{{ xs|selectattr('r', 'equalto', 'u')|map(attribute='c')|join(',') }}",
                   {{"xs", ojson::parse(R"([{"r":"u","c":"1"},{"r":"a","c":"2"},{"r":"u","c":"3"}])")}}),
            "1,3");
  EXPECT_EQ(render("{{ none|default('d') }}|{{ undefined_var|default('d') }}|{{ ''|default('d', true) }}"), "None|d|d");
  EXPECT_EQ(render("{{ 'a\nb'|indent(2) }}|{{ [1,2,3]|first }}{{ [1,2,3]|last }}|{{ 'x'|string }}"), "a\n  b|13|x");
}

TEST(Jinja, WhitespaceControl) {
  EXPECT_EQ(render("  {% if true %}\n  hi\n  {% endif %}\n  x"), "  hi\n  x");
  EXPECT_EQ(render("a  {{- 'b' -}}  c"), "abc");
  EXPECT_EQ(render("a\n{# comment #}\nb"), "a\nb");
  EXPECT_EQ(render("x\n"), "x");
  EXPECT_EQ(render("{% raw %}{{ not evaluated }}{% endraw %}"), "{{ not evaluated }}");
}

TEST(Jinja, ErrorsNameLineAndConstruct) {
  EXPECT_NE(error_of("line1\n{% if x %}\n{{ 1 + }}\n{% endif %}").find("line 3"), std::string::npos);
  EXPECT_NE(error_of("a\n{% for x in y %}").find("endfor"), std::string::npos);
  EXPECT_NE(error_of("{% include 'x' %}").find("not supported"), std::string::npos);
  std::string e = error_of("\n\n{{ raise_exception('bad role') }}");
  EXPECT_NE(e.find("bad role"), std::string::npos);
  EXPECT_NE(e.find("line 3"), std::string::npos);
  EXPECT_NE(error_of("{{ x.y }}").find("'x' is undefined"), std::string::npos);
  EXPECT_NE(error_of("{{ [].append(1) }}").find("unsafe"), std::string::npos);
  EXPECT_NE(error_of("{{ 'a' | nosuchfilter }}").find("nosuchfilter"), std::string::npos);
}

TEST(Jinja, HostileTemplatesAreBounded) {
  auto t = ChatTemplate::from_source("{% for i in range(1000000) %}{% for j in range(1000000) %}{% endfor %}{% endfor %}");
  mlxcel::jinja::Limits l;
  l.max_steps = 100000;
  t.set_limits(l);
  try {
    t.render(ojson::array(), ojson(), false);
    FAIL() << "no error";
  } catch (const mlxcel::Error& e) {
    EXPECT_NE(std::string(e.what()).find("steps"), std::string::npos);
  }
  EXPECT_NE(error_of("{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}")
                .find("too large"),
            std::string::npos);
  EXPECT_NE(error_of("{{ 'x' * 100000000000 }}").find("too large"), std::string::npos);
  EXPECT_NE(error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").find("nested"), std::string::npos);
  EXPECT_NE(error_of("{{ range(100000000000)|length }}").find("too large"), std::string::npos);
}

TEST(Jinja, ReasoningAliasing) {
  auto msgs = ojson::parse(R"([{"role":"assistant","content":"a","reasoning":"r"}])");
  EXPECT_EQ(render("{{ messages[0].reasoning_content }}|{{ messages[0].thinking }}|{{ messages[0]|tojson }}", ojson::object(), msgs),
            "r|r|{\"thinking\": \"r\", \"role\": \"assistant\", \"content\": \"a\", \"reasoning\": \"r\", \"reasoning_content\": \"r\"}");
}

// Hostile templates (they come with model downloads): every one ends with an Error, never a
// crash, a wrapped integer or an allocation past the output cap.
TEST(JinjaLimits, DeepNestingAndLongChainsAreRefusedAtParse) {
  const auto parse_error = [](const std::string& src) {
    try {
      ChatTemplate::from_source(src, "<s>", "</s>");
    } catch (const mlxcel::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  std::string chain = "{{ 1";
  for (int i = 0; i < 100000; ++i) chain += " + 1";
  chain += " }}";
  EXPECT_NE(parse_error(chain).find("nests deeper"), std::string::npos);
  EXPECT_NE(parse_error("{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}")
                .find("nests deeper"),
            std::string::npos);
  EXPECT_NE(parse_error("{{ " + std::string(100000, '-') + "1 }}").find("nests deeper"),
            std::string::npos);
  EXPECT_NE(parse_error("{{ " + std::string(50000, '[') + std::string(50000, ']') + " }}")
                .find("nests deeper"),
            std::string::npos);
  std::string blocks;
  for (int i = 0; i < 20000; ++i) blocks += "{% if true %}";
  EXPECT_NE(parse_error(blocks).find("nests deeper"), std::string::npos);
  std::string filters = "{{ 'x'";
  for (int i = 0; i < 100000; ++i) filters += "|trim";
  EXPECT_NE(parse_error(filters + " }}").find("nests deeper"), std::string::npos);
  std::string attrs = "{{ x";
  for (int i = 0; i < 100000; ++i) attrs += ".a";
  EXPECT_NE(parse_error(attrs + " }}").find("nests deeper"), std::string::npos);
  // Real templates stay far below the limits.
  std::string ok = "{{ 1";
  for (int i = 0; i < 200; ++i) ok += " + 1";
  EXPECT_EQ(render(ok + " }}"), "201");
}

TEST(JinjaLimits, IntegerEdgeCases) {
  EXPECT_NE(error_of("{{ (-9223372036854775807 - 1) // -1 }}").find("integer overflow"),
            std::string::npos);
  EXPECT_EQ(render("{{ (-9223372036854775807 - 1) % -1 }} {{ 7 // -1 }} {{ -7 % -1 }}"), "0 -7 0");
  EXPECT_NE(error_of("{{ 9223372036854775807 + 1 }}").find("integer overflow"), std::string::npos);
  EXPECT_NE(error_of("{{ -9223372036854775807 - 2 }}").find("integer overflow"), std::string::npos);
  EXPECT_NE(error_of("{{ 4294967296 * 4294967296 }}").find("integer overflow"), std::string::npos);
  EXPECT_NE(error_of("{{ 2 ** 64 }}").find("integer overflow"), std::string::npos);
  EXPECT_EQ(render("{{ 2 ** 62 }} {{ (-1) ** 1000000000000 }} {{ 0 ** 99999999999 }}"),
            "4611686018427387904 1 0");
  EXPECT_NE(error_of("{{ -(-9223372036854775807 - 1) }}").find("integer overflow"),
            std::string::npos);
}

TEST(JinjaLimits, FiltersRespectTheOutputCap) {
  EXPECT_NE(error_of("{{ 'a\nb'|indent(1000000000000) }}").find("exceeds"), std::string::npos);
  EXPECT_NE(error_of("{{ 'a'|center(1000000000000) }}").find("exceeds"), std::string::npos);
  EXPECT_NE(error_of("{{ [1]|tojson(indent=1000000000000) }}").find("exceeds"), std::string::npos);
  EXPECT_NE(error_of("{{ [[[[1]]]]|tojson(indent=5000000) }}").find("exceeds"), std::string::npos);
  // Many lines times a wide indent: each alone is allowed, the product is not.
  EXPECT_NE(error_of("{{ ('x\n' * 1000000)|indent(100) }}").find("exceeds"), std::string::npos);
  EXPECT_NE(error_of("{{ ('x' * 1000000)|replace('', 'yyyyyyyyyyyyyyyyyyyy') }}").find("exceeds"),
            std::string::npos);
  EXPECT_NE(error_of("{{ [1] * 9223372036854775807 }}").find("too large"), std::string::npos);
  EXPECT_EQ(render("{{ 'ab'|center(6) }}|{{ 'a\nb'|indent(2) }}|{{ [1]|tojson(indent=2) }}"),
            "  ab  |a\n  b|[\n  1\n]");
}

// Found by fuzz/fuzz_chat_template.cpp: an empty sequence times a huge count passed the size
// limits and then looped over the count (a fuzzer timeout). Python gives the empty sequence.
TEST(JinjaLimits, EmptySequenceRepetitionIsImmediate) {
  EXPECT_EQ(render("{{ ([] * 66666666610)|length }}|{{ ('' * 66666666610)|length }}|"
                   "{{ (66666666610 * [])|length }}|{{ ([1, 2] * 0)|length }}"),
            "0|0|0|0");
}

TEST(JinjaLimits, DeepTemplateVariablesAreRefused) {
  ojson deep = 1;
  for (int i = 0; i < 1000; ++i) deep = ojson::array({deep});
  EXPECT_NE(error_of("{{ x }}", ojson{{"x", deep}}).find("nests too deeply"), std::string::npos);
  // Built inside the template: tojson stops at its depth limit instead of recursing on.
  EXPECT_NE(error_of("{% set ns = namespace(v=1) %}{% for i in range(2000) %}{% set ns.v = [ns.v] "
                     "%}{% endfor %}"
                     "{{ ns.v|tojson }}")
                .find("deeper"),
            std::string::npos);
}

// Found by fuzz/fuzz_chat_template.cpp: a bad \x escape threw std::invalid_argument (not an
// Error) out of the lexer; float-to-int conversions outside int64 were undefined.
TEST(JinjaLimits, BadEscapesAndHugeFloatsAreErrors) {
  EXPECT_NE(error_of("{{ '\\x * d' }}").find("invalid hexadecimal escape"), std::string::npos);
  EXPECT_NE(error_of("{{ '\\U7fffffff' }}").find("beyond U+10FFFF"), std::string::npos);
  EXPECT_NE(error_of("{{ 1e300|int }}").find("64-bit integer"), std::string::npos);
  EXPECT_NE(error_of("{{ '%d' % 1e300 }}").find("64-bit integer"), std::string::npos);
  EXPECT_EQ(render("{{ '1e300'|int(7) }} {{ 2.9|int }} {{ '\\x41' }}"), "7 2 A");
}
