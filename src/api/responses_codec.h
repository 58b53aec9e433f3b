// OpenAI Responses API codec (POST /v1/responses; shared/spec/protocol.md §3.2, §3.4) over the
// one conversation model and output event stream (DEEPINFER-DESIGN.md §13): no second template
// or parser.
//
// Request side: `input` (string or items: message, reasoning, function_call,
// function_call_output), `instructions`, function `tools`, `tool_choice`, `reasoning.effort`
// ("none" = thinking off), `max_output_tokens`, `temperature`, `top_p`, `text.format` ->
// protocol::Conversation + SamplingFields. Stateless: `previous_response_id` is a 400.
//
// Response side: ResponsesEncoder turns protocol::OutputEvents into the Responses SSE event
// sequence, and its Response() is the non-streaming object; `response.completed` carries exactly
// Response(), so streamed and non-streamed results of the same output are equal by construction.
// Errors use OpenAI's shape (api/errors.h: OpenAiErrorJson), with `param` set.
// Thread-safety: pure functions; one encoder per response, used from one thread.
#ifndef DEEPINFER_API_RESPONSES_CODEC_H_
#define DEEPINFER_API_RESPONSES_CODEC_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "api/openai_codec.h"
#include "nlohmann/json.hpp"
#include "protocol/conversation.h"
#include "protocol/output_parser.h"

namespace deepinfer::api {

// POST /v1/responses, validated.
struct ResponsesRequest {
  std::string model;  // "" when absent
  protocol::Conversation conversation;
  // false when reasoning.effort is "none"; nullopt = model default.
  std::optional<bool> thinking;
  std::string reasoning_effort;  // reasoning.effort as sent ("" = absent; never "none")
  // temperature, top_p, max_tokens (= max_output_tokens), stream, and the extension fields
  // `seed`, `min_tokens`, `stop_token_ids` (not in OpenAI's Responses API; docs/protocol.md,
  // "Extension fields"); other fields stay default.
  SamplingFields sampling;
  // vLLM's `thinking_token_budget` extension: `</think>` forced after this many reasoning tokens.
  std::optional<int64_t> thinking_token_budget;
  // Echoed in the response object.
  std::string instructions;
  bool parallel_tool_calls = true;
  // vLLM's `cache_salt` extension ("" = none): prefix-cache isolation (codec_util::ReadCacheSalt).
  std::string cache_salt;
  // The `traffic_class` extension field (nullopt = absent; codec_util::ReadTrafficClass).
  std::optional<kv::TrafficClass> traffic_class;
  nlohmann::ordered_json tools_json = nlohmann::ordered_json::array();
  nlohmann::ordered_json tool_choice_json = "auto";
  nlohmann::ordered_json text_format_json = {{"type", "text"}};  // text.format as sent
};

// Parses and validates a request body. Errors: InvalidArgument with WithParam() naming the
// field (e.g. "input[2].role", "tool_choice.name", "previous_response_id").
absl::StatusOr<ResponsesRequest> ParseResponsesRequest(std::string_view body);

// Identity of one response. Item ids are derived from `id` and the output index
// ("rs_"/"msg_"/"fc_" + id without its "resp_" prefix + "_" + index) so they are deterministic.
struct ResponseMeta {
  std::string id;          // "resp_..."
  int64_t created_at = 0;  // Unix seconds
  std::string model;
  const ResponsesRequest* request = nullptr;  // echoed fields; may be null
};

// Usage object {input_tokens, input_tokens_details{cached_tokens}, output_tokens,
// output_tokens_details{reasoning_tokens}, total_tokens}.
nlohmann::ordered_json ResponsesUsageJson(const Usage& usage);

// protocol::OutputEvent stream -> Responses events. Call Start() once, OnEvent() for every
// event (kFinish included), then Complete() once after kFinish. Each returned JSON is one event
// payload with `type` and `sequence_number`; render with ResponsesSseEvent().
//
// Items: reasoning -> {type:"reasoning", content:[{type:"reasoning_text"}]} streamed with
// response.reasoning_text.*; answer text -> message with one output_text part; each tool call
// -> function_call {id, call_id (the parser's tool_call_id), name, arguments}. A change of kind
// closes the open item. Finish reasons: stop / stop_sequence / tool_calls -> response.completed;
// length -> response.incomplete (max_output_tokens); tool-call error and cancel ->
// response.failed (error.code "server_error").
class ResponsesEncoder {
 public:
  explicit ResponsesEncoder(ResponseMeta meta);

  std::vector<nlohmann::ordered_json> Start();
  std::vector<nlohmann::ordered_json> OnEvent(const protocol::OutputEvent& event);
  std::vector<nlohmann::ordered_json> Complete(const Usage& usage);
  // Ends the response as failed (an engine error or a server shutdown mid-generation, instead of
  // Complete()): the open item, if any, is closed with status "incomplete" (its *.done events are
  // emitted, so clients that track items see it end), then `response.failed` with
  // error {code: "server_error", message} and the output so far.
  std::vector<nlohmann::ordered_json> Fail(const Usage& usage, std::string_view message);

  // The response object as of now (status "in_progress" until Complete()). After Complete() it
  // is the non-streaming body and equals the terminal event's `response`.
  nlohmann::ordered_json Response() const;

 private:
  enum class Open { kNone, kReasoning, kMessage, kFunctionCall };
  nlohmann::ordered_json Event(const char* type, nlohmann::ordered_json fields);
  // Emits the open item's *.done events and moves it to output_ with `status` (a function call
  // already marked by its end event keeps that status).
  void CloseOpen(std::vector<nlohmann::ordered_json>* out, const char* status = "completed");
  void OpenItem(Open kind, const protocol::OutputEvent* start,
                std::vector<nlohmann::ordered_json>* out);
  std::string ItemId(const char* prefix, size_t index) const;

  ResponseMeta meta_;
  int64_t sequence_ = 0;
  std::vector<nlohmann::ordered_json> output_;  // finished items
  Open open_ = Open::kNone;
  nlohmann::ordered_json open_item_;  // the item being streamed
  std::string open_text_;             // its text / arguments so far
  int open_tool_index_ = -1;
  bool finished_ = false;
  protocol::FinishReason finish_reason_ = protocol::FinishReason::kStop;
  std::string error_;
  std::string status_ = "in_progress";
  std::optional<Usage> usage_;
};

}  // namespace deepinfer::api

#endif  // DEEPINFER_API_RESPONSES_CODEC_H_
