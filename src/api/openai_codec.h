// JSON glue for the OpenAI-compatible API (shared/spec/protocol.md §3.1, §3.4): request bodies
// -> native requests (strict types: a known field of the wrong type is a 400 naming the param;
// unknown fields are ignored, as vLLM does) and native results -> response / SSE chunk bodies
// with OpenAI's exact field names.
//
// Chat messages become a protocol::Conversation (protocol/conversation.h), so the DeepSeek
// encoder sees no JSON. Everything here is pure functions over values: no engine, no I/O.
// Errors: InvalidArgument with WithParam() set (api/errors.h); Unimplemented for recognised but
// unsupported shapes (batched prompts).
#ifndef DEEPINFER_API_OPENAI_CODEC_H_
#define DEEPINFER_API_OPENAI_CODEC_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "kv/block_record.h"
#include "nlohmann/json.hpp"
#include "protocol/conversation.h"
#include "protocol/output_parser.h"

namespace deepinfer::api {

// Sampling knobs shared by both endpoints, as the client sent them (validated ranges).
struct SamplingFields {
  std::optional<double> temperature;         // [0, 2]
  std::optional<double> top_p;               // (0, 1]
  std::optional<int> top_k;                  // vLLM extension; -1 = off
  std::optional<double> min_p;               // vLLM extension
  double presence_penalty = 0.0;             // [-2, 2]
  double frequency_penalty = 0.0;            // [-2, 2]
  std::optional<double> repetition_penalty;  // vLLM extension
  std::vector<std::pair<int32_t, float>> logit_bias;
  int n = 1;                          // [1, 128]
  std::optional<uint64_t> seed;       // [-2^63, 2^64-1], negatives modulo 2^64
  std::vector<std::string> stop;      // non-empty strings
  std::optional<int64_t> max_tokens;  // >= 1 (max_completion_tokens wins over max_tokens)
  // The request field max_tokens came from, for error params ("max_tokens",
  // "max_completion_tokens", "max_output_tokens").
  std::string max_tokens_param = "max_tokens";
  std::optional<int64_t> min_tokens;  // vLLM extension
  bool ignore_eos = false;            // vLLM extension
  // vLLM extension (all four APIs): token ids that end a sample like EOS (finish_reason
  // "stop"; as in vLLM a non-special stop token's text is part of the output); each in
  // [0, 2^31), checked against the vocabulary by the server.
  std::vector<int32_t> stop_token_ids;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
};

// POST /v1/chat/completions.
struct ChatCompletionRequest {
  std::string model;  // "" when absent
  protocol::Conversation conversation;
  // DeepSeek `thinking: {"type": "enabled"|"disabled"}`, also accepted as
  // `chat_template_kwargs.thinking` / `enable_thinking`; nullopt = model default.
  std::optional<bool> thinking;
  // `reasoning_effort` as sent ("" = absent). "none" means thinking off.
  std::string reasoning_effort;
  bool logprobs = false;
  int top_logprobs = 0;  // [0, 20]; requires logprobs
  // false: at most one tool call (tool_choice required: the grammar allows one; auto: the output
  // ends with the first call, the engine stops there).
  bool parallel_tool_calls = true;
  // vLLM's `thinking_token_budget` extension: `</think>` forced after this many reasoning tokens.
  std::optional<int64_t> thinking_token_budget;
  // vLLM's `cache_salt` ("" = none): prefix-cache isolation (codec_util::ReadCacheSalt).
  std::string cache_salt;
  // The `traffic_class` extension field (nullopt = absent; codec_util::ReadTrafficClass).
  std::optional<kv::TrafficClass> traffic_class;
  // vLLM's `return_token_ids`: the response carries `prompt_token_ids` (top level) and
  // `token_ids` (each choice; in streams, each chunk's new ids).
  bool return_token_ids = false;
  SamplingFields sampling;
};

// POST /v1/completions.
struct CompletionRequest {
  std::string model;
  // Exactly one of: prompt text, or prompt token ids.
  bool prompt_is_ids = false;
  std::string prompt_text;
  std::vector<int32_t> prompt_ids;
  bool echo = false;
  std::optional<int> logprobs;  // [0, 20]
  // vLLM extension: log-probabilities of the prompt tokens with K alternatives ([0, 20]),
  // returned per choice as "prompt_logprobs": [null, {"<id>": {"logprob", "rank",
  // "decoded_token"}, ...}, ...].
  std::optional<int> prompt_logprobs;
  // vLLM's `cache_salt` ("" = none): prefix-cache isolation (codec_util::ReadCacheSalt).
  std::string cache_salt;
  // The `traffic_class` extension field (nullopt = absent; codec_util::ReadTrafficClass).
  std::optional<kv::TrafficClass> traffic_class;
  // vLLM's `return_token_ids`: each choice carries `prompt_token_ids` and `token_ids` (vLLM puts
  // both on the choice for completions, since a completions request may batch prompts).
  bool return_token_ids = false;
  // The `speculative` extension field (default true): false runs this request without drafts
  // when the server speculates (engine::GenerateRequest::speculative); outputs are the same.
  bool speculative = true;
  SamplingFields sampling;
};

// Parsing. `body` is the raw request body. Errors name the parameter (WithParam). Beyond type
// checks, the 400s OpenAI gives are reproduced (docs/protocol.md "Request validation beyond the
// spec"): content part types per role, stream_options without stream, best_of with stream or
// below n, tool names outside ^[a-zA-Z0-9_-]{1,64}$, unknown reasoning_effort values.
absl::StatusOr<ChatCompletionRequest> ParseChatCompletionRequest(std::string_view body);
absl::StatusOr<CompletionRequest> ParseCompletionRequest(std::string_view body);

// --- Responses -------------------------------------------------------------------------------

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
  int64_t reasoning_tokens = 0;
};
// {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details":
// {"cached_tokens"}, "completion_tokens_details": {"reasoning_tokens"}} plus DeepSeek's
// prompt_cache_hit_tokens / prompt_cache_miss_tokens (their sum is prompt_tokens).
nlohmann::ordered_json UsageJson(const Usage& usage);

