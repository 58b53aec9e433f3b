// Output state machine tests: the streaming cases 11–19 of shared/spec/protocol.md §5, the
// regression cases of issue #8, and split invariance (every output is fed whole, at every two-way
// split between code points, and one code point / marker per chunk; the coalesced events must be
// identical and equal the whole-feed parse).
#include "protocol/output_parser.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "protocol/output_parser_testing.h"

namespace deepinfer::protocol {
namespace {

using Marker = OutputStateMachine::Marker;
using Type = OutputEvent::Type;

// A model output as units: markers and single code points. Written as a string in which
// "{/think}", "{think}", "{DSML}" and "{EOS}" stand for the control-token ids.
using parser_testing::Feed;
using parser_testing::Unit;
using parser_testing::Units;

OutputParserOptions Options(ParserStart start, std::vector<std::string> stop = {}) {
  OutputParserOptions o;
  o.start = start;
  o.stop = std::move(stop);
  o.make_tool_call_id = [](int i) { return "call_" + std::to_string(i); };
  return o;
}

std::string Describe(const std::vector<OutputEvent>& ev) {
  std::string s;
  for (const OutputEvent& e : ev) {
    s += "[" + std::to_string(static_cast<int>(e.type)) + " i=" + std::to_string(e.tool_index) +
         " '" + e.text + "' " + e.tool_name + " valid=" + std::to_string(e.valid) +
         " fin=" + std::string(FinishReasonName(e.finish_reason)) + " " + e.stop_sequence + " " +
         e.error + "]\n";
  }
  return s;
}

// Parses `output` in every feeding and checks they agree; returns the aggregated result.
ParsedOutput ParseAllWays(std::string_view output, const OutputParserOptions& opt,
                          std::optional<StreamEnd> end = StreamEnd::kEndOfSequence) {
  const std::vector<Unit> units = Units(output);
  const std::vector<OutputEvent> whole = CoalesceEvents(Feed(units, {}, opt, end));
  for (size_t cut = 1; cut < units.size(); ++cut) {
    const std::vector<OutputEvent> split = CoalesceEvents(Feed(units, {cut}, opt, end));
    EXPECT_EQ(split, whole) << "split at unit " << cut << " of " << output << "\nwhole:\n"
                            << Describe(whole) << "split:\n"
                            << Describe(split);
    if (split != whole) break;
  }
  std::vector<size_t> every;
  for (size_t i = 1; i < units.size(); ++i) every.push_back(i);
  const std::vector<OutputEvent> singles = CoalesceEvents(Feed(units, every, opt, end));
  EXPECT_EQ(singles, whole) << "one unit per chunk\nwhole:\n"
                            << Describe(whole) << "singles:\n"
                            << Describe(singles);
  // Exactly one finish event, last.
  int finishes = 0;
  for (const OutputEvent& e : whole) finishes += e.type == Type::kFinish;
  EXPECT_EQ(finishes, 1);
  if (!whole.empty()) {
    EXPECT_EQ(whole.back().type, Type::kFinish);
  }
  return Aggregate(whole);
}

void ExpectJsonEq(const std::string& actual, std::string_view expected) {
  const auto a = nlohmann::ordered_json::parse(actual, nullptr, false);
  ASSERT_FALSE(a.is_discarded()) << "not JSON: " << actual;
  EXPECT_EQ(a, nlohmann::ordered_json::parse(expected)) << actual;
}

constexpr std::string_view kWeatherCall =
    "<{DSML}tool_calls>\n<{DSML}invoke name=\"get_weather\">\n"
    "<{DSML}parameter name=\"city\" string=\"true\">Paris</{DSML}parameter>\n"
    "</{DSML}invoke>\n</{DSML}tool_calls>{EOS}";

TEST(OutputParserTest, ReasoningThenAnswer) {
  ParsedOutput p = ParseAllWays("\nLet me think.\n\n{/think}\n\nThe answer is 2.{EOS}",
                                Options(ParserStart::kReasoning));
  EXPECT_EQ(p.reasoning, "Let me think.");
  EXPECT_EQ(p.content, "The answer is 2.");
  EXPECT_EQ(p.finish_reason, FinishReason::kStop);
}

// Spec §5 case 11 + regression "whole DSML block in one chunk".
TEST(OutputParserTest, Case11DsmlOpenerSplitEverywhere) {
  ParsedOutput p = ParseAllWays(std::string("Answer.\n\n") + std::string(kWeatherCall),
                                Options(ParserStart::kAnswer));
  EXPECT_EQ(p.content, "Answer.");
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].name, "get_weather");
  EXPECT_EQ(p.tool_calls[0].id, "call_0");
  EXPECT_EQ(p.tool_calls[0].arguments, "{\"city\": \"Paris\"}");
  EXPECT_TRUE(p.tool_calls[0].valid);
  EXPECT_EQ(p.finish_reason, FinishReason::kToolCalls);
}

