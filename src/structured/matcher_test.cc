#include "structured/matcher.h"

#include <random>

#include "common/check.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "structured/ebnf.h"
#include "structured/json_schema.h"
#include "structured/regex.h"

namespace deepinfer::structured {
namespace {

// Reference UTF-8 encoder written from RFC 3629's table (independent of text_util.cc).
void AppendUtf8Test(uint32_t cp, std::string* out) {
  if (cp <= 0x7F) {
    *out += static_cast<char>(cp);
  } else if (cp <= 0x7FF) {
    *out += static_cast<char>(0xC0 + cp / 64);
    *out += static_cast<char>(0x80 + cp % 64);
  } else if (cp <= 0xFFFF) {
    *out += static_cast<char>(0xE0 + cp / 4096);
    *out += static_cast<char>(0x80 + (cp / 64) % 64);
    *out += static_cast<char>(0x80 + cp % 64);
  } else {
    *out += static_cast<char>(0xF0 + cp / 262144);
    *out += static_cast<char>(0x80 + (cp / 4096) % 64);
    *out += static_cast<char>(0x80 + (cp / 64) % 64);
    *out += static_cast<char>(0x80 + cp % 64);
  }
}

using ::deepinfer::testing::StatusIs;
using ::testing::HasSubstr;

// A small byte-level vocabulary: every single byte, plus multi-byte pieces, plus 2 specials.
std::shared_ptr<const VocabularyIndex> TestVocab() {
  Vocabulary v;
  for (int b = 0; b < 256; ++b) v.token_bytes.push_back(std::string(1, static_cast<char>(b)));
  for (const char* piece :
       {"ab",  "abc",  "\"",   "\":",  "\",\"", "{\"", "\"}",         "true", "false", "null", "12",
        "3.5", "é",    "\xc3", "\xa9", "name",  "age", "\"name\":\"", "[1,",  "]}",    "  ",   "\n",
        "é\"", "日本", "}",    "{}",   "[]",    ",\"", "0",           "-1",   "e+",    "xyz"}) {
    v.token_bytes.push_back(piece);
  }
  v.token_bytes.push_back("<eos>");
  v.token_bytes.push_back("<special>");
  const int32_t n = static_cast<int32_t>(v.token_bytes.size());
  v.eos_ids = {n - 2};
  v.special_ids = {n - 2, n - 1};
  return std::make_shared<VocabularyIndex>(std::move(v));
}

std::shared_ptr<const CompiledGrammar> CompileOrDie(const Grammar& g,
                                                    std::shared_ptr<const VocabularyIndex> v) {
  auto c = CompiledGrammar::Compile(g, std::move(v));
  CHECK(c.ok()) << c.status().ToString();
  return *c;
}

bool Matches(const Grammar& g, const std::string& text) {
  GrammarMatcher m(CompileOrDie(g, TestVocab()));
  return m.AcceptBytes(text) && m.CanTerminate();
}

TEST(Ebnf, AcceptsAndRejects) {
  ASSERT_OK_AND_ASSIGN(Grammar g, ParseEbnf(R"g(
    root ::= "(" list? ")"      # a parenthesised list
    list ::= item ("," item)*
    item ::= [0-9]+ | "x"
  )g"));
  EXPECT_TRUE(Matches(g, "()"));
  EXPECT_TRUE(Matches(g, "(1,x,23)"));
  EXPECT_FALSE(Matches(g, "(1,)"));
  EXPECT_FALSE(Matches(g, "(1"));
  EXPECT_FALSE(Matches(g, "(y)"));
}

TEST(Ebnf, BoundedRepetitionAndEscapes) {
  ASSERT_OK_AND_ASSIGN(Grammar g, ParseEbnf("root ::= [a-c]{2,3} \"\\n\" '\\u00e9'"));
  EXPECT_TRUE(Matches(g, "ab\n\xc3\xa9"));
  EXPECT_TRUE(Matches(g, "abc\n\xc3\xa9"));
  EXPECT_FALSE(Matches(g, "a\n\xc3\xa9"));
  EXPECT_FALSE(Matches(g, "abca\n\xc3\xa9"));
}

TEST(Ebnf, ErrorsNamePositionAndRule) {
  EXPECT_THAT(ParseEbnf("root ::= foo"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'foo'")));
  EXPECT_THAT(ParseEbnf("root ::= \"abc"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("1:")));
  EXPECT_THAT(ParseEbnf("root ::= [z-a]"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(Compile, LeftRecursionIsAnError) {
  ASSERT_OK_AND_ASSIGN(Grammar g, ParseEbnf("root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\""));
  EXPECT_THAT(CompiledGrammar::Compile(g, TestVocab()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("left recursion")));
  ASSERT_OK_AND_ASSIGN(Grammar g2, ParseEbnf("root ::= a\na ::= b? a \"x\" | \"y\"\nb ::= \"z\""));
  EXPECT_THAT(CompiledGrammar::Compile(g2, TestVocab()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("left recursion")));
}

TEST(Regex, CodePointClassesNotBytes) {
  ASSERT_OK_AND_ASSIGN(Grammar g, RegexToGrammar("[é]"));
  EXPECT_TRUE(Matches(g, "é"));
  EXPECT_FALSE(Matches(g, "\xc3"));
  ASSERT_OK_AND_ASSIGN(Grammar neg, RegexToGrammar("[^é]"));
  EXPECT_TRUE(Matches(neg, "e"));
  EXPECT_TRUE(Matches(neg, "日"));
  EXPECT_FALSE(Matches(neg, "é"));
  ASSERT_OK_AND_ASSIGN(Grammar r, RegexToGrammar("[\\u3040-\\u30ff]+"));
  EXPECT_TRUE(Matches(r, "ひらがなカタカナ"));
  EXPECT_FALSE(Matches(r, "漢"));
}

TEST(Regex, QuantifiersGroupsAlternation) {
  ASSERT_OK_AND_ASSIGN(Grammar g, RegexToGrammar("^(?:ab|c){2}\\d{1,3}x?$"));
  EXPECT_TRUE(Matches(g, "abc1"));
  EXPECT_TRUE(Matches(g, "cc123x"));
  EXPECT_FALSE(Matches(g, "ab1"));
  EXPECT_FALSE(Matches(g, "abab1234"));
  ASSERT_OK_AND_ASSIGN(Grammar dot, RegexToGrammar("a.c"));
  EXPECT_TRUE(Matches(dot, "a日c"));
  EXPECT_FALSE(Matches(dot, "a\nc"));
}

TEST(Regex, UnsupportedConstructsAreErrorsWithPosition) {
  for (const char* p : {"(a)\\1", "a(?=b)", "(?<n>a)", "\\bword", "a^b", "\\p{L}"}) {
    EXPECT_THAT(RegexToGrammar(p),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("position")))
        << p;
  }
}

// The mask must equal, token by token, "AcceptToken succeeds" (checked with rollback).
void ExpectMaskMatchesBruteForce(GrammarMatcher& m) {
  std::vector<uint32_t> mask = m.NextTokenBitmask();
  const auto& vocab = m.grammar().vocab();
  for (int32_t id = 0; id < vocab.size(); ++id) {
    const bool in_mask = (mask[id >> 5] >> (id & 31)) & 1;
    const bool accepted = m.AcceptToken(id);
    if (accepted) m.Rollback(1);
    ASSERT_EQ(in_mask, accepted) << "token " << id << " '" << vocab.vocab().token_bytes[id] << "'";
  }
}

// Object properties come out in the order the schema lists them (as OpenAI's strict structured
// outputs do), not sorted: a parser that sorts keys would flip this pair.
TEST(JsonSchema, PropertiesFollowSchemaOrder) {
  ASSERT_OK_AND_ASSIGN(
      Grammar g, JsonSchemaToGrammar(R"({"type":"object","properties":{"zeta":{"type":"integer"},
          "alpha":{"type":"boolean"}},"required":["zeta","alpha"],"additionalProperties":false})"));
  EXPECT_TRUE(Matches(g, R"({"zeta":1,"alpha":true})"));
  EXPECT_FALSE(Matches(g, R"({"alpha":true,"zeta":1})"));
}

// allOf merges its branches inline; a branch whose $ref leads back to an enclosing schema would
// inline itself forever (this crashed the server with a stack overflow): it is a compile error
// naming allOf. Recursion through a plain $ref stays supported.
TEST(JsonSchema, RecursionThroughAllOfIsAnErrorNotACrash) {
  for (
      const char* schema : {
          R"({"type":"object","properties":{"a":{"type":"integer"},"kid":{"allOf":[{"$ref":"#"}]}}})",
          R"({"allOf":[{"$ref":"#"}]})",
          R"({"anyOf":[{"type":"integer"},{"allOf":[{"$ref":"#"}]}]})",
          R"({"$defs":{"N":{"type":"object","properties":{"k":{"allOf":[{"$ref":"#/$defs/N"}]}}}},"$ref":"#/$defs/N"})",
      }) {
    EXPECT_THAT(JsonSchemaToGrammar(schema),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("allOf")))
        << schema;
  }
  EXPECT_THAT(JsonSchemaToGrammar(R"({"allOf":[{"$ref":5}]})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("must be a string")));
  ASSERT_OK_AND_ASSIGN(
      Grammar tree,
      JsonSchemaToGrammar(R"({"$defs":{"N":{"type":"object","properties":{"v":{"type":"integer"},
          "kid":{"$ref":"#/$defs/N"}},"required":["v"],"additionalProperties":false}},
          "allOf":[{"$ref":"#/$defs/N"}]})"));
  EXPECT_TRUE(Matches(tree, R"({"v":1,"kid":{"v":2}})"));
  EXPECT_FALSE(Matches(tree, R"({"kid":{"v":2}})"));
}

TEST(Matcher, MaskEqualsBruteForceAlongRandomWalks) {
  const char* grammars[] = {
      R"g(root ::= "{" ws pair ("," ws pair)* ws "}"
         pair ::= "\"" [a-z]+ "\"" ws ":" ws value
         value ::= "true" | "false" | "null" | [0-9]+ ("." [0-9]+)? | "\"" [^"\\]* "\"" | root
         ws ::= [ \n]{0,2})g",
      R"g(root ::= ("ab" | "abc" | "é" | "日本")* "!")g",
      R"g(root ::= x y
         x ::= "a"?
         y ::= "b"? "c"?)g",
  };
  auto vocab = TestVocab();
  std::mt19937 rng(7);
  for (const char* text : grammars) {
    ASSERT_OK_AND_ASSIGN(Grammar g, ParseEbnf(text));
    auto cg = CompileOrDie(g, vocab);
    for (int walk = 0; walk < 6; ++walk) {
      GrammarMatcher m(cg);
      for (int step = 0; step < 25 && !m.IsTerminated(); ++step) {
        ExpectMaskMatchesBruteForce(m);
        std::vector<uint32_t> mask = m.NextTokenBitmask();
        std::vector<int32_t> allowed;
        for (int32_t id = 0; id < vocab->size(); ++id) {
          if ((mask[id >> 5] >> (id & 31)) & 1) allowed.push_back(id);
        }
        if (allowed.empty()) break;
        ASSERT_TRUE(m.AcceptToken(allowed[rng() % allowed.size()]));
      }
    }
  }
}

TEST(Matcher, EosOnlyWhenCompleteAndSpecialsNever) {
  ASSERT_OK_AND_ASSIGN(Grammar g, ParseEbnf("root ::= \"ab\"+"));
  auto vocab = TestVocab();
  GrammarMatcher m(CompileOrDie(g, vocab));
  const int32_t eos = vocab->vocab().eos_ids[0];
  const int32_t special = eos + 1;
  auto allowed = [&](int32_t id) {
    auto mask = m.NextTokenBitmask();
    return ((mask[id >> 5] >> (id & 31)) & 1) != 0;
  };
  EXPECT_FALSE(allowed(eos));
  EXPECT_FALSE(m.AcceptToken(eos));
  ASSERT_TRUE(m.AcceptBytes("ab"));
  EXPECT_TRUE(allowed(eos));
  EXPECT_FALSE(allowed(special));
  EXPECT_FALSE(m.AcceptToken(special));
  EXPECT_TRUE(m.AcceptToken(eos));
  EXPECT_TRUE(m.IsTerminated());
  auto mask = m.NextTokenBitmask();
  for (uint32_t w : mask) EXPECT_EQ(w, 0u);
}

TEST(Matcher, RollbackRestoresState) {
  ASSERT_OK_AND_ASSIGN(Grammar g, ParseEbnf("root ::= \"a\" \"b\" \"c\""));
  GrammarMatcher m(CompileOrDie(g, TestVocab()));
  auto start_mask = m.NextTokenBitmask();
  ASSERT_TRUE(m.AcceptToken('a'));
  ASSERT_TRUE(m.AcceptToken('b'));
  EXPECT_FALSE(m.AcceptToken('b'));
  m.Rollback(2);
  EXPECT_EQ(m.num_accepted_tokens(), 0);
  EXPECT_EQ(m.NextTokenBitmask(), start_mask);
  EXPECT_TRUE(m.AcceptBytes("abc"));
  EXPECT_TRUE(m.CanTerminate());
}

TEST(Utf8, SequencesCoverExactlyTheRange) {
  // Every code point in a few ranges is matched by exactly one sequence, and nothing outside.
  for (auto [lo, hi] : std::vector<std::pair<uint32_t, uint32_t>>{
           {0x41, 0x5A}, {0x7F, 0x800}, {0xE9, 0xE9}, {0xFFF0, 0x10010}, {0x3040, 0x30FF}}) {
    auto seqs = internal::Utf8Sequences(lo, hi);
    for (uint32_t cp = (lo > 300 ? lo - 300 : 0); cp <= hi + 300; ++cp) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      std::string enc;
      AppendUtf8Test(cp, &enc);
      int count = 0;
      for (const auto& s : seqs) {
        if (s.size() != enc.size()) continue;
        bool ok = true;
        for (size_t i = 0; i < s.size(); ++i) {
          uint8_t b = static_cast<uint8_t>(enc[i]);
          ok &= b >= s[i].first && b <= s[i].second;
        }
        count += ok;
      }
      EXPECT_EQ(count, (cp >= lo && cp <= hi) ? 1 : 0) << std::hex << cp;
    }
  }
}

}  // namespace
}  // namespace deepinfer::structured
