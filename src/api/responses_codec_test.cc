#include "api/responses_codec.h"

#include <map>
#include <string>
#include <vector>

#include "api/codec_util.h"
#include "api/errors.h"
#include "api/scripted_output_testing.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "protocol/prompt_encoder.h"

namespace deepinfer::api {
namespace {

using Json = nlohmann::ordered_json;
using ::deepinfer::testing::StatusIs;
using ::testing::HasSubstr;

nlohmann::json U(const Json& j) { return nlohmann::json::parse(j.dump()); }
std::vector<nlohmann::json> U(const std::vector<Json>& v) {
  std::vector<nlohmann::json> out;
  for (const Json& j : v) out.push_back(U(j));
  return out;
}

// Merges adjacent delta events of one item and renumbers sequence_number (the canonical form in
// which every chunking of the same output compares equal).
std::vector<Json> Coalesce(const std::vector<Json>& events) {
  std::vector<Json> out;
  for (const Json& e : events) {
    const std::string type = e["type"];
    const bool delta = type == "response.reasoning_text.delta" ||
                       type == "response.output_text.delta" ||
                       type == "response.function_call_arguments.delta";
    if (delta && !out.empty() && out.back()["type"] == e["type"] &&
        out.back()["item_id"] == e["item_id"]) {
      out.back()["delta"] = out.back()["delta"].get<std::string>() + e["delta"].get<std::string>();
      continue;
    }
    out.push_back(e);
  }
  for (size_t i = 0; i < out.size(); ++i) out[i]["sequence_number"] = i;
  return out;
}

// The response object skeleton (spec §3.2) for a request without echoed fields.
Json ResponseObject(const char* status, const char* output, const char* usage) {
  return Json::parse(std::string(R"({"id":"resp_r1","object":"response","created_at":1700000000,)"
                                 R"("status":")") +
                     status +
                     R"(","error":null,"incomplete_details":null,"instructions":null,)"
                     R"("max_output_tokens":null,"model":"deepseek-v4","output":)" +
                     output +
                     R"(,"parallel_tool_calls":true,"previous_response_id":null,"store":false,)"
                     R"("temperature":1.0,"text":{"format":{"type":"text"}},"tool_choice":"auto",)"
                     R"("tools":[],"top_p":1.0,"usage":)" +
                     usage + "}");
}

constexpr const char* kItems[] = {
    R"({"id":"rs_r1_0","type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"Let me think."}],"status":"completed"})",
    R"({"id":"msg_r1_1","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Hi there.","annotations":[]}]})",
    R"({"id":"fc_r1_2","type":"function_call","status":"completed","arguments":"{\"city\": \"Paris\"}","call_id":"call_0","name":"get_weather"})",
    R"({"id":"fc_r1_3","type":"function_call","status":"completed","arguments":"{\"tz\": \"CET\", \"h24\": true}","call_id":"call_1","name":"get_time"})",
};
constexpr const char* kUsage =
    R"({"input_tokens":12,"input_tokens_details":{"cached_tokens":4},"output_tokens":40,)"
    R"("output_tokens_details":{"reasoning_tokens":5},"total_tokens":52})";

std::string AllItems() {
  std::string s = "[";
  for (const char* i : kItems) s += std::string(s.size() > 1 ? "," : "") + i;
  return s + "]";
}

