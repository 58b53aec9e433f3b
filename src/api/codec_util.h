// Small JSON field readers shared by the Chat Completions, Responses and Messages codecs (strict
// types: a known field of the wrong type is an InvalidArgument naming the field; null counts as
// absent). Internal to deepinfer_api.
#ifndef DEEPINFER_API_CODEC_UTIL_H_
#define DEEPINFER_API_CODEC_UTIL_H_

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "protocol/conversation.h"

namespace deepinfer::api::codec_util {

using Json = nlohmann::ordered_json;

// InvalidArgument carrying `param` (WithParam) and `message` as given.
absl::Status Bad(std::string_view param, std::string_view message);
// "'<param>' must be <expected>".
absl::Status WrongType(std::string_view param, std::string_view expected);

// The field, or nullptr when absent or null.
const Json* Field(const Json& obj, const char* name);

// Parses `body` as a JSON object (ordered, so key order of schemas survives). Errors:
// InvalidArgument "invalid JSON body" / "the request body must be a JSON object".
absl::StatusOr<Json> ParseObjectBody(std::string_view body);

// The OpenAI string forms of tool_choice: "auto", "none", "required". Error: InvalidArgument
// (param tool_choice) naming the accepted values.
absl::StatusOr<protocol::ToolChoice> ToolChoiceMode(const std::string& mode);

// One server-sent event of the Responses and Messages streams, which name each event by its
// payload's `type`: "event: <type>\ndata: <json>\n\n" ("message" when `type` is missing).
std::string NamedSseEvent(const Json& event);

// Typed optional readers; `path` is the name used in error messages.
absl::Status ReadString(const Json& obj, const char* name, std::string_view path,
                        std::optional<std::string>* out);
absl::Status ReadBool(const Json& obj, const char* name, std::string_view path,
                      std::optional<bool>* out);
// Number in [lo, hi].
absl::Status ReadNumber(const Json& obj, const char* name, std::string_view path, double lo,
                        double hi, std::optional<double>* out);
// Integer (16.0 accepted) in [lo, hi].
absl::Status ReadInt(const Json& obj, const char* name, std::string_view path, int64_t lo,
                     int64_t hi, std::optional<int64_t>* out);

}  // namespace deepinfer::api::codec_util

#endif  // DEEPINFER_API_CODEC_UTIL_H_
