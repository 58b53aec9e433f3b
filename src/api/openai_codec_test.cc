#include "api/openai_codec.h"

#include "api/codec_util.h"
#include "api/errors.h"
#include "api/messages_codec.h"
#include "api/responses_codec.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace deepinfer::api {
namespace {

using ::deepinfer::testing::StatusIs;
using ::testing::HasSubstr;
using Json = nlohmann::json;

// Request shapes are the ones the official openai SDK sends (OpenAI API reference).
TEST(OpenAiCodecTest, ParsesAFullChatRequest) {
  ASSERT_OK_AND_ASSIGN(ChatCompletionRequest r, ParseChatCompletionRequest(R"({
    "model": "m", "messages": [
      {"role": "system", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "text", "text": "there"}]},
      {"role": "assistant", "content": null, "reasoning_content": "r",
       "tool_calls": [{"id": "call_1", "type": "function",
                       "function": {"name": "get", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}],
    "tools": [{"type": "function", "function": {"name": "get", "description": "d",
               "parameters": {"type": "object", "properties": {}}}}],
    "tool_choice": "auto", "thinking": {"type": "disabled"}, "stop": ["x", ""],
    "max_completion_tokens": 7, "max_tokens": 99, "temperature": 0, "top_p": 0.5, "n": 2,
    "seed": 42, "logprobs": true, "top_logprobs": 3, "stream": true,
    "stream_options": {"include_usage": true}, "response_format": {"type": "json_object"},
    "some_unknown_field": {"ignored": true}})"));
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.conversation.messages.size(), 4u);
  EXPECT_EQ(r.conversation.messages[1].JoinedText(), "hi\n\nthere");
  ASSERT_EQ(r.conversation.messages[2].tool_calls.size(), 1u);
  EXPECT_EQ(r.conversation.messages[2].tool_calls[0].arguments.Dump(), R"({"city": "Paris"})");
  EXPECT_EQ(r.conversation.messages[2].reasoning_content, "r");
  EXPECT_EQ(r.conversation.messages[3].tool_call_id, "call_1");
  ASSERT_EQ(r.conversation.tools.size(), 1u);
  EXPECT_EQ(r.conversation.tools[0].name, "get");
  EXPECT_TRUE(r.conversation.response_format.has_value());
  EXPECT_EQ(r.thinking, false);
  EXPECT_EQ(r.sampling.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(r.sampling.max_tokens, 7);  // max_completion_tokens wins
  EXPECT_EQ(r.sampling.temperature, 0.0);
  EXPECT_EQ(r.sampling.n, 2);
  EXPECT_EQ(r.sampling.seed, 42u);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 3);
  EXPECT_TRUE(r.sampling.stream);
  EXPECT_TRUE(r.sampling.include_usage);
}

TEST(OpenAiCodecTest, WrongTypesAre400NamingTheParam) {
  struct Case {
    const char* body;
    const char* param;
  } cases[] = {
      {R"({"messages": "hi"})", "messages"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": "10"})", "max_tokens"},
      {R"({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"})", "temperature"},
      {R"({"messages": [{"role": "user", "content": "x"}], "temperature": 3})", "temperature"},
      {R"({"messages": [{"role": "user", "content": "x"}], "n": 0})", "n"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stream": "yes"})", "stream"},
      {R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content"},
      {R"({"messages": [{"content": "x"}]})", "messages[0].role"},
      {R"({"messages": [{"role": "wizard", "content": "x"}]})", "messages[0].role"},
      {R"({"messages": [{"role": "user", "content": "x"}], "model": 3})", "model"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": {}})", "tools"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stop": [1]})", "stop"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", "top_logprobs"},
      {R"({"messages": [], "model": "m"})", "messages"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logit_bias": {" 5": 1}})",
       "logit_bias"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"+5": 1}})",
       "logit_bias"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"-0": 1}})",
       "logit_bias"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"5": 1, "05": 2}})",
       "logit_bias"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<ChatCompletionRequest> r = ParseChatCompletionRequest(c.body);
    EXPECT_THAT(r, StatusIs(absl::StatusCode::kInvalidArgument)) << c.body;
    EXPECT_EQ(ErrorParam(r.status()), c.param) << c.body;
  }
}

TEST(OpenAiCodecTest, MalformedJsonIs400) {
  EXPECT_THAT(ParseChatCompletionRequest("{\"messages\": ["),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("JSON")));
  EXPECT_THAT(ParseChatCompletionRequest("[1, 2]"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseCompletionRequest(""), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(OpenAiCodecTest, ToolArgumentsThatAreNotAnObjectAreRejected) {
  absl::StatusOr<ChatCompletionRequest> r = ParseChatCompletionRequest(R"({"messages": [
      {"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
       "function": {"name": "f", "arguments": "[1,2]"}}]}]})");
  EXPECT_THAT(r, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(ErrorParam(r.status()), "messages[0].tool_calls[0].function.arguments");
}