// Hand-written from spec §3.2 for kScriptedOutput.
std::vector<Json> ExpectedEvents() {
  const char* kLines[] = {
      R"({"type":"response.output_item.added","output_index":0,"item":{"id":"rs_r1_0","type":"reasoning","summary":[],"content":[],"status":"in_progress"}})",
      R"({"type":"response.content_part.added","item_id":"rs_r1_0","output_index":0,"content_index":0,"part":{"type":"reasoning_text","text":""}})",
      R"({"type":"response.reasoning_text.delta","item_id":"rs_r1_0","output_index":0,"content_index":0,"delta":"Let me think."})",
      R"({"type":"response.reasoning_text.done","item_id":"rs_r1_0","output_index":0,"content_index":0,"text":"Let me think."})",
      R"({"type":"response.content_part.done","item_id":"rs_r1_0","output_index":0,"content_index":0,"part":{"type":"reasoning_text","text":"Let me think."}})",
      "ITEM0",
      R"({"type":"response.output_item.added","output_index":1,"item":{"id":"msg_r1_1","type":"message","status":"in_progress","role":"assistant","content":[]}})",
      R"({"type":"response.content_part.added","item_id":"msg_r1_1","output_index":1,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}})",
      R"({"type":"response.output_text.delta","item_id":"msg_r1_1","output_index":1,"content_index":0,"delta":"Hi there.","logprobs":[]})",
      R"({"type":"response.output_text.done","item_id":"msg_r1_1","output_index":1,"content_index":0,"text":"Hi there."})",
      R"({"type":"response.content_part.done","item_id":"msg_r1_1","output_index":1,"content_index":0,"part":{"type":"output_text","text":"Hi there.","annotations":[]}})",
      "ITEM1",
      R"({"type":"response.output_item.added","output_index":2,"item":{"id":"fc_r1_2","type":"function_call","status":"in_progress","arguments":"","call_id":"call_0","name":"get_weather"}})",
      R"({"type":"response.function_call_arguments.delta","item_id":"fc_r1_2","output_index":2,"delta":"{\"city\": \"Paris\"}"})",
      R"({"type":"response.function_call_arguments.done","item_id":"fc_r1_2","output_index":2,"arguments":"{\"city\": \"Paris\"}"})",
      "ITEM2",
      R"({"type":"response.output_item.added","output_index":3,"item":{"id":"fc_r1_3","type":"function_call","status":"in_progress","arguments":"","call_id":"call_1","name":"get_time"}})",
      R"({"type":"response.function_call_arguments.delta","item_id":"fc_r1_3","output_index":3,"delta":"{\"tz\": \"CET\", \"h24\": true}"})",
      R"({"type":"response.function_call_arguments.done","item_id":"fc_r1_3","output_index":3,"arguments":"{\"tz\": \"CET\", \"h24\": true}"})",
      "ITEM3",
  };
  std::vector<Json> out;
  const Json in_progress = ResponseObject("in_progress", "[]", "null");
  out.push_back(Json{{"type", "response.created"}, {"response", in_progress}});
  out.push_back(Json{{"type", "response.in_progress"}, {"response", in_progress}});
  for (const char* l : kLines) {
    const std::string line = l;
    if (line.rfind("ITEM", 0) == 0) {
      const int i = line[4] - '0';
      out.push_back(Json{{"type", "response.output_item.done"},
                         {"output_index", i},
                         {"item", Json::parse(kItems[i])}});
    } else {
      out.push_back(Json::parse(line));
    }
  }
  out.push_back(Json{{"type", "response.completed"},
                     {"response", ResponseObject("completed", AllItems().c_str(), kUsage)}});
  for (size_t i = 0; i < out.size(); ++i) out[i]["sequence_number"] = i;
  return out;
}

ResponseMeta Meta() { return ResponseMeta{"resp_r1", 1700000000, "deepseek-v4", nullptr}; }
Usage TestUsage() { return Usage{12, 40, 4, 5}; }

TEST(ResponsesEncoderTest, EverySplitGivesTheHandWrittenEvents) {
  const std::vector<scripted::ScriptUnit> units = scripted::ScriptUnits(scripted::kScriptedOutput);
  const std::vector<nlohmann::json> expected = U(ExpectedEvents());
  for (const std::vector<size_t>& cuts : scripted::AllSplits(units.size())) {
    SCOPED_TRACE(cuts.size() == 1 ? "split at " + std::to_string(cuts[0])
                                  : "chunks: " + std::to_string(cuts.size() + 1));
    ResponsesEncoder enc(Meta());
    std::vector<Json> events = enc.Start();
    for (const protocol::OutputEvent& ev : scripted::FeedScript(units, cuts)) {
      for (Json& e : enc.OnEvent(ev)) events.push_back(std::move(e));
    }
    for (Json& e : enc.Complete(TestUsage())) events.push_back(std::move(e));
    // sequence_number is 0, 1, 2, ... in the raw stream.
    for (size_t i = 0; i < events.size(); ++i) ASSERT_EQ(events[i]["sequence_number"], i);
    // Argument deltas of each call concatenate to valid JSON.
    std::map<std::string, std::string> args;
    for (const Json& e : events) {
      if (e["type"] == "response.function_call_arguments.delta") {
        args[e["item_id"].get<std::string>()] += e["delta"].get<std::string>();
      }
    }
    ASSERT_EQ(args.size(), 2u);
    for (const auto& [id, text] : args) {
      EXPECT_TRUE(Json::parse(text, nullptr, false).is_object()) << text;
    }
    ASSERT_EQ(U(Coalesce(events)), expected);
    // Non-streaming body == what response.completed carried.
    EXPECT_EQ(U(enc.Response()), U(events.back()["response"]));
  }
}

