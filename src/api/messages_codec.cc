#include "api/messages_codec.h"

#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "api/codec_util.h"
#include "api/errors.h"
#include "api/json_body.h"
#include "common/status.h"
#include "common/strings.h"
#include "protocol/py_json.h"

namespace deepinfer::api {
namespace {

using codec_util::Field;
using Json = nlohmann::ordered_json;

// `input` of a tool_use block whose arguments text is not a complete JSON object (the output was
// cut off by max_tokens inside the call): the top-level members whose value was completely
// generated — a string, object or array whose closer was seen, a fully spelled true / false /
// null, or any value followed by `,` — and never a half-written value that could pass for a whole
// one (a number at the very end may still be growing). For flat objects this is what the
// Anthropic SDK's stream helper partial-parses from the same partial_json. Messages' `input` must
// be an object, so this is as close as the non-streaming body can get to the streamed partial_json
// (docs/protocol.md, "Truncated tool calls").
Json CompleteMembers(std::string_view text) {
  size_t complete_end = 0;  // the members in text[0, complete_end) are complete
  int depth = 0;
  bool in_string = false;
  bool escape = false;
  bool in_value = false;   // at depth 1: after `:` (a value), else before it (a key)
  size_t value_start = 0;  // at depth 1 with in_value: where the value's text begins
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escape) {
        escape = false;
      } else if (c == '\\') {
        escape = true;
      } else if (c == '"') {
        in_string = false;
        if (depth == 1 && in_value) complete_end = i + 1;
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        break;
      case '{':
      case '[':
        ++depth;
        break;
      case '}':
      case ']':
        --depth;
        if (depth == 1) complete_end = i + 1;
        if (depth <= 0) return Json::object();  // cannot happen for an unparsable text
        break;
      case ':':
        if (depth == 1) {
          in_value = true;
          value_start = i + 1;
        }
        break;
      case ',':
        if (depth == 1) {
          complete_end = i;
          in_value = false;
        }
        break;
      default:
        break;
    }
  }
  if (depth == 1 && !in_string && in_value && value_start > complete_end) {
    const absl::string_view tail = absl::StripAsciiWhitespace(AbslView(text.substr(value_start)));
    if (tail == "true" || tail == "false" || tail == "null") complete_end = text.size();
  }
  if (complete_end == 0) return Json::object();
  std::string prefix(text.substr(0, complete_end));
  prefix += '}';
  Json input = Json::parse(prefix, nullptr, /*allow_exceptions=*/false);
  return input.is_object() ? input : Json::object();
}

// Anthropic-style error: the message starts with the field path.
absl::Status Bad(std::string_view param, std::string_view message) {
  return WithParam(absl::InvalidArgumentError(
                       param.empty() ? std::string(message)
                                     : absl::StrCat(AbslView(param), ": ", AbslView(message))),
                   param);
}

absl::Status Tagged(protocol::ProtocolError kind, std::string_view param,
                    std::string_view message) {
  return protocol::MakeProtocolError(kind, param,
                                     absl::StrCat(AbslView(param), ": ", AbslView(message)));
}

absl::Status NeedString(const Json* f, std::string_view path) {
  if (!f) return Bad(path, "Field required");
  if (!f->is_string()) return Bad(path, "Input should be a valid string");
  return absl::OkStatus();
}

// tool_result content: a string or text/image blocks.
absl::Status ParseToolResultContent(const Json* content, const std::string& path,
                                    std::vector<protocol::ContentPart>* out) {
  if (!content) return absl::OkStatus();
  if (content->is_string()) {
    out->push_back(protocol::ContentPart::Text(content->get<std::string>()));
    return absl::OkStatus();
  }
  if (!content->is_array()) return Bad(path, "Input should be a valid string or list of blocks");
  for (size_t i = 0; i < content->size(); ++i) {
    const Json& b = (*content)[i];
    const std::string bpath = absl::StrCat(path, ".", i);
    if (!b.is_object()) return Bad(bpath, "Input should be an object");
    const Json* type = Field(b, "type");
    RETURN_IF_ERROR(NeedString(type, bpath + ".type"));
    if (*type == "text") {
      const Json* text = Field(b, "text");
      RETURN_IF_ERROR(NeedString(text, bpath + ".text"));
      out->push_back(protocol::ContentPart::Text(text->get<std::string>()));
    } else if (*type == "image") {
      out->push_back(protocol::ContentPart::Image(""));
    } else {
      out->push_back(protocol::ContentPart::Other(type->get<std::string>()));
    }
  }
  return absl::OkStatus();
}

