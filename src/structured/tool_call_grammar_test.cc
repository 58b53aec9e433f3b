// DSML tool-call grammar (tool_call_grammar.h): hand-written DSML blocks in the layout of
// shared/spec/protocol.md §2.1 (accepted or rejected by reading the spec and the schemas, not
// from the builder's output), schema-keyword errors, control-token handling in the vocabulary.
#include "structured/tool_call_grammar.h"

#include "absl/strings/str_replace.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "structured/compiler.h"
#include "structured/matcher.h"

namespace deepinfer::structured {
namespace {

using ::deepinfer::testing::StatusIs;
using ::testing::HasSubstr;

constexpr char kWeather[] = R"({"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 10},
    "days": {"type": "integer", "minimum": 1, "maximum": 7}},
  "required": ["city"]})";
constexpr char kFlag[] = R"({"type": "object", "properties": {
    "on": {"type": "boolean"},
    "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2},
    "mode": {"$ref": "#/$defs/mode"}},
  "required": ["on"], "additionalProperties": false,
  "$defs": {"mode": {"enum": ["fast", "slow"]}}})";

// Byte tokens (0xFF is excluded by VocabularyIndex), the DSML control token, EOS.
struct TestVocab {
  std::shared_ptr<const VocabularyIndex> index;
  int32_t dsml = -1;
  int32_t byte_ff = 0xFF;
  int32_t eos = -1;
};
TestVocab MakeVocab() {
  Vocabulary v;
  for (int b = 0; b < 256; ++b) v.token_bytes.push_back(std::string(1, static_cast<char>(b)));
  TestVocab t;
  t.dsml = static_cast<int32_t>(v.token_bytes.size());
  v.token_bytes.push_back(ControlTokenBytes("｜DSML｜"));
  t.eos = static_cast<int32_t>(v.token_bytes.size());
  v.token_bytes.push_back("");
  v.eos_ids = {t.eos};
  v.special_ids = {t.eos};
  t.index = std::make_shared<VocabularyIndex>(std::move(v));
  return t;
}

std::shared_ptr<const CompiledGrammar> Compile(const ToolCallGrammarOptions& o,
                                               const TestVocab& v) {
  absl::StatusOr<Grammar> g = ToolCallGrammar(o);
  EXPECT_TRUE(g.ok()) << g.status();
  if (!g.ok()) return nullptr;
  auto c = CompiledGrammar::Compile(*g, v.index);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : nullptr;
}

// Feeds `text` token by token: "§" is the DSML control token, every other byte a byte token.
// True when every token is accepted and the grammar is complete (EOS allowed) at the end.
bool Accepts(const std::shared_ptr<const CompiledGrammar>& g, const TestVocab& v,
             std::string_view text) {
  GrammarMatcher m(g);
  const std::string marker = "§";
  size_t i = 0;
  while (i < text.size()) {
    if (text.substr(i, marker.size()) == marker) {
      if (!m.AcceptToken(v.dsml)) return false;
      i += marker.size();
    } else {
      if (!m.AcceptToken(static_cast<uint8_t>(text[i]))) return false;
      ++i;
    }
  }
  return m.CanTerminate() && m.AcceptToken(v.eos);
}

ToolCallGrammarOptions Options(ToolCallStart start, bool parallel = true, std::string forced = "") {
  ToolCallGrammarOptions o;
  o.tools = {{"get_weather", kWeather}, {"set_flag", kFlag}};
  o.start = start;
  o.parallel = parallel;
  o.forced_tool = std::move(forced);
  return o;
}

constexpr char kCallParis[] =
    "<§invoke name=\"get_weather\">\n"
    "<§parameter name=\"city\" string=\"true\">Paris</§parameter>\n"
    "<§parameter name=\"days\" string=\"false\">2</§parameter>\n"
    "</§invoke>";
constexpr char kCallFlag[] =
    "<§invoke name=\"set_flag\">\n"
    "<§parameter name=\"on\" string=\"false\">true</§parameter>\n"
    "<§parameter name=\"tags\" string=\"false\">[\"a\",\"b\"]</§parameter>\n"
    "<§parameter name=\"mode\" string=\"true\">slow</§parameter>\n"
    "</§invoke>";
