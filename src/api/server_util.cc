// Small response helpers shared by the route handlers (server_internal.h).
#include <ctime>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "api/codec_util.h"
#include "api/errors.h"
#include "api/server_internal.h"
#include "common/clock.h"
#include "common/logging.h"
#include "common/strings.h"

namespace deepinfer::api {

using OJson = nlohmann::ordered_json;
using engine::StepOutput;

int64_t UnixSeconds() { return static_cast<int64_t>(std::time(nullptr)); }

// "<prefix><24 random alphanumerics>", unique enough to key live engine requests.
std::string RandomId(std::string_view prefix) {
  static constexpr char kAlphabet[] =
      "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
  thread_local std::mt19937_64 rng(std::random_device{}() ^
                                   static_cast<uint64_t>(MonotonicNanos()));
  std::string id(prefix);
  for (int i = 0; i < 24; ++i) id += kAlphabet[rng() % (sizeof(kAlphabet) - 1)];
  return id;
}

std::string RequestIdFor(const http::HttpRequest& req, std::string_view prefix) {
  if (req.request_id.empty()) return RandomId(prefix);
  return absl::StrCat(AbslView(prefix), req.request_id);
}

void SendJson(http::ResponseWriter& w, int status, const OJson& j) {
  w.Send(status, "application/json", DumpJson(j));
}

// /v1/messages and everything below it speak Anthropic's error shape.
bool IsMessagesRoute(const std::string& path) {
  return path == "/v1/messages" || absl::StartsWith(AbslView(path), "/v1/messages/");
}

// What an in-flight request gets when the server's drain deadline passes (a server-side
// condition: Unavailable -> 503 / Anthropic 529 overloaded_error).
absl::Status ServerClosingError() {
  return absl::UnavailableError(
      "The server is shutting down; the request was cut off before it finished. Retry later.");
}

void SendError(http::ResponseWriter& w, const absl::Status& status) {
  const int http_status = ErrorInfoFor(status.code()).http_status;
  // Rejected requests get their log line here (generation requests log in Impl::Finish).
  LOG(INFO) << "request rejected: status=" << http_status << " " << status.message();
  w.Send(http_status, "application/json", OpenAiErrorJson(status));
}

void EndOpenAiRequestForShutdown(RecordingWriter& w, bool stream_mode) {
  if (!stream_mode) return SendError(w, ServerClosingError());
  w.WriteChunk(SseEvent(OJson::parse(OpenAiErrorJson(ServerClosingError()))));
  w.WriteChunk(kSseDone);
  w.EndStream();
  w.set_status(ErrorInfoFor(ServerClosingError().code()).http_status);
}

protocol::StreamEnd StreamEndFor(engine::FinishReason r) {
  switch (r) {
    case engine::FinishReason::kLength:
      return protocol::StreamEnd::kLength;
    case engine::FinishReason::kAbort:
      return protocol::StreamEnd::kCancelled;
    default:
      return protocol::StreamEnd::kEndOfSequence;
  }
}

}  // namespace deepinfer::api