std::string ImageUrl(const Json& block) {
  const Json* src = Field(block, "source");
  if (!src || !src->is_object()) return "";
  const Json* type = Field(*src, "type");
  if (type && *type == "url") {
    if (const Json* u = Field(*src, "url"); u && u->is_string()) return u->get<std::string>();
  }
  if (type && *type == "base64") {
    const Json* mt = Field(*src, "media_type");
    const Json* data = Field(*src, "data");
    if (mt && mt->is_string() && data && data->is_string()) {
      return absl::StrCat("data:", mt->get<std::string>(), ";base64,", data->get<std::string>());
    }
  }
  return "";
}

absl::StatusOr<protocol::Message> ParseMessage(const Json& m, size_t index,
                                               const protocol::Message* previous) {
  const std::string path = absl::StrCat("messages.", index);
  if (!m.is_object()) return Bad(path, "Input should be an object");
  const Json* role = Field(m, "role");
  RETURN_IF_ERROR(NeedString(role, path + ".role"));
  protocol::Message msg;
  if (*role == "user") {
    msg.role = protocol::Role::kUser;
  } else if (*role == "assistant") {
    msg.role = protocol::Role::kAssistant;
  } else {
    return Tagged(protocol::ProtocolError::kInvalidRole, path + ".role",
                  "Input should be 'user' or 'assistant'");
  }
  const Json* content = Field(m, "content");
  if (!content) return Bad(path + ".content", "Field required");
  if (content->is_string()) {
    msg.content.push_back(protocol::ContentPart::Text(content->get<std::string>()));
    return msg;
  }
  if (!content->is_array()) return Bad(path + ".content", "Input should be a valid list");
  std::set<std::string> previous_ids;
  if (previous && previous->role == protocol::Role::kAssistant) {
    for (const protocol::ToolCall& c : previous->tool_calls) previous_ids.insert(c.id);
  }
  for (size_t i = 0; i < content->size(); ++i) {
    const Json& b = (*content)[i];
    const std::string bpath = absl::StrCat(path, ".content.", i);
    if (!b.is_object()) return Bad(bpath, "Input should be an object");
    const Json* type = Field(b, "type");
    RETURN_IF_ERROR(NeedString(type, bpath + ".type"));
    const std::string& t = type->get_ref<const std::string&>();
    if (t == "text") {
      const Json* text = Field(b, "text");
      RETURN_IF_ERROR(NeedString(text, bpath + ".text"));
      msg.content.push_back(protocol::ContentPart::Text(text->get<std::string>()));
    } else if (t == "image" && msg.role == protocol::Role::kUser) {
      msg.content.push_back(protocol::ContentPart::Image(ImageUrl(b)));
    } else if (t == "tool_result" && msg.role == protocol::Role::kUser) {
      const Json* id = Field(b, "tool_use_id");
      RETURN_IF_ERROR(NeedString(id, bpath + ".tool_use_id"));
      const std::string& tid = id->get_ref<const std::string&>();
      if (!previous_ids.count(tid)) {
        return Tagged(protocol::ProtocolError::kToolMessageWithoutCall, bpath,
                      absl::StrCat("unexpected `tool_use_id` found in `tool_result` blocks: ", tid,
                                   ". Each `tool_result` block must have a corresponding "
                                   "`tool_use` block in the previous message."));
      }
      std::vector<protocol::ContentPart> parts;
      RETURN_IF_ERROR(ParseToolResultContent(Field(b, "content"), bpath + ".content", &parts));
      protocol::ContentPart part = protocol::ContentPart::ToolResult(tid, std::move(parts));
      if (const Json* e = Field(b, "is_error")) {
        if (!e->is_boolean()) return Bad(bpath + ".is_error", "Input should be a valid boolean");
        part.is_error = e->get<bool>();
      }
      msg.content.push_back(std::move(part));
    } else if (t == "tool_use" && msg.role == protocol::Role::kAssistant) {
      const Json* id = Field(b, "id");
      RETURN_IF_ERROR(NeedString(id, bpath + ".id"));
      const Json* name = Field(b, "name");
      RETURN_IF_ERROR(NeedString(name, bpath + ".name"));
      const Json* input = Field(b, "input");
      if (!input || !input->is_object()) {
        return Bad(bpath + ".input", "Input should be a valid dictionary");
      }
      absl::StatusOr<protocol::PyJson> args = protocol::PyJson::FromNlohmann(*input);
      if (!args.ok()) return WithParam(args.status(), bpath + ".input");
      protocol::ToolCall call;
      call.id = id->get<std::string>();
      call.name = name->get<std::string>();
      call.arguments = *std::move(args);
      msg.tool_calls.push_back(std::move(call));
    } else if (t == "thinking" && msg.role == protocol::Role::kAssistant) {
      const Json* th = Field(b, "thinking");
      RETURN_IF_ERROR(NeedString(th, bpath + ".thinking"));
      msg.reasoning_content = msg.reasoning_content.value_or("") + th->get<std::string>();
    } else if (t == "redacted_thinking" && msg.role == protocol::Role::kAssistant) {
      // Opaque to us; nothing to render.
    } else {
      return Bad(bpath + ".type", absl::StrCat("block type '", t, "' is not allowed in a ",
                                               role->get<std::string>(), " message"));
    }
  }
  return msg;
}