TEST(ResponsesEncoderTest, LengthIsIncomplete) {
  ResponsesEncoder enc(Meta());
  enc.Start();
  protocol::OutputEvent text;
  text.type = protocol::OutputEvent::Type::kContentDelta;
  text.text = "Hel";
  enc.OnEvent(text);
  protocol::OutputEvent fin;
  fin.type = protocol::OutputEvent::Type::kFinish;
  fin.finish_reason = protocol::FinishReason::kLength;
  std::vector<Json> closing = enc.OnEvent(fin);
  ASSERT_EQ(closing.size(), 3u);  // output_text.done, content_part.done, output_item.done
  EXPECT_EQ(closing[2]["item"]["status"], "incomplete");  // cut by max_output_tokens
  std::vector<Json> tail = enc.Complete(Usage{1, 1, 0, 0});
  ASSERT_EQ(tail.size(), 1u);
  EXPECT_EQ(tail[0]["type"], "response.incomplete");
  EXPECT_EQ(tail[0]["response"]["status"], "incomplete");
  EXPECT_EQ(U(tail[0]["response"]["incomplete_details"]),
            nlohmann::json::parse(R"({"reason":"max_output_tokens"})"));
  EXPECT_EQ(tail[0]["response"]["output"][0]["status"], "incomplete");
}

// A failure mid-item (engine error, shutdown) closes the open item as "incomplete" with its
// done events, then response.failed carries the error and that item.
TEST(ResponsesEncoderTest, FailClosesTheOpenItemAsIncomplete) {
  ResponsesEncoder enc(Meta());
  std::vector<Json> events = enc.Start();
  protocol::OutputEvent text;
  text.type = protocol::OutputEvent::Type::kContentDelta;
  text.text = "Hel";
  for (Json& e : enc.OnEvent(text)) events.push_back(std::move(e));
  for (Json& e : enc.Fail(Usage{3, 1, 0, 0}, "the server is shutting down")) {
    events.push_back(std::move(e));
  }
  for (size_t i = 0; i < events.size(); ++i) ASSERT_EQ(events[i]["sequence_number"], i);
  std::vector<std::string> types;
  for (const Json& e : events) types.push_back(e["type"]);
  EXPECT_EQ(types, (std::vector<std::string>{
                       "response.created", "response.in_progress", "response.output_item.added",
                       "response.content_part.added", "response.output_text.delta",
                       "response.output_text.done", "response.content_part.done",
                       "response.output_item.done", "response.failed"}));
  EXPECT_EQ(events[7]["item"]["status"], "incomplete");
  const Json& r = events.back()["response"];
  EXPECT_EQ(r["status"], "failed");
  EXPECT_EQ(r["error"]["code"], "server_error");
  EXPECT_EQ(r["error"]["message"], "the server is shutting down");
  ASSERT_EQ(r["output"].size(), 1u);
  EXPECT_EQ(r["output"][0]["status"], "incomplete");
  EXPECT_EQ(r["output"][0]["content"][0]["text"], "Hel");
  EXPECT_EQ(r["usage"]["output_tokens"], 1);
  EXPECT_EQ(U(enc.Response()), U(r));
  EXPECT_TRUE(enc.OnEvent(text).empty());  // nothing after the terminal event
}

