// A forced tool call cut off by max_tokens (tool_choice required / named on Chat Completions,
// any / tool on Messages, required / named on Responses) must give the same answer streamed and
// not streamed (docs/protocol.md, "Truncated tool calls"). Each scripted model output runs through
// protocol::OutputStateMachine at every chunk split and ends with Finish(kLength); the streamed
// events are accumulated the way the official SDKs do, and compared with the non-streaming body
// built from the same events and with hand-written expectations.
#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "api/messages_codec.h"
#include "api/openai_codec.h"
#include "api/responses_codec.h"
#include "api/scripted_output_testing.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace deepinfer::api {
namespace {

using Json = nlohmann::ordered_json;
using protocol::OutputEvent;
using protocol::ParserStart;

// Order-insensitive view for comparisons.
nlohmann::json U(const Json& j) { return nlohmann::json::parse(j.dump()); }

struct Case {
  const char* label;
  ParserStart start;   // kToolCalls: tool_choice required; kToolArguments: named
  std::string script;  // the model output after the prompt's prefill, cut by max_tokens
  // Hand-written expectations (spec §2.3 reference layout for the arguments text).
  std::vector<std::pair<std::string, std::string>> calls;  // (name, streamed arguments text)
  std::vector<Json> messages_input;                        // Messages non-stream `input` per call
};

std::vector<Case> Cases() {
  return {
      {"required, cut inside a string value",
       ParserStart::kToolCalls,
       "<{DSML}invoke name=\"get_weather\">\n<{DSML}parameter name=\"city\" string=\"true\">Par",
       {{"get_weather", "{\"city\": \"Par"}},
       {Json::object()}},
      {"named, cut inside a raw value after a complete member",
       ParserStart::kToolArguments,
       "<{DSML}parameter name=\"city\" string=\"true\">Paris</{DSML}parameter>\n"
       "<{DSML}parameter name=\"days\" string=\"false\">1",
       {{"get_weather", "{\"city\": \"Paris\", \"days\": 1"}},
       {Json{{"city", "Paris"}}}},
      {"named, cut before any argument",
       ParserStart::kToolArguments,
       "",
       {{"get_weather", ""}},
       {Json::object()}},
      {"required, cut after the name",
       ParserStart::kToolCalls,
       "<{DSML}invoke name=\"get_weather\">\n<{DSML}para",
       {{"get_weather", ""}},
       {Json::object()}},
      {"required, cut right after a complete literal",
       ParserStart::kToolCalls,
       "<{DSML}invoke name=\"get_time\">\n<{DSML}parameter name=\"h24\" string=\"false\">true",
       {{"get_time", "{\"h24\": true"}},
       {Json{{"h24", true}}}},
      {"required, cut inside a literal",
       ParserStart::kToolCalls,
       "<{DSML}invoke name=\"get_time\">\n<{DSML}parameter name=\"h24\" string=\"false\">tr",
       {{"get_time", "{\"h24\": tr"}},
       {Json::object()}},
      {"required, second parallel call cut",
       ParserStart::kToolCalls,
       "<{DSML}invoke name=\"get_time\">\n<{DSML}parameter name=\"tz\" string=\"true\">CET"
       "</{DSML}parameter>\n</{DSML}invoke>\n<{DSML}invoke name=\"get_weather\">\n"
       "<{DSML}parameter name=\"city\" string=\"true\">Paris</{DSML}parameter>\n"
       "<{DSML}parameter name=\"where\" string=\"false\">{\"lat\": 4",
       {{"get_time", "{\"tz\": \"CET\"}"},
        {"get_weather", "{\"city\": \"Paris\", \"where\": {\"lat\": 4"}},
       {Json{{"tz", "CET"}}, Json{{"city", "Paris"}}}},
  };
}

std::vector<OutputEvent> FeedCase(const Case& c, const std::vector<scripted::ScriptUnit>& units,
                                  const std::vector<size_t>& cuts) {
  protocol::OutputParserOptions opt;
  opt.start = c.start;
  if (c.start == ParserStart::kToolArguments) opt.forced_tool_name = "get_weather";
  opt.declared_tools = std::vector<std::string>{"get_weather", "get_time"};
  opt.make_tool_call_id = [](int i) { return "call_" + std::to_string(i); };
  return protocol::parser_testing::Feed(units, cuts, opt, protocol::StreamEnd::kLength);
}

// What the openai SDK's ChatCompletionStream accumulates from the chunks' deltas.
Json AccumulateChatDeltas(const std::vector<OutputEvent>& events) {
  Json msg{{"role", "assistant"}, {"content", nullptr}};
  Json calls = Json::array();
  std::string content;
  bool has_content = false;
  for (const OutputEvent& e : protocol::CoalesceEvents(events)) {
    std::optional<Json> delta = ChatDeltaForEvent(e);
    if (!delta) continue;
    if (delta->contains("content")) {
      content += (*delta)["content"].get<std::string>();
      has_content = true;
    }
    if (!delta->contains("tool_calls")) continue;
    for (const Json& tc : (*delta)["tool_calls"]) {
      const size_t index = tc["index"].get<size_t>();
      if (index >= calls.size()) {
        EXPECT_EQ(index, calls.size()) << "tool call indices must appear in order";
        calls.push_back(Json{{"id", tc["id"]},
                             {"type", tc["type"]},
                             {"function", {{"name", tc["function"]["name"]}, {"arguments", ""}}}});
      }
      calls[index]["function"]["arguments"] =
          calls[index]["function"]["arguments"].get<std::string>() +
          tc["function"]["arguments"].get<std::string>();
    }
  }
  if (has_content) msg["content"] = content;
  if (!calls.empty()) msg["tool_calls"] = calls;
  return msg;
}

std::string SplitLabel(const std::vector<size_t>& cuts) {
  return cuts.size() == 1 ? "split at " + std::to_string(cuts[0])
                          : "chunks: " + std::to_string(cuts.size() + 1);
}

TEST(TruncatedToolCallTest, ChatStreamAndNonStreamAgree) {
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.label);
    const std::vector<scripted::ScriptUnit> units = scripted::ScriptUnits(c.script);
    for (const std::vector<size_t>& cuts : scripted::AllSplits(std::max<size_t>(units.size(), 1))) {
      SCOPED_TRACE(SplitLabel(cuts));
      const std::vector<OutputEvent> events = FeedCase(c, units, cuts);
      ASSERT_FALSE(events.empty());
      ASSERT_EQ(events.back().type, OutputEvent::Type::kFinish);
      EXPECT_EQ(ChatFinishReason(events.back().finish_reason), "length");

      const ChatChoiceOut choice = ChatChoiceFromEvents(events, /*with_reasoning=*/false);
      EXPECT_EQ(choice.finish_reason, "length");
      const Json body = ChatCompletionJson("id", 0, "m", {choice}, Usage{});
      const Json& message = body["choices"][0]["message"];
      // Non-stream == the concatenated stream deltas.
      EXPECT_EQ(U(message), U(AccumulateChatDeltas(events)));
      // == the hand-written partial calls.
      Json expected_calls = Json::array();
      for (size_t i = 0; i < c.calls.size(); ++i) {
        expected_calls.push_back(
            Json{{"id", "call_" + std::to_string(i)},
                 {"type", "function"},
                 {"function", {{"name", c.calls[i].first}, {"arguments", c.calls[i].second}}}});
      }
      EXPECT_EQ(
          U(message),
          U(Json{{"role", "assistant"}, {"content", nullptr}, {"tool_calls", expected_calls}}));
    }
  }
}