absl::Status ParseSystem(const Json& obj, protocol::Conversation* conv) {
  const Json* sys = Field(obj, "system");
  if (!sys) return absl::OkStatus();
  if (sys->is_string()) {
    if (!sys->get<std::string>().empty()) {
      conv->messages.push_back(protocol::Message::System(sys->get<std::string>()));
    }
    return absl::OkStatus();
  }
  if (!sys->is_array()) return Bad("system", "Input should be a valid string or list of blocks");
  protocol::Message msg;
  msg.role = protocol::Role::kSystem;
  for (size_t i = 0; i < sys->size(); ++i) {
    const Json& b = (*sys)[i];
    const std::string path = absl::StrCat("system.", i);
    if (!b.is_object() || Field(b, "type") == nullptr || *Field(b, "type") != "text") {
      return Bad(path, "system blocks must be text blocks");
    }
    const Json* text = Field(b, "text");
    RETURN_IF_ERROR(NeedString(text, path + ".text"));
    msg.content.push_back(protocol::ContentPart::Text(text->get<std::string>()));
  }
  if (!msg.content.empty()) conv->messages.push_back(std::move(msg));
  return absl::OkStatus();
}

absl::Status ParseTools(const Json& obj, protocol::Conversation* conv) {
  if (const Json* tools = Field(obj, "tools")) {
    if (!tools->is_array()) return Bad("tools", "Input should be a valid list");
    for (size_t i = 0; i < tools->size(); ++i) {
      const Json& t = (*tools)[i];
      const std::string path = absl::StrCat("tools.", i);
      if (!t.is_object()) return Bad(path, "Input should be an object");
      if (const Json* type = Field(t, "type"); type && *type != "custom") {
        return Bad(path + ".type", "only custom (client) tools are supported");
      }
      protocol::ToolDefinition def;
      const Json* name = Field(t, "name");
      RETURN_IF_ERROR(NeedString(name, path + ".name"));
      def.name = name->get<std::string>();
      if (const Json* d = Field(t, "description")) {
        RETURN_IF_ERROR(NeedString(d, path + ".description"));
        def.description = d->get<std::string>();
      }
      const Json* schema = Field(t, "input_schema");
      if (!schema) return Bad(path + ".input_schema", "Field required");
      if (!schema->is_object()) return Bad(path + ".input_schema", "Input should be an object");
      absl::StatusOr<protocol::PyJson> pj = protocol::PyJson::FromNlohmann(*schema);
      if (!pj.ok()) return WithParam(pj.status(), path + ".input_schema");
      def.parameters = *std::move(pj);
      conv->tools.push_back(std::move(def));
    }
  }
  if (const Json* tc = Field(obj, "tool_choice")) {
    if (!tc->is_object()) return Bad("tool_choice", "Input should be an object");
    const Json* type = Field(*tc, "type");
    RETURN_IF_ERROR(NeedString(type, "tool_choice.type"));
    const std::string& t = type->get_ref<const std::string&>();
    if (t == "auto") {
      conv->tool_choice = protocol::ToolChoice::Auto();
    } else if (t == "none") {
      conv->tool_choice = protocol::ToolChoice::None();
    } else if (t == "any") {
      conv->tool_choice = protocol::ToolChoice::Required();
    } else if (t == "tool") {
      const Json* name = Field(*tc, "name");
      RETURN_IF_ERROR(NeedString(name, "tool_choice.name"));
      const std::string& n = name->get_ref<const std::string&>();
      bool declared = false;
      for (const protocol::ToolDefinition& d : conv->tools) declared = declared || d.name == n;
      if (!declared) {
        return Tagged(protocol::ProtocolError::kInvalidToolChoice, "tool_choice.name",
                      absl::StrCat("Tool '", n, "' not found in provided tools"));
      }
      conv->tool_choice = protocol::ToolChoice::Named(n);
    } else {
      return Bad("tool_choice.type", "Input should be 'auto', 'any', 'tool' or 'none'");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<MessagesRequest> ParseMessagesRequest(std::string_view body, bool count_tokens) {
  absl::StatusOr<Json> parsed = ParseJsonLinear(body);
  if (!parsed.ok() && !ErrorCode(parsed.status()).empty()) return parsed.status();
  if (!parsed.ok()) return Bad("", "The request body is not valid JSON.");
  if (!parsed->is_object()) return Bad("", "The request body must be a JSON object.");
  Json obj = *std::move(parsed);
  MessagesRequest req;
  const Json* model = Field(obj, "model");
  RETURN_IF_ERROR(NeedString(model, "model"));
  req.model = model->get<std::string>();
  if (!count_tokens) {
    const Json* mt = Field(obj, "max_tokens");
    if (!mt) return Bad("max_tokens", "Field required");
    if (!mt->is_number_integer() || mt->get<int64_t>() < 1) {
      return Bad("max_tokens", "Input should be a valid integer greater than or equal to 1");
    }
    req.sampling.max_tokens = mt->get<int64_t>();
  }
  RETURN_IF_ERROR(ParseSystem(obj, &req.conversation));
  const Json* messages = Field(obj, "messages");
  if (!messages) return Bad("messages", "Field required");
  if (!messages->is_array()) return Bad("messages", "Input should be a valid list");
  if (messages->empty()) {
    return Tagged(protocol::ProtocolError::kEmptyMessages, "messages",
                  "at least one message is required");
  }
  const protocol::Message* previous = nullptr;
  for (size_t i = 0; i < messages->size(); ++i) {
    ASSIGN_OR_RETURN(protocol::Message msg, ParseMessage((*messages)[i], i, previous));
    // tool_result blocks stay ContentPart::kToolResult parts of the user message
    // (conversation.h); the encoder orders them by the preceding calls.
    req.conversation.messages.push_back(std::move(msg));
    previous = &req.conversation.messages.back();
  }
  protocol::Message& last = req.conversation.messages.back();
  if (last.role == protocol::Role::kAssistant) {
    if (!last.tool_calls.empty()) {
      return Tagged(protocol::ProtocolError::kInvalidPrefix,
                    absl::StrCat("messages.", messages->size() - 1),
                    "the final assistant message (prefill) cannot contain tool_use blocks");
    }
    last.prefix = true;
  }
  RETURN_IF_ERROR(ParseTools(obj, &req.conversation));
  if (const Json* tc = Field(obj, "tool_choice"); tc != nullptr && tc->is_object()) {
    if (const Json* d = Field(*tc, "disable_parallel_tool_use")) {
      if (!d->is_boolean()) {
        return Bad("tool_choice.disable_parallel_tool_use", "Input should be a valid boolean");
      }
      req.parallel_tool_calls = !d->get<bool>();
    }
  }
  if (const Json* th = Field(obj, "thinking")) {
    if (!th->is_object()) return Bad("thinking", "Input should be an object");
    const Json* type = Field(*th, "type");
    RETURN_IF_ERROR(NeedString(type, "thinking.type"));
    if (*type == "enabled") {
      req.thinking = true;
      const Json* budget = Field(*th, "budget_tokens");
      if (!budget) return Bad("thinking.budget_tokens", "Field required");
      if (!budget->is_number_integer() || budget->get<int64_t>() < 1024) {
        return Bad("thinking.budget_tokens",
                   "Input should be a valid integer greater than or equal to 1024");
      }
      req.thinking_budget = budget->get<int64_t>();
      if (req.sampling.max_tokens && *req.thinking_budget >= *req.sampling.max_tokens) {
        return Bad("max_tokens", "`max_tokens` must be greater than `thinking.budget_tokens`");
      }
    } else if (*type == "disabled") {
      req.thinking = false;
    } else {
      return Bad("thinking.type", "Input should be 'enabled' or 'disabled'");
    }
  }
  if (const Json* oc = Field(obj, "output_config")) {
    if (!oc->is_object()) return Bad("output_config", "Input should be an object");
    std::optional<std::string> effort;
    RETURN_IF_ERROR(codec_util::ReadString(*oc, "effort", "output_config.effort", &effort));
    if (effort) {
      RETURN_IF_ERROR(codec_util::CheckReasoningEffort(*effort, "output_config.effort",
                                                       /*allow_none=*/false));
      req.reasoning_effort = *effort;
    }
  }
  if (const Json* ss = Field(obj, "stop_sequences")) {
    if (!ss->is_array()) return Bad("stop_sequences", "Input should be a valid list");
    for (size_t i = 0; i < ss->size(); ++i) {
      if (!(*ss)[i].is_string()) {
        return Bad(absl::StrCat("stop_sequences.", i), "Input should be a valid string");
      }
      if (!(*ss)[i].get<std::string>().empty()) req.sampling.stop.push_back((*ss)[i]);
    }
  }
  RETURN_IF_ERROR(
      codec_util::ReadNumber(obj, "temperature", "temperature", 0, 1, &req.sampling.temperature));
  RETURN_IF_ERROR(codec_util::ReadNumber(obj, "top_p", "top_p", 0, 1, &req.sampling.top_p));
  std::optional<int64_t> top_k;
  RETURN_IF_ERROR(codec_util::ReadInt(obj, "top_k", "top_k", 0, 1 << 20, &top_k));
  if (top_k) req.sampling.top_k = static_cast<int>(*top_k);
  // Extension (not in Anthropic's API; vLLM/SGLang style extra body field): the sampler seed.
  RETURN_IF_ERROR(codec_util::ReadSeed(obj, "seed", "seed", &req.sampling.seed));
  RETURN_IF_ERROR(codec_util::ReadVllmSamplingExtensions(obj, &req.sampling));
  RETURN_IF_ERROR(codec_util::ReadCacheSalt(obj, &req.cache_salt));
  RETURN_IF_ERROR(codec_util::ReadTrafficClass(obj, &req.traffic_class));
  std::optional<bool> stream;
  RETURN_IF_ERROR(codec_util::ReadBool(obj, "stream", "stream", &stream));
  req.sampling.stream = stream.value_or(false);
  return req;
}

AnthropicErrorInfo AnthropicErrorInfoFor(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kUnimplemented:
    case absl::StatusCode::kAlreadyExists:
      return {400, "invalid_request_error"};
    case absl::StatusCode::kUnauthenticated:
      return {401, "authentication_error"};
    case absl::StatusCode::kPermissionDenied:
      return {403, "permission_error"};
    case absl::StatusCode::kNotFound:
      return {404, "not_found_error"};
    case absl::StatusCode::kResourceExhausted:
      return {429, "rate_limit_error"};
    case absl::StatusCode::kUnavailable:
      return {529, "overloaded_error"};
    default:
      return {500, "api_error"};
  }
}

std::string AnthropicErrorJson(std::string_view type, std::string_view message) {
  Json j;
  j["type"] = "error";
  j["error"] = Json{{"type", std::string(type)}, {"message", std::string(message)}};
  return DumpJson(j);
}

std::string AnthropicErrorJson(const absl::Status& status) {
  std::string message(status.message());
  std::string param = ErrorParam(status);
  if (param.empty()) {
    if (auto tag = protocol::GetProtocolError(status)) param = tag->param;
  }
  if (!param.empty() && !absl::StartsWith(message, param)) {
    message = absl::StrCat(param, ": ", message);
  }
  return AnthropicErrorJson(AnthropicErrorInfoFor(status.code()).type, message);
}

std::string_view AnthropicStopReason(protocol::FinishReason reason) {
  switch (reason) {
    case protocol::FinishReason::kStop:
      return "end_turn";
    case protocol::FinishReason::kStopSequence:
      return "stop_sequence";
    case protocol::FinishReason::kLength:
      return "max_tokens";
    case protocol::FinishReason::kToolCalls:
      return "tool_use";
    case protocol::FinishReason::kToolCallError:
    case protocol::FinishReason::kCancelled:
      return "";
  }
  return "";
}

MessagesEncoder::MessagesEncoder(MessageMeta meta) : meta_(std::move(meta)) {}

Json MessagesEncoder::UsageJson(int64_t output_tokens) const {
  return Json{{"input_tokens", meta_.prompt_tokens - meta_.cache_read_input_tokens},
              {"cache_creation_input_tokens", 0},
              {"cache_read_input_tokens", meta_.cache_read_input_tokens},
              {"output_tokens", output_tokens}};
}

std::vector<Json> MessagesEncoder::Start() {
  Json message{{"id", meta_.id},           {"type", "message"},        {"role", "assistant"},
               {"model", meta_.model},     {"content", Json::array()}, {"stop_reason", nullptr},
               {"stop_sequence", nullptr}, {"usage", UsageJson(0)}};
  return {Json{{"type", "message_start"}, {"message", std::move(message)}}};
}

void MessagesEncoder::CloseOpen(std::vector<Json>* out) {
  if (open_ == Open::kNone) return;
  const size_t index = content_.size();
  switch (open_) {
    case Open::kThinking:
      open_block_["thinking"] = open_text_;
      break;
    case Open::kText:
      open_block_["text"] = open_text_;
      break;
    case Open::kToolUse: {
      Json input = Json::parse(open_text_, nullptr, /*allow_exceptions=*/false);
      open_block_["input"] = input.is_object() ? input : CompleteMembers(open_text_);
      break;
    }
    case Open::kNone:
      break;
  }
  out->push_back(Json{{"type", "content_block_stop"}, {"index", index}});
  content_.push_back(std::move(open_block_));
  open_block_ = Json();
  open_ = Open::kNone;
  open_tool_index_ = -1;
  open_text_.clear();
}

std::vector<Json> MessagesEncoder::OnEvent(const protocol::OutputEvent& ev) {
  using Type = protocol::OutputEvent::Type;
  std::vector<Json> out;
  if (finished_) return out;
  switch (ev.type) {
    case Type::kReasoningDelta:
    case Type::kContentDelta: {
      if (ev.text.empty()) break;
      const bool thinking = ev.type == Type::kReasoningDelta;
      const Open kind = thinking ? Open::kThinking : Open::kText;
      if (open_ != kind) {
        CloseOpen(&out);
        open_ = kind;
        open_block_ = thinking ? Json{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}
                               : Json{{"type", "text"}, {"text", ""}};
        out.push_back(Json{{"type", "content_block_start"},
                           {"index", content_.size()},
                           {"content_block", open_block_}});
      }
      open_text_ += ev.text;
      Json delta = thinking ? Json{{"type", "thinking_delta"}, {"thinking", ev.text}}
                            : Json{{"type", "text_delta"}, {"text", ev.text}};
      out.push_back(Json{{"type", "content_block_delta"},
                         {"index", content_.size()},
                         {"delta", std::move(delta)}});
      break;
    }
    case Type::kToolCallStart:
      CloseOpen(&out);
      open_ = Open::kToolUse;
      open_tool_index_ = ev.tool_index;
      open_block_ = Json{{"type", "tool_use"},
                         {"id", ev.tool_call_id},
                         {"name", ev.tool_name},
                         {"input", Json::object()}};
      out.push_back(Json{{"type", "content_block_start"},
                         {"index", content_.size()},
                         {"content_block", open_block_}});
      break;
    case Type::kToolCallArguments:
      if (open_ != Open::kToolUse || open_tool_index_ != ev.tool_index || ev.text.empty()) break;
      open_text_ += ev.text;
      out.push_back(Json{{"type", "content_block_delta"},
                         {"index", content_.size()},
                         {"delta", Json{{"type", "input_json_delta"}, {"partial_json", ev.text}}}});
      break;
    case Type::kToolCallEnd:
      if (open_ != Open::kToolUse || open_tool_index_ != ev.tool_index) break;
      CloseOpen(&out);
      break;
    case Type::kFinish:
      CloseOpen(&out);
      finished_ = true;
      finish_reason_ = ev.finish_reason;
      stop_sequence_ = ev.stop_sequence;
      error_ = ev.error;
      break;
  }
  return out;
}

std::vector<Json> MessagesEncoder::Complete(int64_t output_tokens) {
  std::vector<Json> out;
  CloseOpen(&out);
  finished_ = true;
  output_tokens_ = output_tokens;
  const std::string_view stop = AnthropicStopReason(finish_reason_);
  if (stop.empty()) {
    const std::string message =
        error_.empty() ? absl::StrCat("generation ended: ",
                                      AbslView(protocol::FinishReasonName(finish_reason_)))
                       : error_;
    out.push_back(
        Json{{"type", "error"}, {"error", Json{{"type", "api_error"}, {"message", message}}}});
    return out;
  }
  Json delta{{"stop_reason", std::string(stop)},
             {"stop_sequence", stop_sequence_.empty() ? Json(nullptr) : Json(stop_sequence_)}};
  out.push_back(Json{
      {"type", "message_delta"}, {"delta", std::move(delta)}, {"usage", UsageJson(output_tokens)}});
  out.push_back(Json{{"type", "message_stop"}});
  return out;
}

absl::StatusOr<Json> MessagesEncoder::Message() const {
  const std::string_view stop = AnthropicStopReason(finish_reason_);
  if (stop.empty()) {
    return absl::InternalError(
        error_.empty() ? std::string(protocol::FinishReasonName(finish_reason_)) : error_);
  }
  Json m{{"id", meta_.id},
         {"type", "message"},
         {"role", "assistant"},
         {"model", meta_.model},
         {"content", Json::array()},
         {"stop_reason", std::string(stop)},
         {"stop_sequence", stop_sequence_.empty() ? Json(nullptr) : Json(stop_sequence_)},
         {"usage", UsageJson(output_tokens_)}};
  for (const Json& b : content_) m["content"].push_back(b);
  return m;
}

}  // namespace deepinfer::api