// `seed` accepts every integer in [-2^63, 2^64-1] on every route, negatives modulo 2^64
// (docs/protocol.md "Extension fields"); expected values are the two's-complement patterns.
TEST(OpenAiCodecTest, SeedRangeIsTheSameOnEveryRoute) {
  auto parse = [](int route, const std::string& seed) -> absl::StatusOr<std::optional<uint64_t>> {
    const std::string field = seed.empty() ? "" : ", \"seed\": " + seed;
    switch (route) {
      case 0: {
        absl::StatusOr<ChatCompletionRequest> r = ParseChatCompletionRequest(
            R"({"messages": [{"role": "user", "content": "x"}])" + field + "}");
        if (!r.ok()) return r.status();
        return r->sampling.seed;
      }
      case 1: {
        absl::StatusOr<CompletionRequest> r =
            ParseCompletionRequest(R"({"prompt": "x")" + field + "}");
        if (!r.ok()) return r.status();
        return r->sampling.seed;
      }
      case 2: {
        absl::StatusOr<ResponsesRequest> r =
            ParseResponsesRequest(R"({"input": "x")" + field + "}");
        if (!r.ok()) return r.status();
        return r->sampling.seed;
      }
      default: {
        absl::StatusOr<MessagesRequest> r = ParseMessagesRequest(
            R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}])" +
            field + "}");
        if (!r.ok()) return r.status();
        return r->sampling.seed;
      }
    }
  };
  const std::pair<const char*, uint64_t> good[] = {
      {"0", 0},
      {"42", 42},
      {"16.0", 16},
      {"9223372036854775807", 0x7fffffffffffffffull},   // 2^63-1
      {"9223372036854775808", 0x8000000000000000ull},   // 2^63
      {"18446744073709551615", 0xffffffffffffffffull},  // 2^64-1, the top end
      {"-1", 0xffffffffffffffffull},                    // 2^64-1 modulo 2^64
      {"-2", 0xfffffffffffffffeull},
      {"-9223372036854775808", 0x8000000000000000ull},  // -2^63, the bottom end
  };
  const char* bad[] = {"18446744073709551616",  // 2^64
                       "-9223372036854775809",  // -2^63-1
                       "1e30",
                       "1.5",
                       "\"7\"",
                       "true",
                       "[1]"};
  for (int route = 0; route < 4; ++route) {
    SCOPED_TRACE(route);
    ASSERT_OK_AND_ASSIGN(std::optional<uint64_t> none, parse(route, ""));
    EXPECT_FALSE(none.has_value());
    for (const auto& [text, want] : good) {
      absl::StatusOr<std::optional<uint64_t>> got = parse(route, text);
      ASSERT_OK(got.status()) << text;
      EXPECT_EQ(*got, want) << text;
    }
    for (const char* text : bad) {
      absl::StatusOr<std::optional<uint64_t>> got = parse(route, text);
      EXPECT_THAT(got, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'seed' must be")))
          << text;
      EXPECT_EQ(ErrorParam(got.status()), "seed") << text;
    }
  }
}

