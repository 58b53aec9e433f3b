// Request ids (vLLM's X-Request-Id convention): a client or gateway may name its request with an
// `X-Request-Id` header; the server uses that name as the request's id (the api/ layer builds the
// response `id` and the log line's id from it, as vLLM does: "chatcmpl-<X-Request-Id>") and
// echoes it in the response's X-Request-Id header. Without the header the server makes up a
// random id and echoes that, so every response names the id its log line carries.
#ifndef DEEPINFER_HTTP_REQUEST_ID_H_
#define DEEPINFER_HTTP_REQUEST_ID_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace deepinfer::http {

// Longest X-Request-Id accepted (bytes): ids end up in logs, headers and response bodies.
inline constexpr size_t kMaxRequestIdBytes = 256;

// The request id for a request whose X-Request-Id header is `header_value` ("" = absent: a new
// random id). Error: InvalidArgument saying what is allowed when the value is longer than
// kMaxRequestIdBytes or holds anything but visible ASCII (0x21-0x7E; a repeated header, joined
// with ", ", fails too), so an id never breaks a log line or a header.
absl::StatusOr<std::string> RequestIdFor(const std::string& header_value);

// 32 random lowercase hex digits (the shape of vLLM's uuid4().hex ids).
std::string NewRequestId();

}  // namespace deepinfer::http

#endif  // DEEPINFER_HTTP_REQUEST_ID_H_