// Regression (vLLM #48020, SGLang #35563): the whole DSML block arriving in one chunk (one
// FeedText per text run) still yields the name and the full arguments.
TEST(OutputParserTest, RegressionWholeBlockInOneChunk) {
  OutputStateMachine m(Options(ParserStart::kAnswer));
  std::vector<OutputEvent> out;
  m.FeedText("Sure.\n\n<", &out);
  m.FeedMarker(Marker::kDsml, &out);
  m.FeedText("tool_calls>\n<", &out);
  m.FeedMarker(Marker::kDsml, &out);
  m.FeedText("invoke name=\"get_weather\">\n<", &out);
  m.FeedMarker(Marker::kDsml, &out);
  m.FeedText("parameter name=\"city\" string=\"true\">Paris</", &out);
  m.FeedMarker(Marker::kDsml, &out);
  m.FeedText("parameter>\n</", &out);
  m.FeedMarker(Marker::kDsml, &out);
  m.FeedText("invoke>\n</", &out);
  m.FeedMarker(Marker::kDsml, &out);
  m.FeedText("tool_calls>", &out);
  m.FeedMarker(Marker::kEos, &out);
  ParsedOutput p = Aggregate(out);
  EXPECT_EQ(p.content, "Sure.");
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].name, "get_weather");
  EXPECT_EQ(p.tool_calls[0].arguments, "{\"city\": \"Paris\"}");
  EXPECT_EQ(p.finish_reason, FinishReason::kToolCalls);
}

// Spec §5 case 12: plain-text near-misses are content, held bytes are flushed at EOS.
TEST(OutputParserTest, Case12NearMissIsContent) {
  EXPECT_EQ(ParseAllWays("use a <｜DS buffer{EOS}", Options(ParserStart::kAnswer)).content,
            "use a <｜DS buffer");
  ParsedOutput p = ParseAllWays("x <｜DSM{EOS}", Options(ParserStart::kAnswer));
  EXPECT_EQ(p.content, "x <｜DSM");
  EXPECT_EQ(ParseAllWays("a <", Options(ParserStart::kAnswer)).content, "a <");
  EXPECT_EQ(ParseAllWays("a\n\n<b>c\n\n{EOS}", Options(ParserStart::kAnswer)).content,
            "a\n\n<b>c\n\n");
  // The plain-text spelling of a DSML block (no ｜DSML｜ id) is literal content.
  EXPECT_EQ(ParseAllWays("<｜DSML｜tool_calls>{EOS}", Options(ParserStart::kAnswer)).content,
            "<｜DSML｜tool_calls>");
}

// Spec §5 case 13: parallel calls, the second with a string="false" parameter.
TEST(OutputParserTest, Case13ParallelCalls) {
  ParsedOutput p = ParseAllWays(
      "Need both cities.{/think}\n\n<{DSML}tool_calls>\n"
      "<{DSML}invoke name=\"get_weather\">\n"
      "<{DSML}parameter name=\"city\" string=\"true\">Beijing</{DSML}parameter>\n"
      "</{DSML}invoke>\n<{DSML}invoke name=\"get_weather\">\n"
      "<{DSML}parameter name=\"city\" string=\"true\">Shanghai</{DSML}parameter>\n"
      "<{DSML}parameter name=\"days\" string=\"false\">3</{DSML}parameter>\n"
      "</{DSML}invoke>\n</{DSML}tool_calls>{EOS}",
      Options(ParserStart::kReasoning));
  EXPECT_EQ(p.reasoning, "Need both cities.");
  EXPECT_EQ(p.content, "");
  ASSERT_EQ(p.tool_calls.size(), 2u);
  EXPECT_EQ(p.tool_calls[0].arguments, "{\"city\": \"Beijing\"}");
  EXPECT_EQ(p.tool_calls[1].arguments, "{\"city\": \"Shanghai\", \"days\": 3}");
  EXPECT_NE(p.tool_calls[0].id, p.tool_calls[1].id);
  EXPECT_EQ(p.finish_reason, FinishReason::kToolCalls);
}

