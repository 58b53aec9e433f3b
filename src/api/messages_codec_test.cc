#include "api/messages_codec.h"

#include <map>
#include <string>
#include <vector>

#include "api/codec_util.h"
#include "api/errors.h"
#include "api/scripted_output_testing.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace deepinfer::api {
namespace {

using Json = nlohmann::ordered_json;
using ::deepinfer::testing::StatusIs;
using ::testing::HasSubstr;

// Order-insensitive view for comparisons.
nlohmann::json U(const Json& j) { return nlohmann::json::parse(j.dump()); }
std::vector<nlohmann::json> U(const std::vector<Json>& v) {
  std::vector<nlohmann::json> out;
  for (const Json& j : v) out.push_back(U(j));
  return out;
}

// Merges adjacent content_block_delta events of one block and delta type (the canonical form in
// which every chunking of the same output compares equal).
std::vector<Json> Coalesce(const std::vector<Json>& events) {
  std::vector<Json> out;
  for (const Json& e : events) {
    if (!out.empty() && e["type"] == "content_block_delta" &&
        out.back()["type"] == "content_block_delta" && out.back()["index"] == e["index"] &&
        out.back()["delta"]["type"] == e["delta"]["type"]) {
      for (const char* key : {"text", "thinking", "partial_json"}) {
        if (e["delta"].contains(key)) {
          out.back()["delta"][key] =
              out.back()["delta"][key].get<std::string>() + e["delta"][key].get<std::string>();
        }
      }
      continue;
    }
    out.push_back(e);
  }
  return out;
}

// Hand-written from spec §3.3 for kScriptedOutput.
std::vector<Json> ExpectedEvents() {
  const char* kLines[] = {
      R"({"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"deepseek-v4","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":8,"cache_creation_input_tokens":0,"cache_read_input_tokens":4,"output_tokens":0}}})",
      R"({"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}})",
      R"({"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me think."}})",
      R"({"type":"content_block_stop","index":0})",
      R"({"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}})",
      R"({"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Hi there."}})",
      R"({"type":"content_block_stop","index":1})",
      R"({"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"call_0","name":"get_weather","input":{}}})",
      R"({"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"city\": \"Paris\"}"}})",
      R"({"type":"content_block_stop","index":2})",
      R"({"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"call_1","name":"get_time","input":{}}})",
      R"({"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":"{\"tz\": \"CET\", \"h24\": true}"}})",
      R"({"type":"content_block_stop","index":3})",
      R"({"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"input_tokens":8,"cache_creation_input_tokens":0,"cache_read_input_tokens":4,"output_tokens":40}})",
      R"({"type":"message_stop"})",
  };
  std::vector<Json> out;
  for (const char* l : kLines) out.push_back(Json::parse(l));
  return out;
}

Json ExpectedMessage() {
  return Json::parse(
      R"({"id":"msg_1","type":"message","role":"assistant","model":"deepseek-v4","content":[)"
      R"({"type":"thinking","thinking":"Let me think.","signature":""},)"
      R"({"type":"text","text":"Hi there."},)"
      R"({"type":"tool_use","id":"call_0","name":"get_weather","input":{"city":"Paris"}},)"
      R"({"type":"tool_use","id":"call_1","name":"get_time","input":{"tz":"CET","h24":true}}],)"
      R"("stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":8,)"
      R"("cache_creation_input_tokens":0,"cache_read_input_tokens":4,"output_tokens":40}})");
}

// 12 prompt tokens, 4 of them from the cache: Anthropic's input_tokens is the other 8.
MessageMeta Meta() { return MessageMeta{"msg_1", "deepseek-v4", 12, 4}; }

