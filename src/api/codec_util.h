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
#include "kv/block_record.h"
#include "nlohmann/json.hpp"
#include "protocol/conversation.h"

namespace deepinfer::api {
struct SamplingFields;
}  // namespace deepinfer::api

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

// Checks the `name` of a json_schema response format (Chat `response_format.json_schema`,
// Responses `text.format`), which OpenAI requires: a string of 1 to 64 characters from a-z, A-Z,
// 0-9, '_' and '-'. `path` names the field in the error ("response_format.json_schema.name").
// A missing `schema` is not checked here: it means any JSON object (docs/protocol.md).
// Error: InvalidArgument naming `path`.
absl::Status CheckJsonSchemaName(const Json& json_schema, std::string_view path);

// OpenAI's rule for schema and function names, ^[a-zA-Z0-9_-]{1,64}$ (Chat
// `tools[i].function.name`, Responses `tools[i].name`). Error: InvalidArgument naming `path`.
absl::Status CheckOpenAiName(const std::string& name, std::string_view path);

// Checks a reasoning effort name against the ones the prompt encoder accepts
// (protocol::ReasoningEffort::Parse: minimal, low, medium, high, xhigh, max, ultra) plus "none"
// where `allow_none` (Chat `reasoning_effort`, Responses `reasoning.effort`: thinking off).
// Error: InvalidArgument naming `path` and listing exactly the accepted values.
absl::Status CheckReasoningEffort(const std::string& effort, std::string_view path,
                                  bool allow_none);

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
// The sampler seed (Chat/Completions `seed`, and the extension field of Responses/Messages): an
// integer in [-2^63, 2^64-1] (16.0 accepted below 9e15, like ReadInt); negative values are taken
// modulo 2^64 (-1 -> 2^64-1), so every 64-bit pattern is reachable both ways (docs/protocol.md,
// "Extension fields"). Errors: InvalidArgument naming `path` for a non-integer or an
// out-of-range value.
absl::Status ReadSeed(const Json& obj, const char* name, std::string_view path,
                      std::optional<uint64_t>* out);

// vLLM's `cache_salt` (all four generation APIs): a non-empty string folded into the request's
// prefix-cache keys, so requests with different salts never share cached KV (docs/protocol.md,
// "Extension fields"). Absent or null leaves `out` unchanged (no salt). Errors: InvalidArgument
// naming `cache_salt` for a non-string or an empty string (vLLM's rule).
absl::Status ReadCacheSalt(const Json& obj, std::string* out);

// The `traffic_class` extension field (all four generation APIs): "chat" or "agent", the class
// whose TTL the KV store applies to the blocks the request writes (docs/kv-tiers.md). Absent or
// null leaves `out` unchanged. Errors: InvalidArgument naming `traffic_class` for anything else
// (a non-string, another string; values are case-sensitive, like every enum in the APIs).
absl::Status ReadTrafficClass(const Json& obj, std::optional<kv::TrafficClass>* out);

// The request's traffic class from its body field (ReadTrafficClass) and the `X-Traffic-Class`
// header value (`header`, "" = absent). The body wins: a gateway sets the header as the
// deployment's default, an application overrides it per request with the field (the header is
// then not looked at). Neither = chat. The header is matched case-insensitively, ignoring
// surrounding blanks. Errors: InvalidArgument naming `X-Traffic-Class` for another header value.
absl::StatusOr<kv::TrafficClass> ResolveTrafficClass(std::optional<kv::TrafficClass> body,
                                                     std::string_view header);

// vLLM's sampling extensions on the Responses and Messages bodies (Chat / Completions read
// them in ParseSampling): `min_tokens` (integer >= 0; EOS, stop_token_ids and stop strings count
// only after it) and `stop_token_ids` (array of token ids in [0, 2^31), checked against the
// vocabulary by the server). Errors: InvalidArgument naming the field.
absl::Status ReadVllmSamplingExtensions(const Json& obj, SamplingFields* out);

// vLLM's `thinking_token_budget` (Chat Completions, Responses): the most reasoning tokens before
// the server forces `</think>`; an integer in [0, 2^31). Absent or null: unchanged. Errors:
// InvalidArgument naming the field.
absl::Status ReadThinkingTokenBudget(const Json& obj, std::optional<int64_t>* out);

// Image content parts (Chat `image_url`, Responses `input_image`, Messages `image`, also inside
// tool results) are a 400 until a vision encoder exists: InvalidArgument (code
// unsupported_content) naming the first such part's message ("messages[2].content",
// "input[1].content").
absl::Status RejectImageParts(const protocol::Conversation& conversation);

}  // namespace deepinfer::api::codec_util

#endif  // DEEPINFER_API_CODEC_UTIL_H_