constexpr char kClose[] = "\n</§tool_calls>";

std::string Block(std::initializer_list<std::string_view> calls) {
  std::string s;
  for (std::string_view c : calls) {
    if (!s.empty()) s += "\n";
    s += c;
  }
  return s + kClose;
}

TEST(ToolCallGrammar, AcceptsOneAndTwoParallelCallsAfterThePrefilledOpener) {
  TestVocab v = MakeVocab();
  auto g = Compile(Options(ToolCallStart::kInBlock), v);
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Accepts(g, v, Block({kCallParis})));
  EXPECT_TRUE(Accepts(g, v, Block({kCallParis, kCallFlag})));
  EXPECT_TRUE(Accepts(g, v, Block({kCallFlag, kCallParis, kCallParis})));
  // Optional parameters may be left out; a Unicode string value is raw text.
  EXPECT_TRUE(Accepts(g, v,
                      "<§invoke name=\"get_weather\">\n"
                      "<§parameter name=\"city\" string=\"true\">Zürich \"Z\"</§parameter>\n"
                      "</§invoke>" +
                          std::string(kClose)));
}

TEST(ToolCallGrammar, FullBlockWhenNothingIsPrefilled) {
  TestVocab v = MakeVocab();
  auto g = Compile(Options(ToolCallStart::kAnswer), v);
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Accepts(g, v, "\n\n<§tool_calls>\n" + Block({kCallParis, kCallFlag})));
  EXPECT_FALSE(Accepts(g, v, Block({kCallParis})));                               // no opener
  EXPECT_FALSE(Accepts(g, v, "Sure.\n\n<§tool_calls>\n" + Block({kCallParis})));  // no text
  EXPECT_FALSE(Accepts(g, v, ""));                                                // no block
}

TEST(ToolCallGrammar, RejectsUnknownNamesSchemaViolationsAndMissingParts) {
  TestVocab v = MakeVocab();
  auto g = Compile(Options(ToolCallStart::kInBlock), v);
  ASSERT_NE(g, nullptr);
  const std::string close = kClose;
  const std::string open_weather = "<§invoke name=\"get_weather\">\n";
  const std::string end_call = "\n</§invoke>";
  auto city = [](std::string value) {
    return "<§parameter name=\"city\" string=\"true\">" + value + "</§parameter>";
  };
  // Unknown function.
  EXPECT_FALSE(Accepts(g, v, "<§invoke name=\"get_time\">\n" + city("x") + end_call + close));
  // maxLength 10.
  EXPECT_FALSE(Accepts(g, v, open_weather + city("Amsterdam!!") + end_call + close));
  EXPECT_TRUE(Accepts(g, v, open_weather + city("Amsterdam!") + end_call + close));
  // days in [1, 7], an integer, passed as JSON.
  const std::string days8 = "\n<§parameter name=\"days\" string=\"false\">8</§parameter>";
  const std::string days_str = "\n<§parameter name=\"days\" string=\"true\">3</§parameter>";
  EXPECT_FALSE(Accepts(g, v, open_weather + city("Oslo") + days8 + end_call + close));
  EXPECT_FALSE(Accepts(g, v, open_weather + city("Oslo") + days_str + end_call + close));
  // Required city missing; city as JSON instead of raw text; an undeclared parameter.
  EXPECT_FALSE(
      Accepts(g, v, open_weather.substr(0, open_weather.size() - 1) + "\n" + end_call + close));
  EXPECT_FALSE(Accepts(g, v,
                       open_weather +
                           "<§parameter name=\"city\" string=\"false\">\"Oslo\"</§parameter>" +
                           end_call + close));
  EXPECT_FALSE(Accepts(g, v,
                       open_weather + city("Oslo") +
                           "\n<§parameter name=\"unit\" string=\"true\">C</§parameter>" + end_call +
                           close));
  // Enum through $ref; boolean as JSON.
  EXPECT_FALSE(Accepts(g, v,
                       "<§invoke name=\"set_flag\">\n"
                       "<§parameter name=\"on\" string=\"false\">true</§parameter>\n"
                       "<§parameter name=\"mode\" string=\"true\">medium</§parameter>\n"
                       "</§invoke>" +
                           close));
  EXPECT_FALSE(Accepts(g, v,
                       "<§invoke name=\"set_flag\">\n"
                       "<§parameter name=\"on\" string=\"false\">yes</§parameter>\n"
                       "</§invoke>" +
                           close));
  // Missing block closer, and text after it.
  EXPECT_FALSE(Accepts(g, v, std::string(kCallParis)));
  EXPECT_FALSE(Accepts(g, v, Block({kCallParis}) + "\n"));
  // The DSML tag spelled with ordinary text instead of the control token.
  EXPECT_FALSE(Accepts(g, v, absl::StrReplaceAll(Block({kCallParis}), {{"§", "｜DSML｜"}})));
}