// Each call is announced exactly once, with its name, before its arguments.
TEST(OutputParserTest, ToolCallStartOncePerCall) {
  OutputStateMachine m(Options(ParserStart::kAnswer));
  std::vector<OutputEvent> out;
  for (const Unit& u : Units(kWeatherCall)) {
    if (u.is_marker) {
      m.FeedMarker(u.marker, &out);
    } else {
      m.FeedText(u.text, &out);
    }
  }
  int starts = 0;
  bool args_before_start = false;
  for (const OutputEvent& e : out) {
    if (e.type == Type::kToolCallStart) ++starts;
    if (e.type == Type::kToolCallArguments && starts == 0) args_before_start = true;
  }
  EXPECT_EQ(starts, 1);
  EXPECT_FALSE(args_before_start);
}

// Spec §5 case 14: empty argument lists and unusual keys.
TEST(OutputParserTest, Case14EmptyAndUnusualArguments) {
  ParsedOutput p = ParseAllWays("<{DSML}invoke name=\"now\">\n\n</{DSML}invoke>{EOS}",
                                Options(ParserStart::kAnswer));
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].arguments, "{}");
  ParsedOutput q = ParseAllWays(
      "<{DSML}tool_calls>\n<{DSML}invoke name=\"ship\">\n"
      "<{DSML}parameter name=\"shipping address\" string=\"true\">1 Main St</{DSML}parameter>\n"
      "<{DSML}parameter name=\" string= mode \" string=\"false\">{\"a\": 1}</{DSML}parameter>\n"
      "<{DSML}parameter name=\"count\" string=\"false\">2</{DSML}parameter>\n"
      "<{DSML}parameter name=\"\" string=\"true\">empty key</{DSML}parameter>\n"
      "<{DSML}parameter name=\"城市\" string=\"true\">上海</{DSML}parameter>\n"
      "</{DSML}invoke>\n</{DSML}tool_calls>{EOS}",
      Options(ParserStart::kAnswer));
  ASSERT_EQ(q.tool_calls.size(), 1u);
  EXPECT_EQ(q.tool_calls[0].arguments,
            "{\"shipping address\": \"1 Main St\", \" string= mode \": {\"a\": 1}, \"count\": 2, "
            "\"\": \"empty key\", \"城市\": \"上海\"}");
}

// Spec §5 case 15: string values that need escaping, split at every code point.
TEST(OutputParserTest, Case15StringEscaping) {
  const std::string value = "q\"b\\s\tt\nn\x01u</x <｜User｜> 中文";
  ParsedOutput p = ParseAllWays(
      "<{DSML}tool_calls>\n<{DSML}invoke name=\"w\">\n<{DSML}parameter name=\"v\" "
      "string=\"true\">" +
          value + "</{DSML}parameter>\n</{DSML}invoke>\n</{DSML}tool_calls>{EOS}",
      Options(ParserStart::kAnswer));
  ASSERT_EQ(p.tool_calls.size(), 1u);
  const auto j = nlohmann::json::parse(p.tool_calls[0].arguments, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << p.tool_calls[0].arguments;
  EXPECT_EQ(j["v"].get<std::string>(), value);
  EXPECT_EQ(p.tool_calls[0].arguments,
            "{\"v\": \"q\\\"b\\\\s\\tt\\nn\\u0001u</x <｜User｜> 中文\"}");
}

// Spec §5 case 16: a nested JSON value is passed through; `</` inside it does not end it.
TEST(OutputParserTest, Case16NestedJsonValue) {
  const std::string value = "{\"a\":[1,{\"b\":null}],\"c\":\"x\\\"y</z\"}";
  ParsedOutput p = ParseAllWays(
      "<{DSML}tool_calls>\n<{DSML}invoke name=\"w\">\n<{DSML}parameter name=\"payload\" "
      "string=\"false\">" +
          value + "</{DSML}parameter>\n</{DSML}invoke>\n</{DSML}tool_calls>{EOS}",
      Options(ParserStart::kAnswer));
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].arguments, "{\"payload\": " + value + "}");
  EXPECT_TRUE(p.tool_calls[0].valid);
  // Invalid JSON: the call is closed but marked broken, and the stream reports the error.
  ParsedOutput bad = ParseAllWays(
      "<{DSML}tool_calls>\n<{DSML}invoke name=\"w\">\n<{DSML}parameter name=\"n\" "
      "string=\"false\">Paris</{DSML}parameter>\n</{DSML}invoke>\n</{DSML}tool_calls>{EOS}",
      Options(ParserStart::kAnswer));
  ASSERT_EQ(bad.tool_calls.size(), 1u);
  EXPECT_EQ(bad.tool_calls[0].arguments, "{\"n\": Paris}");
  EXPECT_FALSE(bad.tool_calls[0].valid);
  EXPECT_EQ(bad.finish_reason, FinishReason::kToolCallError);
}