TEST(ResponsesEncoderTest, SseFraming) {
  EXPECT_EQ(codec_util::NamedSseEvent(Json::parse(R"({"type":"response.completed"})")),
            "event: response.completed\ndata: {\"type\":\"response.completed\"}\n\n");
}

// --- Request parsing -----------------------------------------------------------------------

TEST(ResponsesRequestTest, StringInputAndInstructions) {
  ASSERT_OK_AND_ASSIGN(
      ResponsesRequest req,
      ParseResponsesRequest(R"({"model":"m","input":"Hi","instructions":"Be brief.",)"
                            R"("max_output_tokens":64,"temperature":0.3,"top_p":0.5,)"
                            R"("reasoning":{"effort":"none"},"stream":true})"));
  ASSERT_EQ(req.conversation.messages.size(), 2u);
  EXPECT_EQ(req.conversation.messages[0].role, protocol::Role::kSystem);
  EXPECT_EQ(req.conversation.messages[0].JoinedText(), "Be brief.");
  EXPECT_EQ(req.conversation.messages[1].role, protocol::Role::kUser);
  EXPECT_EQ(req.conversation.messages[1].JoinedText(), "Hi");
  EXPECT_EQ(req.sampling.max_tokens, 64);
  EXPECT_EQ(req.sampling.temperature, 0.3);
  EXPECT_EQ(req.thinking, false);
  EXPECT_TRUE(req.sampling.stream);
}

TEST(ResponsesRequestTest, SeedExtension) {
  // Not in OpenAI's Responses API; accepted as an extra body field like vLLM's sampling extras.
  ASSERT_OK_AND_ASSIGN(ResponsesRequest req,
                       ParseResponsesRequest(R"({"input":"Hi","temperature":1,"seed":7})"));
  EXPECT_EQ(req.sampling.seed, 7u);
  ASSERT_OK_AND_ASSIGN(req, ParseResponsesRequest(R"({"input":"Hi"})"));
  EXPECT_FALSE(req.sampling.seed.has_value());
  EXPECT_THAT(ParseResponsesRequest(R"({"input":"Hi","seed":1.5})").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'seed' must be an integer")));
}

TEST(ResponsesRequestTest, ItemsMapToTheConversation) {
  ASSERT_OK_AND_ASSIGN(ResponsesRequest req, ParseResponsesRequest(R"({"input":[
      {"role":"user","content":[{"type":"input_text","text":"Weather?"}]},
      {"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"Use tools."}]},
      {"type":"function_call","call_id":"c1","name":"get_weather","arguments":"{\"city\":\"Paris\"}"},
      {"type":"function_call","call_id":"c2","name":"get_weather","arguments":"{\"city\":\"Rome\"}"},
      {"type":"function_call_output","call_id":"c2","output":"rain"},
      {"type":"function_call_output","call_id":"c1","output":"sun"}],
    "tools":[{"type":"function","name":"get_weather","parameters":{"type":"object"}}],
    "tool_choice":{"type":"function","name":"get_weather"},
    "reasoning":{"effort":"high"}})"));
  const auto& m = req.conversation.messages;
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[1].role, protocol::Role::kAssistant);
  EXPECT_EQ(m[1].reasoning_content, "Use tools.");
  ASSERT_EQ(m[1].tool_calls.size(), 2u);  // consecutive calls share one assistant turn
  EXPECT_EQ(m[1].tool_calls[0].arguments.Dump(), R"({"city": "Paris"})");
  EXPECT_EQ(m[2].role, protocol::Role::kTool);
  EXPECT_EQ(m[2].tool_call_id, "c2");
  EXPECT_EQ(m[3].JoinedText(), "sun");
  EXPECT_EQ(req.conversation.tool_choice.mode, protocol::ToolChoice::Mode::kNamed);
  EXPECT_EQ(req.thinking, true);
  EXPECT_EQ(req.reasoning_effort, "high");
}

void ExpectError(std::string_view body, std::string_view expected_json) {
  absl::StatusOr<ResponsesRequest> r = ParseResponsesRequest(body);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(ErrorInfoFor(r.status().code()).http_status, 400);
  EXPECT_EQ(nlohmann::json::parse(OpenAiErrorJson(r.status())),
            nlohmann::json::parse(expected_json));
}