// One token's logprob entry for Chat Completions:
// {"token", "logprob", "bytes": [...], "top_logprobs": [{"token", "logprob", "bytes"}]}.
// `token_bytes` is the token's raw output bytes (may be an incomplete UTF-8 sequence; the
// "token" string then carries U+FFFD, "bytes" the exact bytes).
struct TokenLogprobText {
  std::string bytes;
  double logprob = 0.0;
  std::vector<std::pair<std::string, double>> top;  // (bytes, logprob), most likely first
};
nlohmann::ordered_json ChatLogprobEntry(const TokenLogprobText& t, bool with_top);

// Completions logprobs object {"tokens", "token_logprobs", "top_logprobs", "text_offset"}.
// Entries with `has_logprob == false` (the first echoed prompt token) render null.
struct CompletionLogprobs {
  std::vector<std::string> tokens;
  std::vector<std::optional<double>> token_logprobs;
  std::vector<std::optional<std::vector<std::pair<std::string, double>>>> top_logprobs;
  std::vector<int64_t> text_offset;
};
nlohmann::ordered_json CompletionLogprobsJson(const CompletionLogprobs& lp);

// A complete assistant message of a non-streaming chat choice.
struct ChatToolCallOut {
  std::string id;
  std::string name;
  std::string arguments;
};
struct ChatChoiceOut {
  int index = 0;
  std::optional<std::string> content;            // null when absent (e.g. only tool calls)
  std::optional<std::string> reasoning_content;  // omitted when nullopt
  std::vector<ChatToolCallOut> tool_calls;
  std::string finish_reason;                       // "stop", "length", "tool_calls"
  std::optional<nlohmann::ordered_json> logprobs;  // {"content": [...]} or null
  std::optional<std::vector<int32_t>> token_ids;   // return_token_ids: the generated ids
};

