// Anthropic Messages API codec (POST /v1/messages, /v1/messages/count_tokens;
// shared/spec/protocol.md §3.3, §3.4) over the one conversation model and output event stream
// (DEEPINFER-DESIGN.md §13): no second template or parser.
//
// Request side: `system` (string or text blocks), `messages` (user/assistant; text, image,
// tool_use, tool_result, thinking blocks), `tools` with `input_schema`, `tool_choice`
// (auto/any/tool/none), `thinking` (enabled + budget_tokens / disabled), `output_config.effort`,
// `max_tokens` (required), `stop_sequences`, `temperature`, `top_p`, `top_k` ->
// protocol::Conversation + SamplingFields. A trailing assistant message is a prefill
// (Message::prefix).
//
// Response side: MessagesEncoder turns protocol::OutputEvents into the Messages SSE events, and
// its Message() is the non-streaming body built from the same state, so both agree.
// Errors have Anthropic's shape {"type":"error","error":{"type","message"}} (AnthropicErrorJson);
// the message is prefixed with the offending field path ("messages.1.role: ...").
// Thread-safety: pure functions; one encoder per response, used from one thread.
#ifndef DEEPINFER_API_MESSAGES_CODEC_H_
#define DEEPINFER_API_MESSAGES_CODEC_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "api/openai_codec.h"
#include "nlohmann/json.hpp"
#include "protocol/conversation.h"
#include "protocol/output_parser.h"

namespace deepinfer::api {

// POST /v1/messages, validated.
struct MessagesRequest {
  std::string model;
  protocol::Conversation conversation;
  std::optional<bool> thinking;            // thinking.type; nullopt = model default
  // thinking.budget_tokens (>= 1024, < max_tokens): `</think>` is forced after this many
  // reasoning tokens.
  std::optional<int64_t> thinking_budget;
  std::string reasoning_effort;            // output_config.effort ("" = absent)
  // false with tool_choice.disable_parallel_tool_use: at most one tool_use block.
  bool parallel_tool_calls = true;
  // temperature [0,1], top_p, top_k, stop (= stop_sequences), max_tokens, stream, and the
  // extension fields `seed`, `min_tokens`, `stop_token_ids` (not in Anthropic's API;
  // docs/protocol.md, "Extension fields").
  SamplingFields sampling;
  // vLLM's `cache_salt` extension ("" = none): prefix-cache isolation (codec_util::ReadCacheSalt).
  std::string cache_salt;
  // The `traffic_class` extension field (nullopt = absent; codec_util::ReadTrafficClass).
  std::optional<kv::TrafficClass> traffic_class;
};

// Parses and validates. `count_tokens`: the body of /v1/messages/count_tokens (max_tokens not
// required). Errors: InvalidArgument whose message names the field ("max_tokens: Field
// required"); tagged with a ProtocolError for conversation errors.
absl::StatusOr<MessagesRequest> ParseMessagesRequest(std::string_view body,
                                                     bool count_tokens = false);

// Anthropic error mapping: InvalidArgument/OutOfRange/FailedPrecondition/Unimplemented 400
// invalid_request_error, Unauthenticated 401 authentication_error, PermissionDenied 403
// permission_error, NotFound 404 not_found_error, ResourceExhausted 429 rate_limit_error,
// Unavailable 529 overloaded_error, anything else 500 api_error.
struct AnthropicErrorInfo {
  int http_status = 500;
  const char* type = "api_error";
};
AnthropicErrorInfo AnthropicErrorInfoFor(absl::StatusCode code);
// {"type":"error","error":{"type","message"}}; the message is the status message, prefixed with
// "<param>: " when the status carries a param (WithParam) not already at its start.
std::string AnthropicErrorJson(const absl::Status& status);
// The same for a transport-level error with a given type (e.g. "authentication_error").
std::string AnthropicErrorJson(std::string_view type, std::string_view message);

// Identity of one message response.
// Usage follows Anthropic's accounting: `usage.input_tokens` counts the prompt tokens NOT read
// from the cache, so input_tokens + cache_creation_input_tokens (always 0: blocks are cached
// implicitly, nothing is billed as a cache write) + cache_read_input_tokens = prompt tokens.
struct MessageMeta {
  std::string id;  // "msg_..."
  std::string model;
  int64_t prompt_tokens = 0;            // the whole prompt
  int64_t cache_read_input_tokens = 0;  // of which served from the prefix cache
};

// protocol::OutputEvent stream -> Messages events (payload objects with `type`; render with
// MessagesSseEvent()). Start() once, OnEvent() for every event, Complete() once after kFinish.
// Blocks: reasoning -> thinking {thinking, signature:""} with thinking_delta; text -> text with
// text_delta; each tool call -> tool_use {id (the parser's tool_call_id), name, input} with
// input_json_delta fragments (the parser's argument fragments, which concatenate to the
// arguments JSON). stop_reason: stop -> end_turn, stop_sequence -> stop_sequence (+ the string),
// length -> max_tokens, tool_calls -> tool_use. A tool call cut off by max_tokens stays a tool_use
// block in both modes (same id and name; the stream has already sent its start and partial_json):
// its non-streaming `input`, which must be an object, holds the top-level members that were
// completely generated ({} if none), stop_reason max_tokens. A tool-call error or cancel ends the
// stream with an `error` event (api_error) instead of message_delta/message_stop, and Message()
// then fails.
class MessagesEncoder {
 public:
  explicit MessagesEncoder(MessageMeta meta);

  // Prompt tokens served from the prefix cache (usage.cache_read_input_tokens), known once the
  // engine's first output arrives: set it before Start() so message_start carries it. Every
  // usage object after the call (message_delta, Message()) carries it too.
  void SetCacheReadInputTokens(int64_t tokens) { meta_.cache_read_input_tokens = tokens; }

  std::vector<nlohmann::ordered_json> Start();
  std::vector<nlohmann::ordered_json> OnEvent(const protocol::OutputEvent& event);
  // `output_tokens`: completion tokens of the whole response. message_delta's usage carries the
  // whole-message totals (input_tokens, cache_creation_input_tokens, cache_read_input_tokens,
  // output_tokens), as Anthropic's current API does; the SDKs take them over into the final
  // message.
  std::vector<nlohmann::ordered_json> Complete(int64_t output_tokens);

  // The non-streaming body after Complete(). Error: Internal with the parser's error when the
  // output ended with a broken tool call (or was cancelled).
  absl::StatusOr<nlohmann::ordered_json> Message() const;

 private:
  enum class Open { kNone, kThinking, kText, kToolUse };
  void CloseOpen(std::vector<nlohmann::ordered_json>* out);
  nlohmann::ordered_json UsageJson(int64_t output_tokens) const;

  MessageMeta meta_;
  std::vector<nlohmann::ordered_json> content_;  // finished blocks
  Open open_ = Open::kNone;
  nlohmann::ordered_json open_block_;
  std::string open_text_;
  int open_tool_index_ = -1;
  bool finished_ = false;
  protocol::FinishReason finish_reason_ = protocol::FinishReason::kStop;
  std::string stop_sequence_;
  std::string error_;
  int64_t output_tokens_ = 0;
};

// Anthropic stop_reason for a finish reason ("" for tool-call error / cancelled).
std::string_view AnthropicStopReason(protocol::FinishReason reason);

}  // namespace deepinfer::api

#endif  // DEEPINFER_API_MESSAGES_CODEC_H_