// vLLM's cache_salt, on all four generation routes: a non-empty string; absent or null = no
// salt; anything else is a 400 naming the field, in each API's own error shape.
TEST(OpenAiCodecTest, CacheSaltIsTheSameOnEveryRoute) {
  auto parse = [](int route, const std::string& field) -> absl::StatusOr<std::string> {
    const std::string extra = field.empty() ? "" : ", \"cache_salt\": " + field;
    switch (route) {
      case 0: {
        absl::StatusOr<ChatCompletionRequest> r = ParseChatCompletionRequest(
            R"({"messages": [{"role": "user", "content": "x"}])" + extra + "}");
        if (!r.ok()) return r.status();
        return r->cache_salt;
      }
      case 1: {
        absl::StatusOr<CompletionRequest> r =
            ParseCompletionRequest(R"({"prompt": "x")" + extra + "}");
        if (!r.ok()) return r.status();
        return r->cache_salt;
      }
      case 2: {
        absl::StatusOr<ResponsesRequest> r =
            ParseResponsesRequest(R"({"input": "x")" + extra + "}");
        if (!r.ok()) return r.status();
        return r->cache_salt;
      }
      default: {
        absl::StatusOr<MessagesRequest> r = ParseMessagesRequest(
            R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}])" +
            extra + "}");
        if (!r.ok()) return r.status();
        return r->cache_salt;
      }
    }
  };
  for (int route = 0; route < 4; ++route) {
    SCOPED_TRACE(route);
    ASSERT_OK_AND_ASSIGN(std::string none, parse(route, ""));
    EXPECT_EQ(none, "");
    ASSERT_OK_AND_ASSIGN(std::string null_salt, parse(route, "null"));
    EXPECT_EQ(null_salt, "");
    ASSERT_OK_AND_ASSIGN(std::string salt, parse(route, R"("tenant-a \u00e9")"));
    EXPECT_EQ(salt, "tenant-a \xc3\xa9");
    for (const char* bad : {"\"\"", "7", "true", "[\"a\"]", "{\"a\": 1}"}) {
      absl::StatusOr<std::string> got = parse(route, bad);
      EXPECT_THAT(got, StatusIs(absl::StatusCode::kInvalidArgument,
                                HasSubstr("'cache_salt' must be a non-empty string")))
          << bad;
      EXPECT_EQ(ErrorParam(got.status()), "cache_salt") << bad;
      if (route == 3) {
        // Anthropic's shape, the field path first.
        Json body = Json::parse(AnthropicErrorJson(got.status()));
        EXPECT_EQ(body["type"], "error");
        EXPECT_EQ(body["error"]["type"], "invalid_request_error");
        EXPECT_EQ(body["error"]["message"].get<std::string>().rfind("cache_salt: ", 0), 0u)
            << body.dump();
      } else {
        Json body = Json::parse(OpenAiErrorJson(got.status()));
        EXPECT_EQ(body["error"]["param"], "cache_salt");
        EXPECT_EQ(body["error"]["type"], "invalid_request_error");
      }
    }
  }
}

// The traffic_class extension field, on all four generation routes: "chat" or "agent" (absent or
// null = unset, so the header or the default decides); anything else is a 400 naming the field,
// in each API's own error shape.
TEST(OpenAiCodecTest, TrafficClassIsTheSameOnEveryRoute) {
  using Cls = std::optional<kv::TrafficClass>;
  auto parse = [](int route, const std::string& field) -> absl::StatusOr<Cls> {
    const std::string extra = field.empty() ? "" : ", \"traffic_class\": " + field;
    switch (route) {
      case 0: {
        absl::StatusOr<ChatCompletionRequest> r = ParseChatCompletionRequest(
            R"({"messages": [{"role": "user", "content": "x"}])" + extra + "}");
        if (!r.ok()) return r.status();
        return r->traffic_class;
      }
      case 1: {
        absl::StatusOr<CompletionRequest> r =
            ParseCompletionRequest(R"({"prompt": [1, 2])" + extra + "}");
        if (!r.ok()) return r.status();
        return r->traffic_class;
      }
      case 2: {
        absl::StatusOr<ResponsesRequest> r =
            ParseResponsesRequest(R"({"input": "x")" + extra + "}");
        if (!r.ok()) return r.status();
        return r->traffic_class;
      }
      default: {
        absl::StatusOr<MessagesRequest> r = ParseMessagesRequest(
            R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}])" +
            extra + "}");
        if (!r.ok()) return r.status();
        return r->traffic_class;
      }
    }
  };
  for (int route = 0; route < 4; ++route) {
    SCOPED_TRACE(route);
    ASSERT_OK_AND_ASSIGN(Cls none, parse(route, ""));
    EXPECT_EQ(none, std::nullopt);
    ASSERT_OK_AND_ASSIGN(Cls null_cls, parse(route, "null"));
    EXPECT_EQ(null_cls, std::nullopt);
    ASSERT_OK_AND_ASSIGN(Cls chat, parse(route, R"("chat")"));
    EXPECT_EQ(chat, kv::TrafficClass::kChat);
    ASSERT_OK_AND_ASSIGN(Cls agent, parse(route, R"("agent")"));
    EXPECT_EQ(agent, kv::TrafficClass::kAgent);
    for (const char* bad : {"\"\"", "\"Agent\"", "\"batch\"", "1", "true", "[\"agent\"]"}) {
      absl::StatusOr<Cls> got = parse(route, bad);
      EXPECT_THAT(got, StatusIs(absl::StatusCode::kInvalidArgument,
                                HasSubstr("'traffic_class' must be one of 'chat' or 'agent'")))
          << bad;
      EXPECT_EQ(ErrorParam(got.status()), "traffic_class") << bad;
      if (route == 3) {
        Json body = Json::parse(AnthropicErrorJson(got.status()));
        EXPECT_EQ(body["error"]["type"], "invalid_request_error");
        EXPECT_EQ(body["error"]["message"].get<std::string>().rfind("traffic_class: ", 0), 0u)
            << body.dump();
      } else {
        Json body = Json::parse(OpenAiErrorJson(got.status()));
        EXPECT_EQ(body["error"]["param"], "traffic_class");
        EXPECT_EQ(body["error"]["type"], "invalid_request_error");
      }
    }
  }
}