TEST(MessagesEncoderTest, EverySplitGivesTheHandWrittenEvents) {
  const std::vector<scripted::ScriptUnit> units = scripted::ScriptUnits(scripted::kScriptedOutput);
  const std::vector<Json> expected = ExpectedEvents();
  const Json expected_message = ExpectedMessage();
  for (const std::vector<size_t>& cuts : scripted::AllSplits(units.size())) {
    SCOPED_TRACE(cuts.size() == 1 ? "split at " + std::to_string(cuts[0])
                                  : "chunks: " + std::to_string(cuts.size() + 1));
    MessagesEncoder enc(Meta());
    std::vector<Json> events = enc.Start();
    for (const protocol::OutputEvent& ev : scripted::FeedScript(units, cuts)) {
      for (Json& e : enc.OnEvent(ev)) events.push_back(std::move(e));
    }
    for (Json& e : enc.Complete(40)) events.push_back(std::move(e));

    // input_json_delta fragments of every block concatenate to valid JSON objects.
    std::map<int, std::string> partial;
    for (const Json& e : events) {
      if (e["type"] == "content_block_delta" && e["delta"]["type"] == "input_json_delta") {
        partial[e["index"].get<int>()] += e["delta"]["partial_json"].get<std::string>();
      }
    }
    ASSERT_EQ(partial.size(), 2u);
    for (const auto& [index, text] : partial) {
      Json parsed = Json::parse(text, nullptr, false);
      EXPECT_TRUE(parsed.is_object()) << text;
    }

    ASSERT_EQ(U(Coalesce(events)), U(expected));
    // The non-streaming body equals the hand-written one (and so what the stream carried).
    ASSERT_OK_AND_ASSIGN(Json message, enc.Message());
    ASSERT_EQ(U(message), U(expected_message));
  }
}

TEST(MessagesEncoderTest, StopSequenceAndMaxTokens) {
  MessagesEncoder enc(Meta());
  enc.Start();
  protocol::OutputEvent text;
  text.type = protocol::OutputEvent::Type::kContentDelta;
  text.text = "Hello";
  enc.OnEvent(text);
  protocol::OutputEvent fin;
  fin.type = protocol::OutputEvent::Type::kFinish;
  fin.finish_reason = protocol::FinishReason::kStopSequence;
  fin.stop_sequence = "END";
  enc.OnEvent(fin);
  std::vector<Json> tail = enc.Complete(3);
  ASSERT_EQ(tail.size(), 2u);
  EXPECT_EQ(tail[0],
            Json::parse(R"({"type":"message_delta","delta":{"stop_reason":"stop_sequence",)"
                        R"("stop_sequence":"END"},"usage":{"input_tokens":8,)"
                        R"("cache_creation_input_tokens":0,"cache_read_input_tokens":4,)"
                        R"("output_tokens":3}})"));
  EXPECT_EQ(AnthropicStopReason(protocol::FinishReason::kLength), "max_tokens");
  EXPECT_EQ(AnthropicStopReason(protocol::FinishReason::kStop), "end_turn");
}

// The cache hit is known only after the engine's first output: set before Start(), it is in
// message_start, message_delta and the non-streaming body alike; input_tokens is the rest of the
// 300-token prompt (Anthropic's accounting).
TEST(MessagesEncoderTest, CacheReadInputTokensSetBeforeStartIsInEveryUsage) {
  MessagesEncoder enc(MessageMeta{"msg_2", "m", 300, 0});
  enc.SetCacheReadInputTokens(256);
  std::vector<Json> start = enc.Start();
  ASSERT_EQ(start.size(), 1u);
  EXPECT_EQ(start[0]["message"]["usage"],
            Json::parse(R"({"input_tokens":44,"cache_creation_input_tokens":0,)"
                        R"("cache_read_input_tokens":256,"output_tokens":0})"));
  protocol::OutputEvent fin;
  fin.type = protocol::OutputEvent::Type::kFinish;
  fin.finish_reason = protocol::FinishReason::kLength;
  enc.OnEvent(fin);
  std::vector<Json> tail = enc.Complete(1);
  ASSERT_EQ(tail.size(), 2u);
  const Json want = Json::parse(R"({"input_tokens":44,"cache_creation_input_tokens":0,)"
                                R"("cache_read_input_tokens":256,"output_tokens":1})");
  EXPECT_EQ(tail[0]["usage"], want);
  ASSERT_OK_AND_ASSIGN(Json message, enc.Message());
  EXPECT_EQ(Json::parse(message.dump())["usage"], want);
}