TEST(TruncatedToolCallTest, ResponsesStreamAndNonStreamAgree) {
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.label);
    const std::vector<scripted::ScriptUnit> units = scripted::ScriptUnits(c.script);
    for (const std::vector<size_t>& cuts : scripted::AllSplits(std::max<size_t>(units.size(), 1))) {
      SCOPED_TRACE(SplitLabel(cuts));
      ResponsesEncoder enc(ResponseMeta{"resp_1", 0, "m", nullptr});
      std::vector<Json> stream = enc.Start();
      for (const OutputEvent& ev : FeedCase(c, units, cuts)) {
        for (Json& e : enc.OnEvent(ev)) stream.push_back(std::move(e));
      }
      for (Json& e : enc.Complete(Usage{})) stream.push_back(std::move(e));
      const Json body = enc.Response();
      EXPECT_EQ(body["status"], "incomplete");
      EXPECT_EQ(body["incomplete_details"], Json({{"reason", "max_output_tokens"}}));
      ASSERT_EQ(stream.back()["type"], "response.incomplete");
      EXPECT_EQ(U(stream.back()["response"]), U(body));

      // Accumulate the stream as the openai SDK's ResponseStream does.
      std::map<int, Json> items;
      for (const Json& e : stream) {
        if (e["type"] == "response.output_item.added") {
          items[e["output_index"].get<int>()] = e["item"];
        } else if (e["type"] == "response.function_call_arguments.delta") {
          Json& item = items[e["output_index"].get<int>()];
          item["arguments"] = item["arguments"].get<std::string>() + e["delta"].get<std::string>();
        } else if (e["type"] == "response.output_item.done") {
          Json& item = items[e["output_index"].get<int>()];
          EXPECT_EQ(item["arguments"], e["item"]["arguments"]);  // deltas == .done
          item = e["item"];
        }
      }
      ASSERT_EQ(items.size(), body["output"].size());
      ASSERT_EQ(items.size(), c.calls.size());
      for (size_t i = 0; i < c.calls.size(); ++i) {
        EXPECT_EQ(U(items[static_cast<int>(i)]), U(body["output"][i]));
        const Json& item = body["output"][i];
        EXPECT_EQ(item["type"], "function_call");
        EXPECT_EQ(item["call_id"], "call_" + std::to_string(i));
        EXPECT_EQ(item["name"], c.calls[i].first);
        EXPECT_EQ(item["arguments"], c.calls[i].second);
        // Only the call that was cut is incomplete.
        EXPECT_EQ(item["status"], i + 1 == c.calls.size() ? "incomplete" : "completed");
      }
    }
  }
}

