// The one conversation model shared by the three client APIs (Chat Completions, Responses,
// Anthropic Messages) and the DeepSeek prompt encoder (DEEPINFER-DESIGN.md §13,
// shared/spec/protocol.md §1, §3).
//
// Codecs in the API layer translate each wire format into a Conversation:
//   * Chat Completions: messages[] map 1:1 (system, developer, user, assistant with content /
//     reasoning_content / tool_calls, tool with tool_call_id, latest_reminder); content arrays map
//     to ContentPart (text, image_url -> kImage, anything else -> kOther with its type name).
//   * Responses: `instructions` -> leading system message; input items: message -> message,
//     reasoning -> reasoning_content of the next/current assistant message, function_call ->
//     ToolCall on an assistant message (consecutive calls share one message),
//     function_call_output -> tool message (call_id -> tool_call_id).
//   * Messages: `system` -> system message; user content blocks text / image / tool_result map to
//     ContentPart (tool_result keeps tool_use_id, is_error and its nested content); assistant
//     blocks thinking -> reasoning_content, text -> content, tool_use -> ToolCall (input object).
//     A trailing assistant message is a prefill: it is rendered without EOS (see prefix).
// Tools are a flat list (name, description, parameters); tool_choice, response_format are
// request-level. Thinking on/off and reasoning effort are encoder options (prompt_encoder.h).
//
// JSON-valued fields (tool parameters, tool-call arguments, response_format) are PyJson so that
// they are re-serialised byte-exactly like Python (py_json.h). Parse requests with
// nlohmann::ordered_json (or hand the raw text to PyJson::Parse) so that key order survives.
//
// Errors: every validation failure is an absl::Status with code InvalidArgument whose message is
// the text the API returns (the official API's wording where one is known), tagged with a
// ProtocolError kind and the offending parameter path (GetProtocolError()).
#ifndef DEEPINFER_PROTOCOL_CONVERSATION_H_
#define DEEPINFER_PROTOCOL_CONVERSATION_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "protocol/py_json.h"

namespace deepinfer::protocol {

enum class Role { kSystem, kDeveloper, kUser, kAssistant, kTool, kLatestReminder };

// "system", "developer", "user", "assistant", "tool", "latest_reminder".
std::string_view RoleName(Role role);
// Inverse of RoleName. Error: InvalidArgument (kInvalidRole) naming the role.
absl::StatusOr<Role> ParseRole(std::string_view name);

// One block of message content.
struct ContentPart {
  enum class Kind {
    kText,        // `text`
    kImage,       // an image (V4.1 renders the <｜deepseek_image｜> placeholder; V4 rejects it)
    kToolResult,  // a tool result inside a user message (Anthropic tool_result); see below
    kOther,       // any other block type: rendered "[Unsupported <type>]" as the reference does
  };
  Kind kind = Kind::kText;
  std::string text;         // kText: the text; kOther: the block's type name
  std::string image_url;    // kImage: URL or data URI (not rendered, carried for the engine)
  std::string tool_use_id;  // kToolResult: id of the tool call it answers
  bool is_error = false;    // kToolResult: Anthropic is_error (not rendered by DeepSeek)
  std::vector<ContentPart> content;  // kToolResult: its content (text / image / other parts)

  static ContentPart Text(std::string t);
  static ContentPart Image(std::string url);
  static ContentPart Other(std::string type_name);
  static ContentPart ToolResult(std::string tool_use_id, std::vector<ContentPart> content);
};

// A historical tool call (assistant turn). The model never sees ids; they only order results.
struct ToolCall {
  std::string id;
  std::string name;
  // Always a JSON object (validated). String-typed values are rendered raw with string="true",
  // everything else with json.dumps and string="false" (spec §1.7). Build it from the wire with
  // ParseToolArguments().
  PyJson arguments = PyJson::Object();
};

// Parses Chat/Responses `arguments` text (a JSON object serialised as a string). Errors:
// InvalidArgument (kInvalidToolArguments) "Assistant tool call function.arguments must be a JSON
// object." when the text is not valid JSON or not an object — never the reference's
// {"arguments": raw} wrapper (spec §5 case 4, SGLang #38450).
absl::StatusOr<PyJson> ParseToolArguments(std::string_view arguments_json);

struct Message {
  Role role = Role::kUser;
  // Text / image / other / tool_result parts. Text parts of one message are joined by "\n\n".
  // kTool messages carry their result content here.
  std::vector<ContentPart> content;
  // Assistant only: nullopt = field absent (matters for the thinking-mode tool-call rule).
  std::optional<std::string> reasoning_content;
  std::vector<ToolCall> tool_calls;  // assistant only
  std::string tool_call_id;          // tool only
  // Assistant only: render as an unfinished prefix (no EOS) that the model continues (DeepSeek
  // `prefix: true`, Anthropic prefill). Only allowed on the last message.
  bool prefix = false;
  // Where this message came from in the request, for error params: e.g. "input[2]" (Responses
  // items) or "instructions". Empty: "messages[<index>]" (Chat Completions and Messages).
  std::string request_path;