TEST(MessagesEncoderTest, BrokenToolCallEndsWithErrorEvent) {
  MessagesEncoder enc(Meta());
  enc.Start();
  protocol::OutputEvent fin;
  fin.type = protocol::OutputEvent::Type::kFinish;
  fin.finish_reason = protocol::FinishReason::kToolCallError;
  fin.error = "unclosed parameter";
  enc.OnEvent(fin);
  std::vector<Json> tail = enc.Complete(3);
  ASSERT_EQ(tail.size(), 1u);
  EXPECT_EQ(tail[0], Json::parse(R"({"type":"error","error":{"type":"api_error",)"
                                 R"("message":"unclosed parameter"}})"));
  EXPECT_THAT(enc.Message().status(), StatusIs(absl::StatusCode::kInternal));
}

TEST(MessagesEncoderTest, SseFraming) {
  EXPECT_EQ(codec_util::NamedSseEvent(Json::parse(R"({"type":"message_stop"})")),
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
}

// --- Request parsing -----------------------------------------------------------------------

TEST(MessagesRequestTest, MapsBlocksToTheConversation) {
  ASSERT_OK_AND_ASSIGN(MessagesRequest req, ParseMessagesRequest(R"({
    "model": "claude-x", "max_tokens": 2048, "system": [{"type": "text", "text": "Be brief."}],
    "messages": [
      {"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "Need a tool.", "signature": "s"},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
      {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny", "is_error": false},
        {"type": "text", "text": "Thanks"}]},
      {"role": "assistant", "content": "It is"}],
    "tools": [{"name": "get_weather", "description": "d",
               "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}],
    "tool_choice": {"type": "any"},
    "thinking": {"type": "enabled", "budget_tokens": 1024},
    "stop_sequences": ["END", ""], "temperature": 0.5, "top_p": 0.9, "top_k": 40, "stream": true
  })"));
  EXPECT_EQ(req.model, "claude-x");
  EXPECT_EQ(req.sampling.max_tokens, 2048);
  EXPECT_EQ(req.thinking, true);
  EXPECT_EQ(req.thinking_budget, 1024);
  EXPECT_EQ(req.sampling.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(req.sampling.temperature, 0.5);
  EXPECT_EQ(req.sampling.top_k, 40);
  EXPECT_TRUE(req.sampling.stream);
  const protocol::Conversation& c = req.conversation;
  ASSERT_EQ(c.messages.size(), 5u);
  EXPECT_EQ(c.messages[0].role, protocol::Role::kSystem);
  EXPECT_EQ(c.messages[0].JoinedText(), "Be brief.");
  EXPECT_EQ(c.messages[2].role, protocol::Role::kAssistant);
  EXPECT_EQ(c.messages[2].reasoning_content, "Need a tool.");
  ASSERT_EQ(c.messages[2].tool_calls.size(), 1u);
  EXPECT_EQ(c.messages[2].tool_calls[0].id, "toolu_1");
  EXPECT_EQ(c.messages[2].tool_calls[0].arguments.Dump(), R"({"city": "Paris"})");
  ASSERT_EQ(c.messages[3].content.size(), 2u);
  EXPECT_EQ(c.messages[3].content[0].kind, protocol::ContentPart::Kind::kToolResult);
  EXPECT_EQ(c.messages[3].content[0].tool_use_id, "toolu_1");
  ASSERT_EQ(c.messages[3].content[0].content.size(), 1u);
  EXPECT_EQ(c.messages[3].content[0].content[0].text, "sunny");
  EXPECT_EQ(c.messages[3].content[1].text, "Thanks");
  EXPECT_TRUE(c.messages[4].prefix);  // trailing assistant = prefill
  ASSERT_EQ(c.tools.size(), 1u);
  EXPECT_EQ(c.tools[0].parameters.Dump(),
            R"({"type": "object", "properties": {"city": {"type": "string"}}})");
  EXPECT_EQ(c.tool_choice.mode, protocol::ToolChoice::Mode::kRequired);
}

TEST(MessagesRequestTest, CountTokensDoesNotNeedMaxTokens) {
  EXPECT_OK(ParseMessagesRequest(R"({"model":"m","messages":[{"role":"user","content":"hi"}]})",
                                 /*count_tokens=*/true)
                .status());
}

void ExpectError(std::string_view body, std::string_view expected_json) {
  absl::StatusOr<MessagesRequest> r = ParseMessagesRequest(body);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(AnthropicErrorInfoFor(r.status().code()).http_status, 400);
  EXPECT_EQ(Json::parse(AnthropicErrorJson(r.status())), Json::parse(expected_json));
}

TEST(MessagesRequestTest, MissingMaxTokens) {
  ExpectError(R"({"model":"m","messages":[{"role":"user","content":"hi"}]})",
              R"({"type":"error","error":{"type":"invalid_request_error",)"
              R"("message":"max_tokens: Field required"}})");
}

TEST(MessagesRequestTest, BadRole) {
  ExpectError(R"({"model":"m","max_tokens":5,"messages":[{"role":"system","content":"hi"}]})",
              R"({"type":"error","error":{"type":"invalid_request_error",)"
              R"("message":"messages.0.role: Input should be 'user' or 'assistant'"}})");
}

TEST(MessagesRequestTest, ToolResultWithoutToolUse) {
  ExpectError(
      R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":[)"
      R"({"type":"tool_result","tool_use_id":"toolu_9","content":"x"}]}]})",
      R"({"type":"error","error":{"type":"invalid_request_error","message":"messages.0.content.0: )"
      R"(unexpected `tool_use_id` found in `tool_result` blocks: toolu_9. Each `tool_result` )"
      R"(block must have a corresponding `tool_use` block in the previous message."}})");
  absl::StatusOr<MessagesRequest> r =
      ParseMessagesRequest(R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":[)"
                           R"({"type":"tool_result","tool_use_id":"toolu_9","content":"x"}]}]})");
  ASSERT_TRUE(protocol::GetProtocolError(r.status()).has_value());
  EXPECT_EQ(protocol::GetProtocolError(r.status())->kind,
            protocol::ProtocolError::kToolMessageWithoutCall);
}

TEST(MessagesRequestTest, UnknownToolChoiceName) {
  ExpectError(R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}],)"
              R"("tools":[{"name":"a","input_schema":{"type":"object"}}],)"
              R"("tool_choice":{"type":"tool","name":"b"}})",
              R"({"type":"error","error":{"type":"invalid_request_error",)"
              R"("message":"tool_choice.name: Tool 'b' not found in provided tools"}})");
}