// The body field wins over the X-Traffic-Class header (which is then not looked at); the header
// alone decides otherwise (any case, blanks around ignored); neither = chat.
TEST(OpenAiCodecTest, TrafficClassBodyWinsOverTheHeader) {
  using codec_util::ResolveTrafficClass;
  using kv::TrafficClass;
  auto is = [](const absl::StatusOr<TrafficClass>& got, TrafficClass want) {
    return got.ok() && *got == want;
  };
  EXPECT_TRUE(is(ResolveTrafficClass(std::nullopt, ""), TrafficClass::kChat));
  EXPECT_TRUE(is(ResolveTrafficClass(std::nullopt, "agent"), TrafficClass::kAgent));
  EXPECT_TRUE(is(ResolveTrafficClass(std::nullopt, " Agent "), TrafficClass::kAgent));
  EXPECT_TRUE(is(ResolveTrafficClass(std::nullopt, "CHAT"), TrafficClass::kChat));
  EXPECT_TRUE(is(ResolveTrafficClass(TrafficClass::kChat, "agent"), TrafficClass::kChat));
  EXPECT_TRUE(is(ResolveTrafficClass(TrafficClass::kAgent, ""), TrafficClass::kAgent));
  EXPECT_TRUE(is(ResolveTrafficClass(TrafficClass::kAgent, "nonsense"), TrafficClass::kAgent));
  absl::StatusOr<TrafficClass> bad = ResolveTrafficClass(std::nullopt, "batch");
  EXPECT_THAT(bad, StatusIs(absl::StatusCode::kInvalidArgument,
                            HasSubstr("'X-Traffic-Class' must be one of 'chat' or 'agent'")));
  EXPECT_EQ(ErrorParam(bad.status()), "X-Traffic-Class");
}

// The `speculative` extension on Completions: default true, false opts out, a non-boolean is a
// 400 naming the field.
TEST(OpenAiCodecTest, CompletionsSpeculativeField) {
  ASSERT_OK_AND_ASSIGN(CompletionRequest cmpl, ParseCompletionRequest(R"({"prompt": "x"})"));
  EXPECT_TRUE(cmpl.speculative);
  ASSERT_OK_AND_ASSIGN(cmpl, ParseCompletionRequest(R"({"prompt": "x", "speculative": false})"));
  EXPECT_FALSE(cmpl.speculative);
  absl::StatusOr<CompletionRequest> bad =
      ParseCompletionRequest(R"({"prompt": "x", "speculative": "no"})");
  EXPECT_THAT(bad, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("a boolean")));
  EXPECT_EQ(ErrorParam(bad.status()), "speculative");
}