// Spec §5 case 17: reasoning without </think>.
TEST(OutputParserTest, Case17ReasoningWithoutThinkEnd) {
  ParsedOutput a =
      ParseAllWays("Let me think…", Options(ParserStart::kReasoning), StreamEnd::kLength);
  EXPECT_EQ(a.reasoning, "Let me think…");
  EXPECT_EQ(a.content, "");
  EXPECT_EQ(a.finish_reason, FinishReason::kLength);
  ParsedOutput b = ParseAllWays(std::string("plan…\n\n") + std::string(kWeatherCall),
                                Options(ParserStart::kReasoning));
  EXPECT_EQ(b.reasoning, "plan…");
  ASSERT_EQ(b.tool_calls.size(), 1u);
  EXPECT_EQ(b.tool_calls[0].arguments, "{\"city\": \"Paris\"}");
  EXPECT_EQ(b.finish_reason, FinishReason::kToolCalls);
  ParsedOutput c = ParseAllWays("{/think}Hello{EOS}", Options(ParserStart::kReasoning));
  EXPECT_EQ(c.reasoning, "");
  EXPECT_EQ(c.content, "Hello");
}

// Spec §5 case 18: stray and literal think tags (we are the id-aware kind of parser).
TEST(OutputParserTest, Case18StrayAndLiteralThinkTags) {
  EXPECT_EQ(ParseAllWays("{/think}Hi{EOS}", Options(ParserStart::kAnswer)).content, "Hi");
  ParsedOutput p = ParseAllWays("a </think> b{/think}c{EOS}", Options(ParserStart::kReasoning));
  EXPECT_EQ(p.reasoning, "a </think> b");
  EXPECT_EQ(p.content, "c");
  EXPECT_EQ(ParseAllWays("x{think}y{/think}z{EOS}", Options(ParserStart::kAnswer)).content, "xyz");
}