TEST(MessagesRequestTest, SeedExtension) {
  ASSERT_OK_AND_ASSIGN(
      MessagesRequest req,
      ParseMessagesRequest(R"({"model":"m","max_tokens":5,"temperature":1,"top_p":0.9,"seed":42,)"
                           R"("messages":[{"role":"user","content":"x"}]})"));
  EXPECT_EQ(req.sampling.seed, 42u);
  EXPECT_EQ(req.sampling.top_p, 0.9);
  ASSERT_OK_AND_ASSIGN(req, ParseMessagesRequest(R"({"model":"m","max_tokens":5,"seed":-1,)"
                                                 R"("messages":[{"role":"user","content":"x"}]})"));
  EXPECT_EQ(req.sampling.seed, UINT64_MAX);  // two's complement, like the Chat codec
  ASSERT_OK_AND_ASSIGN(req, ParseMessagesRequest(R"({"model":"m","max_tokens":5,)"
                                                 R"("messages":[{"role":"user","content":"x"}]})"));
  EXPECT_FALSE(req.sampling.seed.has_value());
  ExpectError(
      R"({"model":"m","max_tokens":5,"seed":"s","messages":[{"role":"user","content":"x"}]})",
      R"({"type":"error","error":{"type":"invalid_request_error",)"
      R"("message":"seed: 'seed' must be an integer"}})");
}

