#include "api/errors.h"

#include "api/openai_server.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "protocol/conversation.h"

namespace deepinfer::api {
namespace {

// Expected statuses and types come from the OpenAI API reference (shared/spec/protocol.md §3.4).
TEST(ErrorsTest, TableMapsCanonicalCodesToOpenAiStatuses) {
  EXPECT_EQ(ErrorInfoFor(absl::StatusCode::kInvalidArgument).http_status, 400);
  EXPECT_STREQ(ErrorInfoFor(absl::StatusCode::kInvalidArgument).type, "invalid_request_error");
  EXPECT_EQ(ErrorInfoFor(absl::StatusCode::kOutOfRange).http_status, 400);
  EXPECT_EQ(ErrorInfoFor(absl::StatusCode::kNotFound).http_status, 404);
  EXPECT_EQ(ErrorInfoFor(absl::StatusCode::kUnauthenticated).http_status, 401);
  EXPECT_EQ(ErrorInfoFor(absl::StatusCode::kResourceExhausted).http_status, 429);
  EXPECT_EQ(ErrorInfoFor(absl::StatusCode::kUnavailable).http_status, 503);
  EXPECT_EQ(ErrorInfoFor(absl::StatusCode::kInternal).http_status, 500);
  EXPECT_STREQ(ErrorInfoFor(absl::StatusCode::kInternal).type, "server_error");
  EXPECT_EQ(ErrorInfoFor(absl::StatusCode::kDataLoss).http_status, 500);
}

TEST(ErrorsTest, ErrorJsonHasOpenAiShapeWithParamAndCode) {
  absl::Status st =
      WithErrorCode(WithParam(absl::NotFoundError("no such model"), "model"), "model_not_found");
  nlohmann::json j = nlohmann::json::parse(OpenAiErrorJson(st));
  EXPECT_EQ(j["error"]["message"], "no such model");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "model");
  EXPECT_EQ(j["error"]["code"], "model_not_found");
  EXPECT_EQ(j.size(), 1u);
  EXPECT_EQ(j["error"].size(), 4u);
}

TEST(ErrorsTest, MissingParamAndCodeAreNull) {
  nlohmann::json j = nlohmann::json::parse(OpenAiErrorJson(absl::InternalError("boom")));
  EXPECT_TRUE(j["error"]["param"].is_null());
  EXPECT_TRUE(j["error"]["code"].is_null());
  EXPECT_EQ(j["error"]["type"], "server_error");
}

TEST(ErrorsTest, ProtocolErrorPathIsUsedAsParam) {
  absl::Status st = protocol::MakeProtocolError(protocol::ProtocolError::kInvalidRole,
                                                "messages[2].role", "bad role");
  EXPECT_EQ(ErrorParam(st), "messages[2].role");
  EXPECT_EQ(ErrorParam(WithParam(st, "override")), "override");
}

TEST(ErrorsTest, TransportErrorsGetTypesByHttpStatus) {
  nlohmann::json j = nlohmann::json::parse(OpenAiErrorJson(413, "too big", "request_too_large"));
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["code"], "request_too_large");
  EXPECT_STREQ(ErrorTypeForHttpStatus(503), "service_unavailable_error");
  EXPECT_STREQ(ErrorTypeForHttpStatus(500), "server_error");
}

TEST(ErrorsTest, InvalidUtf8InMessageNeverThrows) {
  std::string msg = "bad \xff byte";
  nlohmann::json j = nlohmann::json::parse(OpenAiErrorJson(absl::InvalidArgumentError(msg)));
  EXPECT_EQ(j["error"]["message"], "bad \xEF\xBF\xBD byte");  // U+FFFD
}

// Transport errors (408, 413, ...) take the error shape of the route's API family: Anthropic's
// documented {"type":"error","error":{"type","message"}} on /v1/messages*, OpenAI's elsewhere.
TEST(ErrorsTest, TransportErrorBodyUsesTheRoutesErrorShape) {
  auto [ctype, body] = ApiServer::TransportErrorBody(408, "timed out", "/v1/messages");
  EXPECT_EQ(ctype, "application/json");
  nlohmann::json a = nlohmann::json::parse(body);
  EXPECT_EQ(a["type"], "error");
  EXPECT_EQ(a["error"]["type"], "invalid_request_error");
  EXPECT_EQ(a["error"]["message"], "timed out");
  nlohmann::json big = nlohmann::json::parse(
      ApiServer::TransportErrorBody(413, "too big", "/v1/messages/count_tokens").second);
  EXPECT_EQ(big["error"]["type"], "request_too_large");

  nlohmann::json o = nlohmann::json::parse(
      ApiServer::TransportErrorBody(408, "timed out", "/v1/completions").second);
  EXPECT_EQ(o["error"]["type"], "invalid_request_error");
  EXPECT_EQ(o["error"]["code"], "request_timeout");
  // Unknown path (the header was not read): OpenAI's shape.
  nlohmann::json u = nlohmann::json::parse(ApiServer::TransportErrorBody(400, "bad").second);
  EXPECT_EQ(u["error"]["message"], "bad");
  // "/v1/messagesX" is not a Messages route.
  EXPECT_TRUE(nlohmann::json::parse(ApiServer::TransportErrorBody(400, "x", "/v1/messagesX").second)
                  .contains("error"));
  EXPECT_FALSE(
      nlohmann::json::parse(ApiServer::TransportErrorBody(400, "x", "/v1/messagesX").second)
          .contains("type"));
}

}  // namespace
}  // namespace deepinfer::api