// Spec §5 case 19 + regressions "stop string inside reasoning", "first characters of a stop
// string are never emitted before the match is decided".
TEST(OutputParserTest, Case19StopSequences) {
  const std::vector<std::string> stops = {"END", "\n\nUser:"};
  ParsedOutput p = ParseAllWays("The END more{EOS}", Options(ParserStart::kAnswer, stops));
  EXPECT_EQ(p.content, "The ");
  EXPECT_EQ(p.finish_reason, FinishReason::kStopSequence);
  EXPECT_EQ(p.stop_sequence, "END");
  EXPECT_EQ(ParseAllWays("The ENX{EOS}", Options(ParserStart::kAnswer, stops)).content, "The ENX");
  EXPECT_EQ(ParseAllWays("a\n\nUser: hi{EOS}", Options(ParserStart::kAnswer, stops)).content, "a");
  // EOS after a partial match flushes it.
  ParsedOutput partial = ParseAllWays("The EN{EOS}", Options(ParserStart::kAnswer, stops));
  EXPECT_EQ(partial.content, "The EN");
  EXPECT_EQ(partial.finish_reason, FinishReason::kStop);
  // Not in reasoning, not in tool arguments.
  ParsedOutput r =
      ParseAllWays("think END here{/think}ok END x{EOS}", Options(ParserStart::kReasoning, stops));
  EXPECT_EQ(r.reasoning, "think END here");
  EXPECT_EQ(r.content, "ok ");
  ParsedOutput t = ParseAllWays(
      "<{DSML}tool_calls>\n<{DSML}invoke name=\"w\">\n<{DSML}parameter name=\"v\" "
      "string=\"true\">THE END</{DSML}parameter>\n</{DSML}invoke>\n</{DSML}tool_calls>{EOS}",
      Options(ParserStart::kAnswer, stops));
  ASSERT_EQ(t.tool_calls.size(), 1u);
  EXPECT_EQ(t.tool_calls[0].arguments, "{\"v\": \"THE END\"}");
  // Streaming: "The EN" alone emits only "The ".
  OutputStateMachine m(Options(ParserStart::kAnswer, stops));
  std::vector<OutputEvent> out;
  m.FeedText("The EN", &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].text, "The ");
  m.FeedText("D more", &out);
  EXPECT_TRUE(m.finished());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].type, Type::kFinish);
  // Overlapping stop strings: the earliest start wins, shorter first on ties.
  EXPECT_EQ(ParseAllWays("xabcd{EOS}", Options(ParserStart::kAnswer, {"abcd", "bc"})).content, "x");
  ParsedOutput tie = ParseAllWays("xabc{EOS}", Options(ParserStart::kAnswer, {"abc", "ab"}));
  EXPECT_EQ(tie.content, "x");
  EXPECT_EQ(tie.stop_sequence, "ab");
}

// min_tokens (vLLM's semantics): while stop strings are disarmed a complete one is plain text;
// a partial match held across the arming point still matches (OutputParser arms at the id that
// reaches min_tokens).
TEST(OutputParserTest, StopStringsWaitForMinTokens) {
  const OutputParserOptions opt = Options(ParserStart::kAnswer, {"END"});
  {
    OutputStateMachine m(opt);
    std::vector<OutputEvent> out;
    m.SetStopsArmed(false);
    m.FeedText("The END and EN", &out);
    EXPECT_FALSE(m.finished());
    m.SetStopsArmed(true);
    m.FeedText("D more", &out);
    ASSERT_TRUE(m.finished());
    const ParsedOutput p = Aggregate(out);
    EXPECT_EQ(p.content, "The END and ");
    EXPECT_EQ(p.finish_reason, FinishReason::kStopSequence);
    EXPECT_EQ(p.stop_sequence, "END");
  }
  {
    // Never armed: the stream ends by EOS with every stop string in the text.
    OutputStateMachine m(opt);
    std::vector<OutputEvent> out;
    m.SetStopsArmed(false);
    m.FeedText("END END EN", &out);
    m.FeedMarker(Marker::kEos, &out);
    const ParsedOutput p = Aggregate(out);
    EXPECT_EQ(p.content, "END END EN");
    EXPECT_EQ(p.finish_reason, FinishReason::kStop);
  }
}

// parallel_tool_calls false (max_tool_calls 1): the stream ends with the first call, in every
// feeding; nothing after it is parsed (vLLM returns only the first call too).
TEST(OutputParserTest, MaxToolCallsEndsAfterTheFirstCall) {
  OutputParserOptions opt = Options(ParserStart::kReasoning);
  opt.max_tool_calls = 1;
  ParsedOutput p = ParseAllWays(
      "Need both cities.{/think}\n\n<{DSML}tool_calls>\n"
      "<{DSML}invoke name=\"get_weather\">\n"
      "<{DSML}parameter name=\"city\" string=\"true\">Beijing</{DSML}parameter>\n"
      "</{DSML}invoke>\n<{DSML}invoke name=\"get_weather\">\n"
      "<{DSML}parameter name=\"city\" string=\"true\">Shanghai</{DSML}parameter>\n"
      "</{DSML}invoke>\n</{DSML}tool_calls>{EOS}",
      opt);
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].arguments, "{\"city\": \"Beijing\"}");
  EXPECT_TRUE(p.tool_calls[0].valid);
  EXPECT_EQ(p.finish_reason, FinishReason::kToolCalls);
  // A repaired missing invoke closer (the next invoke opens) also ends it there.
  ParsedOutput q = ParseAllWays(
      "<{DSML}tool_calls>\n<{DSML}invoke name=\"a\">\n</{DSML}parameter>"
      "<{DSML}invoke name=\"b\">\n</{DSML}invoke>{EOS}",
      [] {
        OutputParserOptions o = Options(ParserStart::kAnswer);
        o.max_tool_calls = 1;
        return o;
      }());
  EXPECT_LE(q.tool_calls.size(), 1u);
  // The limit counts calls, so with 2 both come through.
  opt.max_tool_calls = 2;
  EXPECT_EQ(ParseAllWays("{/think}<{DSML}tool_calls>\n<{DSML}invoke name=\"a\">\n</{DSML}invoke>\n"
                         "<{DSML}invoke name=\"b\">\n</{DSML}invoke>\n</{DSML}tool_calls>{EOS}",
                         opt)
                .tool_calls.size(),
            2u);
}