  static Message System(std::string text);
  static Message Developer(std::string text);
  static Message User(std::string text);
  static Message Assistant(std::string content, std::optional<std::string> reasoning = {},
                           std::vector<ToolCall> tool_calls = {});
  static Message Tool(std::string tool_call_id, std::string text);
  static Message LatestReminder(std::string text);

  // Text parts joined by "\n\n" (non-text parts skipped).
  std::string JoinedText() const;
};

// A function tool offered to the model. Rendered as json.dumps({"name", "description",
// "parameters"}) in this key order (the recipe's normalised object, spec §1.7).
struct ToolDefinition {
  std::string name;
  std::string description;               // "" when the client gave none
  PyJson parameters = PyJson::Object();  // JSON schema object; {} when absent
};

struct ToolChoice {
  enum class Mode { kAuto, kNone, kRequired, kNamed };
  Mode mode = Mode::kAuto;
  std::string name;  // kNamed: the function name

  static ToolChoice Auto() { return {}; }
  static ToolChoice None() { return {Mode::kNone, {}}; }
  static ToolChoice Required() { return {Mode::kRequired, {}}; }
  static ToolChoice Named(std::string n) { return {Mode::kNamed, std::move(n)}; }
};

// response_format: rendered as "## Response Format:\n\nYou MUST strictly adhere to the following
// schema to reply:\n" + json.dumps(format). `format` is the wire object as given (Chat:
// {"type": "json_object"} or {"type": "json_schema", "json_schema": {...}}); codecs of other APIs
// build the Chat-shaped object. {"type": "text"} means no response format (leave it nullopt).
struct ResponseFormat {
  PyJson format = PyJson::Object();
};

struct Conversation {
  std::vector<Message> messages;
  std::vector<ToolDefinition> tools;
  ToolChoice tool_choice;
  std::optional<ResponseFormat> response_format;
};

// Kinds of validation errors (all InvalidArgument; the API layer maps them to 400s).
enum class ProtocolError {
  kEmptyMessages,            // messages is empty
  kInvalidRole,              // unknown role / role in a wrong place
  kInvalidContent,           // content not allowed for the role (e.g. empty developer)
  kInvalidToolArguments,     // tool-call arguments not a JSON object
  kInvalidTool,              // tool without a name, duplicate tool name, schema too deep
  kInvalidToolChoice,        // named tool not declared, required/named without tools
  kMissingReasoningContent,  // thinking + tool-calling turn without reasoning_content
  kToolMessageWithoutCall,   // tool message not preceded by an assistant tool call
  kInvalidReasoningEffort,   // effort not accepted by the model family
  kImagePlaceholderInText,   // V4.1: literal <｜deepseek_image｜> in text
  kUnsupportedContent,       // e.g. images for V4
  kInvalidPrefix,            // prefix assistant message not last / with tool calls
};

std::string_view ProtocolErrorName(ProtocolError kind);

// Builds the tagged InvalidArgument status. `param` is a path like "messages[3].tool_calls[0]"
// (may be empty).
absl::Status MakeProtocolError(ProtocolError kind, std::string_view param,
                               std::string_view message);

struct ProtocolErrorInfo {
  ProtocolError kind;
  std::string param;
};
// The tag of a status produced by MakeProtocolError(); nullopt for any other status.
std::optional<ProtocolErrorInfo> GetProtocolError(const absl::Status& status);

// Official error texts (DeepSeek API; spec §1.6, §5 case 20). DeepSeek's API also rejects
// tool_choice required / named in thinking mode ("Thinking mode does not support this
// tool_choice"); deepinfer accepts it (issue #22: the model reasons, then the grammar forces the
// call after `</think>`; docs/protocol.md), so that error does not exist here.
inline constexpr std::string_view kMsgMissingReasoningContent =
    "The `reasoning_content` in the thinking mode must be passed back to the API.";
inline constexpr std::string_view kMsgToolArgumentsNotObject =
    "Assistant tool call function.arguments must be a JSON object.";

}  // namespace deepinfer::protocol

#endif  // DEEPINFER_PROTOCOL_CONVERSATION_H_