// vLLM's return_token_ids: a boolean on Chat and Completions; the ids go where vLLM puts them
// (Chat: prompt_token_ids at the top level, token_ids per choice; Completions: both per choice).
TEST(OpenAiCodecTest, ReturnTokenIds) {
  ASSERT_OK_AND_ASSIGN(ChatCompletionRequest chat,
                       ParseChatCompletionRequest(R"({"messages": [{"role": "user", "content": )"
                                                  R"("x"}], "return_token_ids": true})"));
  EXPECT_TRUE(chat.return_token_ids);
  ASSERT_OK_AND_ASSIGN(CompletionRequest cmpl,
                       ParseCompletionRequest(R"({"prompt": "x", "return_token_ids": true})"));
  EXPECT_TRUE(cmpl.return_token_ids);
  ASSERT_OK_AND_ASSIGN(cmpl, ParseCompletionRequest(R"({"prompt": "x"})"));
  EXPECT_FALSE(cmpl.return_token_ids);
  absl::StatusOr<CompletionRequest> bad =
      ParseCompletionRequest(R"({"prompt": "x", "return_token_ids": 1})");
  EXPECT_THAT(bad, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(ErrorParam(bad.status()), "return_token_ids");

  ChatChoiceOut c;
  c.content = "hi";
  c.finish_reason = "length";
  c.token_ids = std::vector<int32_t>{7, 8};
  Json j = Json::parse(DumpJson(ChatCompletionJson("chatcmpl-1", 1, "m", {c}, Usage{3, 2, 0, 0},
                                                   std::vector<int32_t>{1, 2, 3})));
  EXPECT_EQ(j["prompt_token_ids"], Json::parse("[1, 2, 3]"));
  EXPECT_EQ(j["choices"][0]["token_ids"], Json::parse("[7, 8]"));
  ChatChoiceOut plain;
  plain.finish_reason = "stop";
  j = Json::parse(DumpJson(ChatCompletionJson("chatcmpl-2", 1, "m", {plain}, Usage{})));
  EXPECT_FALSE(j.contains("prompt_token_ids"));
  EXPECT_FALSE(j["choices"][0].contains("token_ids"));

  CompletionChoiceOut cc;
  cc.text = "t";
  cc.finish_reason = "stop";
  cc.prompt_token_ids = std::vector<int32_t>{1, 2};
  cc.token_ids = std::vector<int32_t>{9};
  j = Json::parse(DumpJson(CompletionJson("cmpl-1", 1, "m", {cc}, Usage{2, 1, 0, 0})));
  EXPECT_EQ(j["choices"][0]["prompt_token_ids"], Json::parse("[1, 2]"));
  EXPECT_EQ(j["choices"][0]["token_ids"], Json::parse("[9]"));
}

// Usage with a prefix-cache hit: DeepSeek's hit + miss add up to the prompt tokens, and the
// Responses and Messages usages carry the same hit under their own names.
TEST(OpenAiCodecTest, CachedTokensInEveryUsageShape) {
  const Usage u{300, 4, 256, 0};
  Json chat = Json::parse(DumpJson(UsageJson(u)));
  EXPECT_EQ(chat["prompt_tokens_details"]["cached_tokens"], 256);
  EXPECT_EQ(chat["prompt_cache_hit_tokens"], 256);
  EXPECT_EQ(chat["prompt_cache_miss_tokens"], 44);
  Json responses = Json::parse(DumpJson(ResponsesUsageJson(u)));
  EXPECT_EQ(responses["input_tokens"], 300);
  EXPECT_EQ(responses["input_tokens_details"]["cached_tokens"], 256);
}

// OpenAI requires json_schema.name (shared/spec/protocol.md is silent, so we follow OpenAI); a
// missing `schema` is any JSON object (docs/protocol.md).
TEST(OpenAiCodecTest, JsonSchemaResponseFormatNeedsAName) {
  const std::string msgs = R"("messages": [{"role": "user", "content": "x"}])";
  absl::StatusOr<ChatCompletionRequest> r = ParseChatCompletionRequest(
      "{" + msgs + R"(, "response_format": {"type": "json_schema", "json_schema": {}}})");
  ASSERT_THAT(r, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(ErrorInfoFor(r.status().code()).http_status, 400);
  // The OpenAI error envelope, as OpenAI words a missing parameter.
  EXPECT_EQ(Json::parse(OpenAiErrorJson(r.status())),
            Json::parse(R"({"error": {"message": "Missing required parameter: )"
                        R"('response_format.json_schema.name'.", "type": "invalid_request_error",)"
                        R"( "param": "response_format.json_schema.name", "code": null}})"));
  for (const char* bad :
       {R"("name": "")", R"("name": "has space")", R"("name": 7)",
        R"("name": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")"}) {
    r = ParseChatCompletionRequest(
        "{" + msgs + R"(, "response_format": {"type": "json_schema", "json_schema": {)" + bad +
        "}}}");
    EXPECT_THAT(r, StatusIs(absl::StatusCode::kInvalidArgument)) << bad;
    EXPECT_EQ(ErrorParam(r.status()), "response_format.json_schema.name") << bad;
  }
  // 64 characters from the allowed set; no schema: accepted (any JSON object).
  const std::string name64 = "Ab0_-" + std::string(59, 'z');
  ASSERT_OK_AND_ASSIGN(ChatCompletionRequest ok,
                       ParseChatCompletionRequest("{" + msgs +
                                                  R"(, "response_format": {"type": "json_schema", )"
                                                  R"("json_schema": {"name": ")" +
                                                  name64 + R"("}}})"));
  ASSERT_TRUE(ok.conversation.response_format.has_value());
  // Responses: the name sits in text.format.
  absl::StatusOr<ResponsesRequest> rr =
      ParseResponsesRequest(R"({"input": "x", "text": {"format": {"type": "json_schema",)"
                            R"( "schema": {"type": "object"}}}})");
  EXPECT_THAT(rr, StatusIs(absl::StatusCode::kInvalidArgument,
                           HasSubstr("Missing required parameter: 'text.format.name'")));
  EXPECT_EQ(ErrorParam(rr.status()), "text.format.name");
  ASSERT_OK(ParseResponsesRequest(
                R"({"input": "x", "text": {"format": {"type": "json_schema", "name": "n"}}})")
                .status());
}

