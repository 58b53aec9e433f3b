// Conversation model helpers and typed validation errors (see conversation.h).
#include "protocol/conversation.h"

#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "common/strings.h"

namespace deepinfer::protocol {

namespace {
constexpr char kErrorKindPayload[] = "deepinfer.protocol/error_kind";
constexpr char kErrorParamPayload[] = "deepinfer.protocol/error_param";

constexpr ProtocolError kAllErrors[] = {
    ProtocolError::kEmptyMessages,
    ProtocolError::kInvalidRole,
    ProtocolError::kInvalidContent,
    ProtocolError::kInvalidToolArguments,
    ProtocolError::kInvalidTool,
    ProtocolError::kInvalidToolChoice,
    ProtocolError::kMissingReasoningContent,
    ProtocolError::kToolMessageWithoutCall,
    ProtocolError::kInvalidReasoningEffort,
    ProtocolError::kImagePlaceholderInText,
    ProtocolError::kUnsupportedContent,
    ProtocolError::kInvalidPrefix,
};
}  // namespace

std::string_view RoleName(Role role) {
  switch (role) {
    case Role::kSystem:
      return "system";
    case Role::kDeveloper:
      return "developer";
    case Role::kUser:
      return "user";
    case Role::kAssistant:
      return "assistant";
    case Role::kTool:
      return "tool";
    case Role::kLatestReminder:
      return "latest_reminder";
  }
  return "unknown";
}

absl::StatusOr<Role> ParseRole(std::string_view name) {
  for (Role r : {Role::kSystem, Role::kDeveloper, Role::kUser, Role::kAssistant, Role::kTool,
                 Role::kLatestReminder}) {
    if (RoleName(r) == name) return r;
  }
  return MakeProtocolError(
      ProtocolError::kInvalidRole, "role",
      absl::StrCat("Invalid role '", AbslView(name),
                   "': expected one of system, developer, user, assistant, tool, "
                   "latest_reminder"));
}

ContentPart ContentPart::Text(std::string t) {
  ContentPart p;
  p.kind = Kind::kText;
  p.text = std::move(t);
  return p;
}

ContentPart ContentPart::Image(std::string url) {
  ContentPart p;
  p.kind = Kind::kImage;
  p.image_url = std::move(url);
  return p;
}

ContentPart ContentPart::Other(std::string type_name) {
  ContentPart p;
  p.kind = Kind::kOther;
  p.text = std::move(type_name);
  return p;
}

ContentPart ContentPart::ToolResult(std::string tool_use_id, std::vector<ContentPart> content) {
  ContentPart p;
  p.kind = Kind::kToolResult;
  p.tool_use_id = std::move(tool_use_id);
  p.content = std::move(content);
  return p;
}

absl::StatusOr<PyJson> ParseToolArguments(std::string_view arguments_json) {
  absl::StatusOr<PyJson> v = PyJson::Parse(arguments_json);
  if (!v.ok() || !v->is_object()) {
    return MakeProtocolError(ProtocolError::kInvalidToolArguments, "function.arguments",
                             kMsgToolArgumentsNotObject);
  }
  return v;
}

namespace {
Message TextMessage(Role role, std::string text) {
  Message m;
  m.role = role;
  m.content.push_back(ContentPart::Text(std::move(text)));
  return m;
}
}  // namespace

Message Message::System(std::string text) { return TextMessage(Role::kSystem, std::move(text)); }
Message Message::Developer(std::string text) {
  return TextMessage(Role::kDeveloper, std::move(text));
}
Message Message::User(std::string text) { return TextMessage(Role::kUser, std::move(text)); }
Message Message::LatestReminder(std::string text) {
  return TextMessage(Role::kLatestReminder, std::move(text));
}

Message Message::Assistant(std::string content, std::optional<std::string> reasoning,
                           std::vector<ToolCall> tool_calls) {
  Message m = TextMessage(Role::kAssistant, std::move(content));
  m.reasoning_content = std::move(reasoning);
  m.tool_calls = std::move(tool_calls);
  return m;
}

Message Message::Tool(std::string tool_call_id, std::string text) {
  Message m = TextMessage(Role::kTool, std::move(text));
  m.tool_call_id = std::move(tool_call_id);
  return m;
}

std::string Message::JoinedText() const {
  std::string out;
  bool first = true;
  for (const ContentPart& p : content) {
    if (p.kind != ContentPart::Kind::kText) continue;
    if (!first) out.append("\n\n");
    out.append(p.text);
    first = false;
  }
  return out;
}

std::string_view ProtocolErrorName(ProtocolError kind) {
  switch (kind) {
    case ProtocolError::kEmptyMessages:
      return "empty_messages";
    case ProtocolError::kInvalidRole:
      return "invalid_role";
    case ProtocolError::kInvalidContent:
      return "invalid_content";
    case ProtocolError::kInvalidToolArguments:
      return "invalid_tool_arguments";
    case ProtocolError::kInvalidTool:
      return "invalid_tool";
    case ProtocolError::kInvalidToolChoice:
      return "invalid_tool_choice";
    case ProtocolError::kMissingReasoningContent:
      return "missing_reasoning_content";
    case ProtocolError::kToolMessageWithoutCall:
      return "tool_message_without_call";
    case ProtocolError::kInvalidReasoningEffort:
      return "invalid_reasoning_effort";
    case ProtocolError::kImagePlaceholderInText:
      return "image_placeholder_in_text";
    case ProtocolError::kUnsupportedContent:
      return "unsupported_content";
    case ProtocolError::kInvalidPrefix:
      return "invalid_prefix";
  }
  return "unknown";
}

absl::Status MakeProtocolError(ProtocolError kind, std::string_view param,
                               std::string_view message) {
  absl::Status st = absl::InvalidArgumentError(AbslView(message));
  st.SetPayload(kErrorKindPayload, absl::Cord(AbslView(ProtocolErrorName(kind))));
  st.SetPayload(kErrorParamPayload, absl::Cord(AbslView(param)));
  return st;
}

std::optional<ProtocolErrorInfo> GetProtocolError(const absl::Status& status) {
  absl::optional<absl::Cord> kind = status.GetPayload(kErrorKindPayload);
  if (!kind.has_value()) return std::nullopt;
  const std::string name(*kind);
  for (ProtocolError k : kAllErrors) {
    if (ProtocolErrorName(k) == name) {
      ProtocolErrorInfo info{k, {}};
      if (absl::optional<absl::Cord> p = status.GetPayload(kErrorParamPayload)) {
        info.param = std::string(*p);
      }
      return info;
    }
  }
  return std::nullopt;
}

}  // namespace deepinfer::protocol