TEST(TruncatedToolCallTest, MessagesStreamAndNonStreamAgree) {
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.label);
    const std::vector<scripted::ScriptUnit> units = scripted::ScriptUnits(c.script);
    for (const std::vector<size_t>& cuts : scripted::AllSplits(std::max<size_t>(units.size(), 1))) {
      SCOPED_TRACE(SplitLabel(cuts));
      MessagesEncoder enc(MessageMeta{"msg_1", "m", 3, 0});
      std::vector<Json> stream = enc.Start();
      for (const OutputEvent& ev : FeedCase(c, units, cuts)) {
        for (Json& e : enc.OnEvent(ev)) stream.push_back(std::move(e));
      }
      for (Json& e : enc.Complete(9)) stream.push_back(std::move(e));
      ASSERT_OK_AND_ASSIGN(Json message, enc.Message());
      EXPECT_EQ(message["stop_reason"], "max_tokens");

      std::map<int, Json> blocks;
      std::map<int, std::string> partial;
      std::string stop_reason;
      for (const Json& e : stream) {
        if (e["type"] == "content_block_start") blocks[e["index"].get<int>()] = e["content_block"];
        if (e["type"] == "content_block_delta") {
          ASSERT_EQ(e["delta"]["type"], "input_json_delta");
          partial[e["index"].get<int>()] += e["delta"]["partial_json"].get<std::string>();
        }
        if (e["type"] == "message_delta") stop_reason = e["delta"]["stop_reason"];
      }
      EXPECT_EQ(stop_reason, "max_tokens");
      ASSERT_EQ(blocks.size(), c.calls.size());
      ASSERT_EQ(message["content"].size(), c.calls.size());
      for (size_t i = 0; i < c.calls.size(); ++i) {
        const Json& streamed = blocks[static_cast<int>(i)];
        const Json& block = message["content"][i];
        // The same tool_use block (type, id, name) in both modes.
        EXPECT_EQ(block["type"], "tool_use");
        EXPECT_EQ(streamed["type"], "tool_use");
        EXPECT_EQ(block["id"], streamed["id"]);
        EXPECT_EQ(block["name"], streamed["name"]);
        EXPECT_EQ(block["name"], c.calls[i].first);
        // The stream carried the truncated text; the body's `input` (an object) holds only the
        // completely generated members.
        EXPECT_EQ(partial[static_cast<int>(i)], c.calls[i].second);
        EXPECT_EQ(U(block["input"]), U(c.messages_input[i]));
      }
    }
  }
}

}  // namespace
}  // namespace deepinfer::api