// Regression: a DSML block without the wrapper, or left unterminated, never comes back as plain
// content with finish "stop" (SGLang #40236).
TEST(OutputParserTest, RegressionBareInvokeAndUnterminatedBlock) {
  ParsedOutput bare = ParseAllWays(
      "Sure.\n\n<{DSML}invoke name=\"get_weather\">\n<{DSML}parameter name=\"city\" "
      "string=\"true\">Paris</{DSML}parameter>\n</{DSML}invoke>{EOS}",
      Options(ParserStart::kAnswer));
  EXPECT_EQ(bare.content, "Sure.");
  ASSERT_EQ(bare.tool_calls.size(), 1u);
  EXPECT_EQ(bare.tool_calls[0].arguments, "{\"city\": \"Paris\"}");
  EXPECT_EQ(bare.finish_reason, FinishReason::kToolCalls);

  // Block closer missing, the call itself complete: tolerated.
  ParsedOutput open = ParseAllWays(
      "<{DSML}tool_calls>\n<{DSML}invoke name=\"get_weather\">\n<{DSML}parameter name=\"city\" "
      "string=\"true\">Paris</{DSML}parameter>\n</{DSML}invoke>\n{EOS}",
      Options(ParserStart::kAnswer));
  ASSERT_EQ(open.tool_calls.size(), 1u);
  EXPECT_TRUE(open.tool_calls[0].valid);
  EXPECT_EQ(open.finish_reason, FinishReason::kToolCalls);

  // EOS inside the invoke: a broken call, never executable, never content.
  ParsedOutput cut = ParseAllWays(
      "<{DSML}tool_calls>\n<{DSML}invoke name=\"rm\">\n<{DSML}parameter name=\"path\" "
      "string=\"true\">/tmp/x{EOS}",
      Options(ParserStart::kAnswer));
  EXPECT_EQ(cut.content, "");
  ASSERT_EQ(cut.tool_calls.size(), 1u);
  EXPECT_FALSE(cut.tool_calls[0].valid);
  EXPECT_EQ(cut.finish_reason, FinishReason::kToolCallError);

  // Truncated by max_tokens inside a call: length, call invalid.
  ParsedOutput len = ParseAllWays(
      "<{DSML}tool_calls>\n<{DSML}invoke name=\"rm\">\n<{DSML}parameter name=\"path\" "
      "string=\"true\">/tmp/x",
      Options(ParserStart::kAnswer), StreamEnd::kLength);
  ASSERT_EQ(len.tool_calls.size(), 1u);
  EXPECT_FALSE(len.tool_calls[0].valid);
  EXPECT_EQ(len.finish_reason, FinishReason::kLength);

  // Only the opener, then EOS.
  ParsedOutput lone =
      ParseAllWays("Hi\n\n<{DSML}tool_calls>\n{EOS}", Options(ParserStart::kAnswer));
  EXPECT_EQ(lone.content, "Hi");
  EXPECT_EQ(lone.finish_reason, FinishReason::kToolCallError);
  ParsedOutput half = ParseAllWays("Hi\n\n<{DSML}tool_c{EOS}", Options(ParserStart::kAnswer));
  EXPECT_EQ(half.content, "Hi");
  EXPECT_EQ(half.finish_reason, FinishReason::kToolCallError);
}

