#include "api/errors.h"

#include "absl/strings/cord.h"
#include "common/strings.h"
#include "nlohmann/json.hpp"
#include "protocol/conversation.h"

namespace deepinfer::api {
namespace {

constexpr char kParamUrl[] = "type.deepinfer/openai.error.param";
constexpr char kCodeUrl[] = "type.deepinfer/openai.error.code";

std::string Dump(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

nlohmann::ordered_json NullOr(const std::string& s) {
  return s.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(s);
}

}  // namespace

ErrorInfo ErrorInfoFor(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kUnimplemented:
      return {400, "invalid_request_error"};
    case absl::StatusCode::kAlreadyExists:
      return {409, "invalid_request_error"};
    case absl::StatusCode::kNotFound:
      return {404, "invalid_request_error"};
    case absl::StatusCode::kUnauthenticated:
      return {401, "invalid_request_error"};
    case absl::StatusCode::kPermissionDenied:
      return {403, "permission_error"};
    case absl::StatusCode::kResourceExhausted:
      return {429, "rate_limit_error"};
    case absl::StatusCode::kUnavailable:
      return {503, "service_unavailable_error"};
    case absl::StatusCode::kDeadlineExceeded:
      return {504, "timeout_error"};
    case absl::StatusCode::kCancelled:
      return {499, "invalid_request_error"};
    default:
      return {500, "server_error"};
  }
}

const char* ErrorTypeForHttpStatus(int http_status) {
  switch (http_status) {
    case 401:
      return "invalid_request_error";
    case 403:
      return "permission_error";
    case 429:
      return "rate_limit_error";
    case 503:
      return "service_unavailable_error";
    case 504:
      return "timeout_error";
    default:
      return http_status >= 500 ? "server_error" : "invalid_request_error";
  }
}

absl::Status WithParam(absl::Status status, std::string_view param) {
  if (!status.ok()) status.SetPayload(kParamUrl, absl::Cord(AbslView(param)));
  return status;
}

std::string ErrorParam(const absl::Status& status) {
  if (auto p = status.GetPayload(kParamUrl)) return std::string(*p);
  if (auto info = protocol::GetProtocolError(status)) return info->param;
  return "";
}

absl::Status WithErrorCode(absl::Status status, std::string_view code) {
  if (!status.ok()) status.SetPayload(kCodeUrl, absl::Cord(AbslView(code)));
  return status;
}

std::string ErrorCode(const absl::Status& status) {
  if (auto p = status.GetPayload(kCodeUrl)) return std::string(*p);
  return "";
}

std::string OpenAiErrorJson(const absl::Status& status) {
  nlohmann::ordered_json error = {
      {"message", std::string(status.message())},
      {"type", ErrorInfoFor(status.code()).type},
      {"param", NullOr(ErrorParam(status))},
      {"code", NullOr(ErrorCode(status))},
  };
  return Dump({{"error", error}});
}

std::string OpenAiErrorJson(int http_status, std::string_view message, std::string_view code) {
  nlohmann::ordered_json error = {
      {"message", std::string(message)},
      {"type", ErrorTypeForHttpStatus(http_status)},
      {"param", nullptr},
      {"code", NullOr(std::string(code))},
  };
  return Dump({{"error", error}});
}

}  // namespace deepinfer::api