// The object skeletons. `created` is Unix seconds. `prompt_token_ids` (return_token_ids) adds
// the top-level "prompt_token_ids" field, as vLLM does.
nlohmann::ordered_json ChatCompletionJson(
    const std::string& id, int64_t created, const std::string& model,
    const std::vector<ChatChoiceOut>& choices, const Usage& usage,
    const std::optional<std::vector<int32_t>>& prompt_token_ids = std::nullopt);
// One chat.completion.chunk with a single choice; `delta` is the delta object.
// `finish_reason` empty = null. `usage_null` adds "usage": null (stream_options.include_usage).
nlohmann::ordered_json ChatChunkJson(const std::string& id, int64_t created,
                                     const std::string& model, int index,
                                     nlohmann::ordered_json delta, const std::string& finish_reason,
                                     std::optional<nlohmann::ordered_json> logprobs,
                                     bool usage_null);
// Chat finish_reason for a parser finish reason: "length", "tool_calls", else "stop" (EOS, stop
// string, cancelled; a malformed tool call is logged by the server and reported as "stop").
std::string ChatFinishReason(protocol::FinishReason reason);

// The `delta` of the chat.completion.chunk for one (coalesced) output event, or nullopt for an
// event that has none (kToolCallEnd). kReasoningDelta -> {"reasoning_content"}, kContentDelta ->
// {"content"}, kToolCallStart -> {"tool_calls": [{index, id, type, function: {name, arguments:
// ""}}]}, kToolCallArguments -> {"tool_calls": [{index, function: {arguments}}]}, kFinish -> {}
// (the chunk that carries finish_reason).
std::optional<nlohmann::ordered_json> ChatDeltaForEvent(const protocol::OutputEvent& event);

// The non-streaming choice for a whole event sequence: the message the streamed deltas
// (ChatDeltaForEvent) concatenate to, so `stream` never changes the answer. Tool calls: the
// valid ones; when the output was cut off by max_tokens (finish "length") every announced call,
// the partial one included with its truncated `arguments` string, since the stream has already
// sent its id and name (OpenAI does the same: finish_reason "length" tells the client not to run
// it). Calls broken for other reasons (finish "stop" after a tool-call error) are left out.
// `with_reasoning`: set reasoning_content (thinking mode).
ChatChoiceOut ChatChoiceFromEvents(std::span<const protocol::OutputEvent> events,
                                   bool with_reasoning);

// The final usage chunk: "choices": [] and "usage": {...}.
nlohmann::ordered_json ChatUsageChunkJson(const std::string& id, int64_t created,
                                          const std::string& model, const Usage& usage);

struct CompletionChoiceOut {
  int index = 0;
  std::string text;
  std::string finish_reason;  // "" = null (stream chunks before the end)
  std::optional<nlohmann::ordered_json> logprobs;
  std::optional<nlohmann::ordered_json> prompt_logprobs;  // vLLM extension, when requested
  // return_token_ids (vLLM): the prompt's ids and the generated ids.
  std::optional<std::vector<int32_t>> prompt_token_ids;
  std::optional<std::vector<int32_t>> token_ids;
};
nlohmann::ordered_json CompletionJson(const std::string& id, int64_t created,
                                      const std::string& model,
                                      const std::vector<CompletionChoiceOut>& choices,
                                      const std::optional<Usage>& usage);

// "data: <json>\n\n" (JSON dumped compactly; invalid UTF-8 replaced, never thrown).
std::string SseEvent(const nlohmann::ordered_json& j);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";
// Compact dump that never throws (invalid UTF-8 becomes U+FFFD).
std::string DumpJson(const nlohmann::ordered_json& j);

}  // namespace deepinfer::api

#endif  // DEEPINFER_API_OPENAI_CODEC_H_