// Regression (vLLM #53227): a partially received closer never leaks into the value.
TEST(OutputParserTest, RegressionPartialCloserNeverLeaks) {
  const std::string out =
      "<{DSML}tool_calls>\n<{DSML}invoke name=\"f\">\n<{DSML}parameter name=\"cmd\" "
      "string=\"true\">find /tmp</{DSML}parameter";
  for (StreamEnd end : {StreamEnd::kEndOfSequence, StreamEnd::kLength}) {
    ParsedOutput p = ParseAllWays(out, Options(ParserStart::kAnswer), end);
    ASSERT_EQ(p.tool_calls.size(), 1u);
    EXPECT_EQ(p.tool_calls[0].arguments, "{\"cmd\": \"find /tmp");
    EXPECT_FALSE(p.tool_calls[0].valid);
  }
  // Mid-stream: after "…/tmp</" only "find /tmp" has been emitted.
  OutputStateMachine m(Options(ParserStart::kAnswer));
  std::vector<OutputEvent> ev;
  for (const Unit& u : Units(out)) {
    if (u.is_marker) {
      m.FeedMarker(u.marker, &ev);
    } else {
      m.FeedText(u.text, &ev);
    }
  }
  std::string args;
  for (const OutputEvent& e : ev) {
    if (e.type == Type::kToolCallArguments) args += e.text;
  }
  EXPECT_EQ(args, "{\"cmd\": \"find /tmp");
}

// vLLM #54838: a missing parameter closer before the next parameter is repaired.
TEST(OutputParserTest, MissingParameterCloserRepaired) {
  ParsedOutput p = ParseAllWays(
      "<{DSML}tool_calls>\n<{DSML}invoke name=\"f\">\n"
      "<{DSML}parameter name=\"a\" string=\"true\">x\n"
      "<{DSML}parameter name=\"b\" string=\"false\">2\n"
      "</{DSML}invoke>\n</{DSML}tool_calls>{EOS}",
      Options(ParserStart::kAnswer));
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].arguments, "{\"a\": \"x\\n\", \"b\": 2\n}");
  EXPECT_TRUE(p.tool_calls[0].valid);
  ExpectJsonEq(p.tool_calls[0].arguments, R"({"a": "x\n", "b": 2})");
}

TEST(OutputParserTest, MalformedDsmlIsAnError) {
  // Unknown tag.
  ParsedOutput u = ParseAllWays("ok\n\n<{DSML}foo>bar{EOS}", Options(ParserStart::kAnswer));
  EXPECT_EQ(u.content, "ok");
  EXPECT_EQ(u.finish_reason, FinishReason::kToolCallError);
  EXPECT_THAT(u.error, ::testing::HasSubstr("unrecognised DSML tag"));
  // Missing string attribute: the call is broken.
  ParsedOutput a = ParseAllWays(
      "<{DSML}tool_calls>\n<{DSML}invoke name=\"f\">\n<{DSML}parameter name=\"a\">1"
      "</{DSML}parameter>\n</{DSML}invoke>\n</{DSML}tool_calls>{EOS}",
      Options(ParserStart::kAnswer));
  ASSERT_EQ(a.tool_calls.size(), 1u);
  EXPECT_FALSE(a.tool_calls[0].valid);
  EXPECT_EQ(a.finish_reason, FinishReason::kToolCallError);
  // Duplicate parameter.
  ParsedOutput d = ParseAllWays(
      "<{DSML}tool_calls>\n<{DSML}invoke name=\"f\">\n"
      "<{DSML}parameter name=\"a\" string=\"true\">1</{DSML}parameter>\n"
      "<{DSML}parameter name=\"a\" string=\"true\">2</{DSML}parameter>\n"
      "</{DSML}invoke>\n</{DSML}tool_calls>{EOS}",
      Options(ParserStart::kAnswer));
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_FALSE(d.tool_calls[0].valid);
  // Text after the block is dropped, not content.
  ParsedOutput after =
      ParseAllWays(std::string(kWeatherCall.substr(0, kWeatherCall.size() - 5)) + "trailing{EOS}",
                   Options(ParserStart::kAnswer));
  EXPECT_EQ(after.content, "");
  EXPECT_EQ(after.finish_reason, FinishReason::kToolCalls);
}