// Errors found while encoding the prompt name the Responses item, not "messages[i]".
TEST(ResponsesRequestTest, PromptErrorsNameTheInputItem) {
  ASSERT_OK_AND_ASSIGN(
      ResponsesRequest req,
      ParseResponsesRequest(
          R"({"model":"m","instructions":"Be brief.","input":[)"
          R"({"role":"user","content":"Hi"},)"
          R"({"role":"user","content":[{"type":"input_image","image_url":"data:,x"}]}]})"));
  protocol::EncodeOptions options;
  options.family = protocol::ModelFamily::kDeepSeekV4;  // takes no images
  absl::StatusOr<protocol::EncodedPrompt> encoded =
      protocol::EncodePrompt(req.conversation, options);
  ASSERT_THAT(encoded, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(ErrorParam(encoded.status()), "input[1].content");
}

TEST(ResponsesRequestTest, OutputLogprobsAreRejectedNotIgnored) {
  for (const char* body :
       {R"({"model":"m","input":"Hi","top_logprobs":3})",
        R"({"model":"m","input":"Hi","include":["message.output_text.logprobs"]})"}) {
    absl::StatusOr<ResponsesRequest> req = ParseResponsesRequest(body);
    EXPECT_THAT(req, StatusIs(absl::StatusCode::kInvalidArgument)) << body;
  }
  ASSERT_OK(ParseResponsesRequest(R"({"model":"m","input":"Hi","top_logprobs":null})").status());
}

TEST(ResponsesRequestTest, BadRole) {
  ExpectError(R"({"input":[{"role":"tool","content":"x"}]})",
              R"({"error":{"message":"Invalid value: 'tool'. Supported values are: 'assistant', )"
              R"('system', 'developer', and 'user'.","type":"invalid_request_error",)"
              R"("param":"input[0].role","code":null}})");
}

TEST(ResponsesRequestTest, FunctionCallOutputWithoutCall) {
  ExpectError(R"({"input":[{"role":"user","content":"x"},)"
              R"({"type":"function_call_output","call_id":"c9","output":"y"}]})",
              R"({"error":{"message":"No tool call found for function call output with call_id )"
              R"(c9.","type":"invalid_request_error","param":"input[1]","code":null}})");
}

TEST(ResponsesRequestTest, UnknownToolChoiceName) {
  ExpectError(R"({"input":"x","tools":[{"type":"function","name":"a"}],)"
              R"("tool_choice":{"type":"function","name":"b"}})",
              R"({"error":{"message":"Tool choice 'b' not found in 'tools' parameter.",)"
              R"("type":"invalid_request_error","param":"tool_choice.name","code":null}})");
}

TEST(ResponsesRequestTest, PreviousResponseIdIsRejected) {
  absl::StatusOr<ResponsesRequest> r =
      ParseResponsesRequest(R"({"input":"x","previous_response_id":"resp_1"})");
  EXPECT_THAT(r.status(), StatusIs(absl::StatusCode::kInvalidArgument,
                                   HasSubstr("previous_response_id is not supported")));
  EXPECT_EQ(ErrorParam(r.status()), "previous_response_id");
}

TEST(ResponsesRequestTest, OtherErrors) {
  EXPECT_THAT(ParseResponsesRequest("[]").status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseResponsesRequest(R"({"model":"m"})").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("input")));
  EXPECT_THAT(ParseResponsesRequest(R"({"input":"x","max_output_tokens":0})").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("max_output_tokens")));
  EXPECT_THAT(ParseResponsesRequest(R"({"input":"x","tools":[{"type":"web_search"}]})").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("web_search")));
}