TEST(OpenAiCodecTest, ParsesCompletionPromptShapes) {
  ASSERT_OK_AND_ASSIGN(
      CompletionRequest a,
      ParseCompletionRequest(
          R"({"model": "m", "prompt": "Once", "echo": true, "logprobs": 2, "max_tokens": 5})"));
  EXPECT_FALSE(a.prompt_is_ids);
  EXPECT_EQ(a.prompt_text, "Once");
  EXPECT_TRUE(a.echo);
  EXPECT_EQ(a.logprobs, 2);
  ASSERT_OK_AND_ASSIGN(CompletionRequest b, ParseCompletionRequest(R"({"prompt": [1, 2, 3]})"));
  EXPECT_TRUE(b.prompt_is_ids);
  EXPECT_EQ(b.prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  ASSERT_OK_AND_ASSIGN(CompletionRequest c, ParseCompletionRequest(R"({"prompt": ["x"]})"));
  EXPECT_EQ(c.prompt_text, "x");
  EXPECT_THAT(ParseCompletionRequest(R"({"prompt": ""})"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseCompletionRequest(R"({"prompt": []})"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseCompletionRequest(R"({"prompt": [1, -2]})"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseCompletionRequest(R"({"prompt": ["a", "b"]})"),
              StatusIs(absl::StatusCode::kUnimplemented));
  EXPECT_THAT(ParseCompletionRequest(R"({"model": "m"})"),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(OpenAiCodecTest, ChatCompletionJsonHasOpenAiFields) {
  ChatChoiceOut c;
  c.index = 0;
  c.tool_calls.push_back({"call_1", "get", R"({"a": 1})"});
  c.reasoning_content = "think";
  c.finish_reason = "tool_calls";
  Usage u{10, 5, 2, 3};
  Json j = Json::parse(DumpJson(ChatCompletionJson("chatcmpl-1", 7, "m", {c}, u)));
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["created"], 7);
  EXPECT_TRUE(j["choices"][0]["message"]["content"].is_null());
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["reasoning_content"], "think");
  EXPECT_EQ(j["choices"][0]["message"]["tool_calls"][0]["type"], "function");
  EXPECT_EQ(j["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"], R"({"a": 1})");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(j["usage"]["total_tokens"], 15);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 2);
  EXPECT_EQ(j["usage"]["completion_tokens_details"]["reasoning_tokens"], 3);
  EXPECT_EQ(j["usage"]["prompt_cache_miss_tokens"], 8);
}

TEST(OpenAiCodecTest, ChunksAndSseFraming) {
  Json chunk = ChatChunkJson("id", 1, "m", 1, {{"content", "hi"}}, "", std::nullopt, true);
  EXPECT_EQ(chunk["object"], "chat.completion.chunk");
  EXPECT_EQ(chunk["choices"][0]["index"], 1);
  EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(chunk.contains("usage") && chunk["usage"].is_null());
  Json usage = ChatUsageChunkJson("id", 1, "m", Usage{1, 2, 0, 0});
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["total_tokens"], 3);
  EXPECT_EQ(SseEvent(Json{{"a", 1}}), "data: {\"a\":1}\n\n");
  EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
}

TEST(OpenAiCodecTest, LogprobEntriesCarryExactBytes) {
  // A lone UTF-8 lead byte: "token" shows U+FFFD, "bytes" keeps the byte (OpenAI semantics).
  Json e = Json::parse(DumpJson(ChatLogprobEntry({"\xE4", -0.5, {{"a", -1.0}}}, true)));
  EXPECT_EQ(e["token"], "\xEF\xBF\xBD");
  EXPECT_EQ(e["bytes"], Json::array({0xE4}));
  EXPECT_EQ(e["logprob"], -0.5);
  EXPECT_EQ(e["top_logprobs"][0]["token"], "a");
  CompletionLogprobs lp;
  lp.tokens = {"a", "b"};
  lp.token_logprobs = {std::nullopt, -1.5};
  lp.top_logprobs = {std::nullopt, std::vector<std::pair<std::string, double>>{{"b", -1.5}}};
  lp.text_offset = {0, 1};
  Json c = CompletionLogprobsJson(lp);
  EXPECT_TRUE(c["token_logprobs"][0].is_null());
  EXPECT_EQ(c["token_logprobs"][1], -1.5);
  EXPECT_EQ(c["top_logprobs"][1]["b"], -1.5);
  EXPECT_EQ(c["text_offset"], Json::array({0, 1}));
}

// Content part types per role, as OpenAI's Chat Completions answers them (API reference:
// user parts text / image_url / input_audio / file, assistant parts text / refusal): anything we
// cannot honour is a 400 naming the part, never rendered into the prompt.
TEST(OpenAiCodecTest, ContentPartTypesFollowOpenAi) {
  auto chat = [](const std::string& role, const std::string& parts) {
    return ParseChatCompletionRequest(R"({"model": "m", "max_tokens": 1, "messages": [{"role": ")" +
                                      role + R"(", "content": )" + parts + "}]}");
  };
  struct Case {
    const char* role;
    const char* parts;
    const char* param;
    const char* message;
  };
  for (const Case& c : std::vector<Case>{
           {"user", R"([{"type": "bogus"}])", "messages[0].content[0].type", "'bogus'"},
           {"user",
            R"([{"type": "text", "text": "a"}, {"type": "input_audio", "input_audio": {}}])",
            "messages[0].content[1].type", "does not support audio input"},
           {"user", R"([{"type": "file", "file": {"file_id": "f"}}])",
            "messages[0].content[0].type", "does not support file input"},
           {"user", R"([{"type": "refusal", "refusal": "no"}])", "messages[0].content[0].type",
            "'refusal'"},
           {"system", R"([{"type": "refusal", "refusal": "no"}])", "messages[0].content[0].type",
            "'refusal'"},
           {"user", R"([{"type": "input_text", "text": "x"}])", "messages[0].content[0].type",
            "'input_text'"},
           {"assistant", R"([{"type": "image_url", "image_url": {"url": "u"}}])",
            "messages[0].content[0].type", "'image_url'"},
           {"user", R"(["hi"])", "messages[0].content[0]", "an object"},
       }) {
    absl::StatusOr<ChatCompletionRequest> r = chat(c.role, c.parts);
    EXPECT_THAT(r, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.message))) << c.parts;
    EXPECT_EQ(ErrorParam(r.status()), c.param) << c.parts;
    EXPECT_EQ(ErrorInfoFor(r.status().code()).http_status, 400);
  }
  // Accepted: text everywhere, refusal in assistant messages (its text is the content).
  ASSERT_OK_AND_ASSIGN(ChatCompletionRequest a,
                       chat("assistant", R"([{"type": "text", "text": "a"},)"
                                         R"( {"type": "refusal", "refusal": "b"}])"));
  EXPECT_EQ(a.conversation.messages[0].JoinedText(), "a\n\nb");
  ASSERT_OK(chat("system", R"([{"type": "text", "text": "s"}])").status());
  ASSERT_OK(chat("user", R"([{"type": "image_url", "image_url": {"url": "u"}}])").status());
  // A part whose payload has the wrong type names the payload.
  absl::StatusOr<ChatCompletionRequest> r =
      chat("assistant", R"([{"type": "refusal", "refusal": 3}])");
  EXPECT_EQ(ErrorParam(r.status()), "messages[0].content[0].refusal");
}