// Near-miss wrapper of vLLM #51914 and V4.1 spaced names.
TEST(OutputParserTest, WrapperVariantsAndV41Names) {
  ParsedOutput w = ParseAllWays(
      "<{DSML}toolcalls>\n<{DSML}invoke name=\"f\">\n\n</{DSML}invoke>\n</{DSML}toolcalls>{EOS}",
      Options(ParserStart::kAnswer));
  ASSERT_EQ(w.tool_calls.size(), 1u);
  EXPECT_EQ(w.finish_reason, FinishReason::kToolCalls);
  ParsedOutput v41 = ParseAllWays(
      "r{/think}\n\n<{DSML} calls>\n<{DSML} invoke name=\"bash\">\n"
      "<{DSML} parameter name=\"cmd\" string=\"true\">ls /data</{DSML} parameter>\n"
      "<{DSML} parameter name=\"timeout\" string=\"false\">5</{DSML} parameter>\n"
      "</{DSML} invoke>\n</{DSML} calls>{EOS}",
      Options(ParserStart::kReasoning));
  EXPECT_EQ(v41.reasoning, "r");
  ASSERT_EQ(v41.tool_calls.size(), 1u);
  EXPECT_EQ(v41.tool_calls[0].name, "bash");
  EXPECT_EQ(v41.tool_calls[0].arguments, "{\"cmd\": \"ls /data\", \"timeout\": 5}");
}

// Spec §5 case 20d: an undeclared function is handled identically in every feeding (it is never
// announced) and the stream reports the error.
TEST(OutputParserTest, Case20dUndeclaredTool) {
  OutputParserOptions o = Options(ParserStart::kAnswer);
  o.declared_tools = std::vector<std::string>{"get_time"};
  ParsedOutput p = ParseAllWays(kWeatherCall, o);
  EXPECT_TRUE(p.tool_calls.empty());
  EXPECT_EQ(p.finish_reason, FinishReason::kToolCallError);
  EXPECT_THAT(p.error, ::testing::HasSubstr("undeclared tool 'get_weather'"));
  o.declared_tools = std::vector<std::string>{"get_weather"};
  EXPECT_EQ(ParseAllWays(kWeatherCall, o).finish_reason, FinishReason::kToolCalls);
}

// tool_choice required / named start states (prompt_encoder.h ParserStart).
TEST(OutputParserTest, ForcedToolChoiceStarts) {
  ParsedOutput r = ParseAllWays(
      "<{DSML}invoke name=\"f\">\n<{DSML}parameter name=\"x\" string=\"false\">1"
      "</{DSML}parameter>\n</{DSML}invoke>\n</{DSML}tool_calls>{EOS}",
      Options(ParserStart::kToolCalls));
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments, "{\"x\": 1}");
  OutputParserOptions o = Options(ParserStart::kToolArguments);
  o.forced_tool_name = "f";
  ParsedOutput n = ParseAllWays(
      "<{DSML}parameter name=\"x\" string=\"false\">1</{DSML}parameter>\n</{DSML}invoke>\n"
      "</{DSML}tool_calls>{EOS}",
      o);
  ASSERT_EQ(n.tool_calls.size(), 1u);
  EXPECT_EQ(n.tool_calls[0].name, "f");
  EXPECT_EQ(n.tool_calls[0].arguments, "{\"x\": 1}");
  EXPECT_EQ(n.finish_reason, FinishReason::kToolCalls);
}

TEST(OutputParserTest, FinishIsIdempotentAndFeedAfterFinishIgnored) {
  OutputStateMachine m(Options(ParserStart::kAnswer));
  std::vector<OutputEvent> out;
  m.FeedText("a", &out);
  m.FeedMarker(Marker::kEos, &out);
  m.FeedText("b", &out);
  m.Finish(StreamEnd::kLength, &out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].text, "a");
  EXPECT_EQ(out[1].finish_reason, FinishReason::kStop);
  OutputStateMachine c(Options(ParserStart::kAnswer));
  std::vector<OutputEvent> cancelled;
  c.FeedText("x", &cancelled);
  c.Finish(StreamEnd::kCancelled, &cancelled);
  EXPECT_EQ(cancelled.back().finish_reason, FinishReason::kCancelled);
}

}  // namespace
}  // namespace deepinfer::protocol