TEST(ToolCallGrammar, SingleCallAndNamedTool) {
  TestVocab v = MakeVocab();
  auto single = Compile(Options(ToolCallStart::kInBlock, /*parallel=*/false), v);
  ASSERT_NE(single, nullptr);
  EXPECT_TRUE(Accepts(single, v, Block({kCallFlag})));
  EXPECT_FALSE(Accepts(single, v, Block({kCallParis, kCallFlag})));

  auto named = Compile(Options(ToolCallStart::kInBlock, true, "set_flag"), v);
  ASSERT_NE(named, nullptr);
  EXPECT_TRUE(Accepts(named, v, Block({kCallFlag})));
  EXPECT_FALSE(Accepts(named, v, Block({kCallParis})));
  EXPECT_FALSE(Accepts(named, v, Block({kCallFlag, kCallFlag})));

  // The prompt already holds `<D invoke name="get_weather">\n`: parameters come first.
  auto in_invoke = Compile(Options(ToolCallStart::kInInvoke, true, "get_weather"), v);
  ASSERT_NE(in_invoke, nullptr);
  const std::string rest =
      "<§parameter name=\"city\" string=\"true\">Oslo</§parameter>\n"
      "<§parameter name=\"days\" string=\"false\">3</§parameter>\n"
      "</§invoke>\n</§tool_calls>";
  EXPECT_TRUE(Accepts(in_invoke, v, rest));
  EXPECT_FALSE(Accepts(in_invoke, v, std::string(kCallParis) + kClose));
}

TEST(ToolCallGrammar, NoArgumentsAndUntypedParameters) {
  TestVocab v = MakeVocab();
  ToolCallGrammarOptions o;
  o.tools = {{"now", "{}"}, {"echo", R"({"properties": {"x": {}}, "required": ["x"]})"}};
  o.start = ToolCallStart::kInBlock;
  auto g = Compile(o, v);
  ASSERT_NE(g, nullptr);
  // Zero parameters render as ">\n\n</" (spec §2.1).
  EXPECT_TRUE(Accepts(g, v, "<§invoke name=\"now\">\n\n</§invoke>\n</§tool_calls>"));
  // An unconstrained parameter may be raw text or JSON.
  EXPECT_TRUE(Accepts(g, v,
                      "<§invoke name=\"echo\">\n<§parameter name=\"x\" string=\"true\">hi"
                      "</§parameter>\n</§invoke>\n</§tool_calls>"));
  EXPECT_TRUE(Accepts(g, v,
                      "<§invoke name=\"echo\">\n<§parameter name=\"x\" string=\"false\">[1,{}]"
                      "</§parameter>\n</§invoke>\n</§tool_calls>"));
  EXPECT_FALSE(Accepts(g, v,
                       "<§invoke name=\"echo\">\n<§parameter name=\"x\" string=\"false\">[1,"
                       "</§parameter>\n</§invoke>\n</§tool_calls>"));
}

TEST(ToolCallGrammar, V41SpacedTagNames) {
  TestVocab v = MakeVocab();
  ToolCallGrammarOptions o = Options(ToolCallStart::kInBlock);
  o.syntax = DsmlSyntax::V41();
  auto g = Compile(o, v);
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Accepts(g, v,
                      "<§ invoke name=\"get_weather\">\n"
                      "<§ parameter name=\"city\" string=\"true\">Rome</§ parameter>\n"
                      "</§ invoke>\n</§ calls>"));
  EXPECT_FALSE(Accepts(g, v, Block({kCallParis})));
}