// Nothing is stored and nothing runs in the background (docs/protocol.md): store:true is accepted
// (the SDKs send it) and the body says what happened, store:false; background:true is a 400.
TEST(ResponsesRequestTest, StoreAndBackground) {
  ASSERT_OK_AND_ASSIGN(ResponsesRequest req,
                       ParseResponsesRequest(R"({"input":"x","store":true})"));
  ResponsesEncoder enc(ResponseMeta{"resp_s", 1, "m", &req});
  enc.Start();
  enc.Complete(Usage{1, 1, 0, 0});
  EXPECT_EQ(enc.Response()["store"], false);
  absl::StatusOr<ResponsesRequest> bg = ParseResponsesRequest(R"({"input":"x","background":true})");
  EXPECT_THAT(bg.status(), StatusIs(absl::StatusCode::kInvalidArgument,
                                    HasSubstr("background mode is not supported")));
  EXPECT_EQ(ErrorParam(bg.status()), "background");
  ASSERT_OK(ParseResponsesRequest(R"({"input":"x","background":false})").status());
  EXPECT_EQ(ErrorParam(ParseResponsesRequest(R"({"input":"x","store":"yes"})").status()), "store");
}

TEST(ResponsesRequestTest, ReasoningEffortListsAcceptedValues) {
  absl::StatusOr<ResponsesRequest> r =
      ParseResponsesRequest(R"({"input":"x","reasoning":{"effort":"bogus"}})");
  EXPECT_THAT(r.status(), StatusIs(absl::StatusCode::kInvalidArgument,
                                   HasSubstr("'none', 'minimal', 'low', 'medium', 'high', "
                                             "'xhigh', 'max' and 'ultra'")));
  EXPECT_EQ(ErrorParam(r.status()), "reasoning.effort");
  for (const char* e : {"none", "minimal", "low", "medium", "high", "xhigh", "max", "ultra"}) {
    ASSERT_OK(
        ParseResponsesRequest(std::string(R"({"input":"x","reasoning":{"effort":")") + e + "\"}}")
            .status())
        << e;
  }
}

TEST(ResponsesRequestTest, ToolNamesFollowOpenAi) {
  absl::StatusOr<ResponsesRequest> r = ParseResponsesRequest(
      R"({"input":"x","tools":[{"type":"function","name":"a.b","parameters":{}}]})");
  EXPECT_THAT(r.status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(ErrorParam(r.status()), "tools[0].name");
}

// vLLM's extensions on Responses (issue #22 part 5): min_tokens, stop_token_ids,
// thinking_token_budget; wrong types are 400s naming the field. Image parts are parsed (and
// rejected by the server with RejectImageParts, naming the input item).
TEST(ResponsesRequestTest, VllmSamplingExtensionsAndImages) {
  ASSERT_OK_AND_ASSIGN(
      ResponsesRequest req,
      ParseResponsesRequest(R"({"input":"Hi","min_tokens":5,"stop_token_ids":[7,9],)"
                            R"("thinking_token_budget":12})"));
  EXPECT_EQ(req.sampling.min_tokens, 5);
  EXPECT_EQ(req.sampling.stop_token_ids, (std::vector<int32_t>{7, 9}));
  EXPECT_EQ(req.thinking_token_budget, 12);
  EXPECT_OK(codec_util::RejectImageParts(req.conversation));
  for (const char* bad : {R"({"input":"Hi","min_tokens":-1})", R"({"input":"Hi","stop_token_ids":[-3]})",
                          R"({"input":"Hi","stop_token_ids":"7"})",
                          R"({"input":"Hi","thinking_token_budget":"x"})"}) {
    absl::StatusOr<ResponsesRequest> r = ParseResponsesRequest(bad);
    EXPECT_THAT(r.status(), StatusIs(absl::StatusCode::kInvalidArgument)) << bad;
  }
  ASSERT_OK_AND_ASSIGN(
      ResponsesRequest img,
      ParseResponsesRequest(R"({"input":[{"role":"user","content":[{"type":"input_text","text":"x"},)"
                            R"({"type":"input_image","image_url":"data:image/png;base64,AAAA"}]}]})"));
  absl::Status st = codec_util::RejectImageParts(img.conversation);
  EXPECT_THAT(st, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("image input")));
  EXPECT_EQ(ErrorParam(st), "input[0].content");
  EXPECT_EQ(ErrorCode(st), "unsupported_content");
}

}  // namespace
}  // namespace deepinfer::api