TEST(MessagesRequestTest, OtherErrors) {
  EXPECT_THAT(ParseMessagesRequest("{").status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseMessagesRequest(R"({"model":"m","max_tokens":0,"messages":[]})").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("max_tokens")));
  EXPECT_THAT(ParseMessagesRequest(
                  R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}],)"
                  R"("thinking":{"type":"enabled","budget_tokens":2000}})")
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("budget_tokens")));
  EXPECT_EQ(AnthropicErrorInfoFor(absl::StatusCode::kUnauthenticated).http_status, 401);
  EXPECT_STREQ(AnthropicErrorInfoFor(absl::StatusCode::kUnavailable).type, "overloaded_error");
  EXPECT_EQ(AnthropicErrorInfoFor(absl::StatusCode::kUnavailable).http_status, 529);
}

// output_config.effort: the values the encoder accepts (no "none" here: Anthropic turns thinking
// off with thinking.type "disabled"); the error lists exactly them.
TEST(MessagesRequestTest, EffortListsAcceptedValues) {
  const std::string base =
      R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}],)";
  absl::StatusOr<MessagesRequest> r =
      ParseMessagesRequest(base + R"("output_config":{"effort":"none"}})");
  EXPECT_THAT(r.status(), StatusIs(absl::StatusCode::kInvalidArgument,
                                   HasSubstr("Supported values are: 'minimal', 'low', 'medium', "
                                             "'high', 'xhigh', 'max' and 'ultra'.")));
  EXPECT_EQ(ErrorParam(r.status()), "output_config.effort");
  for (const char* e : {"minimal", "low", "medium", "high", "xhigh", "max", "ultra"}) {
    ASSERT_OK(ParseMessagesRequest(base + R"("output_config":{"effort":")" + e + "\"}}").status())
        << e;
  }
}

// vLLM's min_tokens / stop_token_ids on Messages (issue #22 part 5), thinking.budget_tokens kept
// for the server, and image blocks (also inside a tool_result) rejected by RejectImageParts.
TEST(MessagesRequestTest, VllmSamplingExtensionsBudgetAndImages) {
  ASSERT_OK_AND_ASSIGN(
      MessagesRequest req,
      ParseMessagesRequest(R"({"model":"m","max_tokens":2000,"min_tokens":3,"stop_token_ids":[4],)"
                           R"("thinking":{"type":"enabled","budget_tokens":1024},)"
                           R"("messages":[{"role":"user","content":"hi"}]})"));
  EXPECT_EQ(req.sampling.min_tokens, 3);
  EXPECT_EQ(req.sampling.stop_token_ids, (std::vector<int32_t>{4}));
  EXPECT_EQ(req.thinking_budget, 1024);
  EXPECT_EQ(req.thinking, true);
  EXPECT_FALSE(ParseMessagesRequest(R"({"model":"m","max_tokens":8,"stop_token_ids":[1.5],)"
                                    R"("messages":[{"role":"user","content":"hi"}]})")
                   .ok());
  ASSERT_OK_AND_ASSIGN(
      MessagesRequest img,
      ParseMessagesRequest(
          R"({"model":"m","max_tokens":8,"messages":[{"role":"user","content":[)"
          R"({"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"}},)"
          R"({"type":"text","text":"what is it?"}]}]})"));
  absl::Status st = codec_util::RejectImageParts(img.conversation);
  EXPECT_THAT(st, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("image input")));
  EXPECT_EQ(ErrorParam(st), "messages[0].content");
}

}  // namespace
}  // namespace deepinfer::api