// Requests OpenAI answers with a 400 (API reference / observed answers), one per gap.
TEST(OpenAiCodecTest, OpenAiValidationGaps) {
  const std::string msgs = R"("model": "m", "messages": [{"role": "user", "content": "x"}])";
  auto chat_param = [&](const std::string& extra) {
    absl::StatusOr<ChatCompletionRequest> r = ParseChatCompletionRequest("{" + msgs + extra + "}");
    EXPECT_THAT(r, StatusIs(absl::StatusCode::kInvalidArgument)) << extra;
    return r.ok() ? std::string("<ok>") : ErrorParam(r.status());
  };
  absl::StatusOr<ChatCompletionRequest> so =
      ParseChatCompletionRequest("{" + msgs + R"(, "stream_options": {"include_usage": true}})");
  EXPECT_THAT(so, StatusIs(absl::StatusCode::kInvalidArgument,
                           "The 'stream_options' parameter is only allowed when 'stream' is "
                           "enabled."));
  EXPECT_EQ(ErrorParam(so.status()), "stream_options");
  EXPECT_EQ(chat_param(R"(, "stream": false, "stream_options": {"include_usage": true})"),
            "stream_options");
  ASSERT_OK(ParseChatCompletionRequest(
                "{" + msgs + R"(, "stream": true, "stream_options": {"include_usage": true}})")
                .status());
  ASSERT_OK(ParseChatCompletionRequest("{" + msgs + R"(, "stream_options": null})").status());
  EXPECT_EQ(chat_param(R"(, "response_format": {"type": "json_schema", "json_schema": )"
                       R"({"name": "n", "strict": "yes"}})"),
            "response_format.json_schema.strict");
  ASSERT_OK(ParseChatCompletionRequest("{" + msgs +
                                       R"(, "response_format": {"type": "json_schema", )"
                                       R"("json_schema": {"name": "n", "strict": true}}})")
                .status());
  absl::StatusOr<ChatCompletionRequest> named =
      ParseChatCompletionRequest(R"({"messages": [{"role": "user", "content": "x", "name": 5}]})");
  EXPECT_EQ(ErrorParam(named.status()), "messages[0].name");
  ASSERT_OK(ParseChatCompletionRequest(
                R"({"messages": [{"role": "user", "content": "x", "name": "bob"}]})")
                .status());
  // Tool names: OpenAI's ^[a-zA-Z0-9_-]{1,64}$.
  for (const char* bad : {"get.weather", "has space", "", "caf\u00e9"}) {
    EXPECT_EQ(chat_param(std::string(R"(, "tools": [{"type": "function", "function": {"name": ")") +
                         bad + R"("}}])"),
              "tools[0].function.name")
        << bad;
  }
  ASSERT_OK(ParseChatCompletionRequest("{" + msgs +
                                       R"(, "tools": [{"type": "function", "function": )"
                                       R"({"name": "get_weather-2"}}]})")
                .status());
  // Integers too long for 64 bits are out of range, not "not an integer".
  for (const char* big : {"99999999999999999999", "1e20", "18446744073709551615"}) {
    absl::StatusOr<ChatCompletionRequest> r =
        ParseChatCompletionRequest("{" + msgs + R"(, "max_tokens": )" + big + "}");
    EXPECT_THAT(r, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("must be between")))
        << big;
    EXPECT_EQ(ErrorParam(r.status()), "max_tokens") << big;
  }
  // reasoning_effort: the error lists exactly the accepted values, and each of them passes.
  absl::StatusOr<ChatCompletionRequest> eff =
      ParseChatCompletionRequest("{" + msgs + R"(, "reasoning_effort": "bogus"})");
  EXPECT_THAT(eff, StatusIs(absl::StatusCode::kInvalidArgument,
                            HasSubstr("'none', 'minimal', 'low', 'medium', 'high', 'xhigh', "
                                      "'max' and 'ultra'")));
  EXPECT_EQ(ErrorParam(eff.status()), "reasoning_effort");
  for (const char* e : {"none", "minimal", "low", "medium", "high", "xhigh", "max", "ultra"}) {
    ASSERT_OK(
        ParseChatCompletionRequest("{" + msgs + R"(, "reasoning_effort": ")" + e + "\"}").status())
        << e;
  }
  // Legacy completions: best_of with stream, or below n (OpenAI: 400).
  for (const char* bad : {R"("best_of": 2, "n": 1, "stream": true)", R"("best_of": 1, "n": 2)"}) {
    absl::StatusOr<CompletionRequest> r =
        ParseCompletionRequest(std::string(R"({"model": "m", "prompt": "x", )") + bad + "}");
    EXPECT_THAT(r, StatusIs(absl::StatusCode::kInvalidArgument)) << bad;
    EXPECT_EQ(ErrorParam(r.status()), "best_of") << bad;
  }
  ASSERT_OK(
      ParseCompletionRequest(R"({"model": "m", "prompt": "x", "best_of": 2, "n": 2})").status());
  absl::StatusOr<CompletionRequest> cso = ParseCompletionRequest(
      R"({"model": "m", "prompt": "x", "stream_options": {"include_usage": true}})");
  EXPECT_EQ(ErrorParam(cso.status()), "stream_options");
}