TEST(ToolCallGrammar, UnenforceableSchemasAreErrorsNamingToolAndKeyword) {
  auto build = [](std::string schema) {
    ToolCallGrammarOptions o;
    o.tools = {{"f", std::move(schema)}};
    return ToolCallGrammar(o);
  };
  EXPECT_THAT(build(R"({"properties": {"x": {"type": "array", "uniqueItems": true}}})"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr("tool 'f'"), HasSubstr("uniqueItems"))));
  EXPECT_THAT(build(R"({"anyOf": [{"properties": {"a": {}}}, {"properties": {"b": {}}}]})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'anyOf'")));
  EXPECT_THAT(build(R"({"type": "array"})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'type'")));
  EXPECT_THAT(build(R"({"properties": {"s": {"type": "string", "contentSchema": {}}}})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("contentSchema")));
  EXPECT_THAT(build(R"({"properties": {"a\"b": {}}})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("property name")));
  EXPECT_THAT(build("not json"), StatusIs(absl::StatusCode::kInvalidArgument));
  ToolCallGrammarOptions o = Options(ToolCallStart::kInBlock, true, "nope");
  EXPECT_THAT(ToolCallGrammar(o),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'nope'")));
}

TEST(ToolCallGrammar, OptionsRoundTripThroughTheCompilerSpec) {
  ToolCallGrammarOptions o = Options(ToolCallStart::kInInvoke, false, "set_flag");
  o.syntax = DsmlSyntax::V41();
  absl::StatusOr<ToolCallGrammarOptions> back =
      ToolCallGrammarOptionsFromJson(ToolCallGrammarOptionsToJson(o));
  ASSERT_OK(back.status());
  EXPECT_EQ(ToolCallGrammarOptionsToJson(*back), ToolCallGrammarOptionsToJson(o));
  EXPECT_EQ(back->forced_tool, "set_flag");
  EXPECT_EQ(back->start, ToolCallStart::kInInvoke);
  EXPECT_EQ(back->syntax.invoke, " invoke");
  EXPECT_FALSE(back->parallel);
  EXPECT_THAT(ToolCallGrammarOptionsFromJson("{}"), StatusIs(absl::StatusCode::kInvalidArgument));
  ConstraintSpec spec;
  spec.kind = ConstraintSpec::Kind::kToolCalls;
  spec.text = ToolCallGrammarOptionsToJson(o);
  EXPECT_OK(BuildGrammar(spec).status());
}

TEST(ControlTokens, OnlyGrammarsThatSpellThemAllowThemAndRawFFBytesNeverMatch) {
  TestVocab v = MakeVocab();
  // The raw 0xFF byte token is dropped, so "§" cannot be spelled from byte tokens.
  auto g = Compile(Options(ToolCallStart::kAnswer), v);
  ASSERT_NE(g, nullptr);
  GrammarMatcher m(g);
  ASSERT_TRUE(m.AcceptBytes("\n\n<"));
  std::vector<uint32_t> mask = m.NextTokenBitmask();
  auto allowed = [&](int32_t id) { return ((mask[id >> 5] >> (id & 31)) & 1) != 0; };
  EXPECT_TRUE(allowed(v.dsml));
  EXPECT_FALSE(allowed(v.byte_ff));
  int count = 0;
  for (int32_t id = 0; id < v.index->size(); ++id) count += allowed(id);
  EXPECT_EQ(count, 1);
  EXPECT_FALSE(m.AcceptToken(v.byte_ff));
  // A JSON grammar never allows the control token.
  auto json = CompiledGrammar::Compile(AnyJsonGrammar(false), v.index);
  ASSERT_OK(json.status());
  GrammarMatcher jm(*json);
  ASSERT_TRUE(jm.AcceptBytes("[\""));
  std::vector<uint32_t> jmask = jm.NextTokenBitmask();
  EXPECT_FALSE((jmask[v.dsml >> 5] >> (v.dsml & 31)) & 1);
  EXPECT_FALSE(jm.AcceptToken(v.dsml));
}

}  // namespace
}  // namespace deepinfer::structured
