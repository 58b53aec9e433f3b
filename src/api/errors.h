// The one table from absl::Status to an HTTP status and an OpenAI error object
// (ARCHITECTURE.md §8; shared/spec/protocol.md §3.4).
//
// Every error the API returns has OpenAI's shape:
//   {"error": {"message": "...", "type": "invalid_request_error", "param": "messages", "code":
//   null}}
// The HTTP status and `type` come from the status code through ErrorInfoFor(); `param` and `code`
// travel with the status as payloads (WithParam(), WithErrorCode()) so the layer that knows them
// (request validation, model lookup) can set them without knowing about HTTP. Protocol
// validation errors (protocol/conversation.h) carry their parameter path, which is used as
// `param` when no explicit one was set.
//
//   code                 HTTP  type
//   InvalidArgument       400  invalid_request_error
//   OutOfRange            400  invalid_request_error   (context length; code
//   context_length_exceeded) FailedPrecondition    400  invalid_request_error   (e.g. the model has
//   no chat template) Unimplemented         400  invalid_request_error   (a recognised but
//   unsupported option) AlreadyExists         409  invalid_request_error NotFound              404
//   invalid_request_error   (unknown model: code model_not_found) Unauthenticated       401
//   invalid_request_error   (code invalid_api_key, as OpenAI) PermissionDenied      403
//   permission_error ResourceExhausted     429  rate_limit_error        (engine queue full)
//   Unavailable           503  service_unavailable_error (overloaded, shutting down)
//   DeadlineExceeded      504  timeout_error
//   Cancelled             499  invalid_request_error   (client closed the request; nginx's code)
//   anything else         500  server_error
#ifndef DEEPINFER_API_ERRORS_H_
#define DEEPINFER_API_ERRORS_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace deepinfer::api {

struct ErrorInfo {
  int http_status = 500;
  const char* type = "server_error";
};

// The table above.
ErrorInfo ErrorInfoFor(absl::StatusCode code);

// The `type` used for an error produced at the transport level with HTTP status `http_status`
// (413 body too large, 400 malformed HTTP, 503 too many connections, ...).
const char* ErrorTypeForHttpStatus(int http_status);

// Attach / read the OpenAI `param` (e.g. "messages[0].content", "max_tokens") of an error.
absl::Status WithParam(absl::Status status, std::string_view param);
std::string ErrorParam(const absl::Status& status);

// Attach / read the OpenAI `code` (e.g. "model_not_found", "context_length_exceeded").
absl::Status WithErrorCode(absl::Status status, std::string_view code);
std::string ErrorCode(const absl::Status& status);

// {"error": {"message", "type", "param", "code"}} for `status` (param/code null when unset).
std::string OpenAiErrorJson(const absl::Status& status);
// The same for a transport-level error.
std::string OpenAiErrorJson(int http_status, std::string_view message, std::string_view code = {});

}  // namespace deepinfer::api

#endif  // DEEPINFER_API_ERRORS_H_