// vLLM's thinking_token_budget on Chat Completions (issue #22 part 5) and image_url parts, which
// parse and are then rejected by RejectImageParts naming the message (no vision encoder yet).
TEST(ChatRequestTest, ThinkingTokenBudgetAndImageParts) {
  ASSERT_OK_AND_ASSIGN(
      ChatCompletionRequest req,
      ParseChatCompletionRequest(R"({"messages":[{"role":"user","content":"hi"}],)"
                                 R"("thinking_token_budget":16,"parallel_tool_calls":false})"));
  EXPECT_EQ(req.thinking_token_budget, 16);
  EXPECT_FALSE(req.parallel_tool_calls);
  EXPECT_FALSE(ParseChatCompletionRequest(R"({"messages":[{"role":"user","content":"hi"}],)"
                                          R"("thinking_token_budget":-2})")
                   .ok());
  ASSERT_OK_AND_ASSIGN(
      ChatCompletionRequest img,
      ParseChatCompletionRequest(
          R"({"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},)"
          R"({"role":"user","content":[{"type":"text","text":"see"},)"
          R"({"type":"image_url","image_url":{"url":"https://example.com/x.png"}}]}]})"));
  absl::Status st = codec_util::RejectImageParts(img.conversation);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrorParam(st), "messages[2].content");
  EXPECT_EQ(ErrorCode(st), "unsupported_content");
}

}  // namespace
}  // namespace deepinfer::api
