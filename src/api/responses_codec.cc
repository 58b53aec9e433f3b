#include "api/responses_codec.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "api/codec_util.h"
#include "api/errors.h"
#include "common/status.h"
#include "common/strings.h"
#include "protocol/py_json.h"

namespace deepinfer::api {
namespace {

using codec_util::Bad;
using codec_util::Field;
using codec_util::WrongType;
using Json = nlohmann::ordered_json;

// Message content: string or an array of input_text / output_text / text / input_image parts.
absl::Status ParseItemContent(const Json& content, const std::string& path,
                              std::vector<protocol::ContentPart>* out) {
  if (content.is_string()) {
    out->push_back(protocol::ContentPart::Text(content.get<std::string>()));
    return absl::OkStatus();
  }
  if (!content.is_array()) return WrongType(path, "a string or an array of content parts");
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& part = content[i];
    const std::string ppath = absl::StrCat(path, "[", i, "]");
    if (!part.is_object()) return WrongType(ppath, "an object");
    const Json* type = Field(part, "type");
    if (!type || !type->is_string()) return WrongType(ppath + ".type", "a string");
    const std::string& t = type->get_ref<const std::string&>();
    if (t == "input_text" || t == "output_text" || t == "text") {
      const Json* text = Field(part, "text");
      if (!text || !text->is_string()) return WrongType(ppath + ".text", "a string");
      out->push_back(protocol::ContentPart::Text(text->get<std::string>()));
    } else if (t == "input_image") {
      std::string url;
      if (const Json* u = Field(part, "image_url"); u && u->is_string())
        url = u->get<std::string>();
      out->push_back(protocol::ContentPart::Image(url));
    } else {
      out->push_back(protocol::ContentPart::Other(t));
    }
  }
  return absl::OkStatus();
}

// The assistant message that function_call / reasoning items attach to: the last message when it
// is an assistant message without a prefix, else a new one.
protocol::Message* CurrentAssistant(protocol::Conversation* conv, bool allow_existing) {
  if (allow_existing && !conv->messages.empty() &&
      conv->messages.back().role == protocol::Role::kAssistant) {
    return &conv->messages.back();
  }
  conv->messages.push_back(protocol::Message::Assistant(""));
  conv->messages.back().content.clear();
  return &conv->messages.back();
}

absl::Status ParseInput(const Json& input, protocol::Conversation* conv) {
  if (input.is_string()) {
    conv->messages.push_back(protocol::Message::User(input.get<std::string>()));
    conv->messages.back().request_path = "input";
    return absl::OkStatus();
  }
  if (!input.is_array()) return WrongType("input", "a string or an array of input items");
  std::optional<std::string> pending_reasoning;  // a reasoning item waiting for its assistant turn
  bool last_was_call = false;
  for (size_t i = 0; i < input.size(); ++i) {
    const Json& item = input[i];
    const std::string path = absl::StrCat("input[", i, "]");
    if (!item.is_object()) return WrongType(path, "an object");
    std::string type = "message";
    if (const Json* t = Field(item, "type")) {
      if (!t->is_string()) return WrongType(path + ".type", "a string");
      type = t->get<std::string>();
    }
    const bool was_call = last_was_call;
    last_was_call = false;
    if (type == "message") {
      const Json* role = Field(item, "role");
      if (!role || !role->is_string()) return WrongType(path + ".role", "a string");
      const std::string& r = role->get_ref<const std::string&>();
      protocol::Message msg;
      msg.request_path = path;
      if (r == "user") {
        msg.role = protocol::Role::kUser;
      } else if (r == "system") {
        msg.role = protocol::Role::kSystem;
      } else if (r == "developer") {
        msg.role = protocol::Role::kDeveloper;
      } else if (r == "assistant") {
        msg.role = protocol::Role::kAssistant;
      } else {
        return protocol::MakeProtocolError(
            protocol::ProtocolError::kInvalidRole, path + ".role",
            absl::StrCat("Invalid value: '", r,
                         "'. Supported values are: 'assistant', 'system', "
                         "'developer', and 'user'."));
      }
      const Json* content = Field(item, "content");
      if (!content) return Bad(path + ".content", absl::StrCat("'", path, ".content' is required"));
      RETURN_IF_ERROR(ParseItemContent(*content, path + ".content", &msg.content));
      if (msg.role == protocol::Role::kAssistant) {
        msg.reasoning_content = std::move(pending_reasoning);
        pending_reasoning.reset();
      }
      conv->messages.push_back(std::move(msg));
    } else if (type == "reasoning") {
      std::string text;
      if (const Json* c = Field(item, "content")) {
        if (!c->is_array()) return WrongType(path + ".content", "an array");
        for (const Json& p : *c) {
          if (const Json* t = p.is_object() ? Field(p, "text") : nullptr; t && t->is_string()) {
            text += t->get<std::string>();
          }
        }
      }
      pending_reasoning = pending_reasoning.value_or("") + text;
    } else if (type == "function_call") {
      const Json* call_id = Field(item, "call_id");
      if (!call_id || !call_id->is_string()) return WrongType(path + ".call_id", "a string");
      const Json* name = Field(item, "name");
      if (!name || !name->is_string()) return WrongType(path + ".name", "a string");
      const Json* args = Field(item, "arguments");
      if (!args || !args->is_string()) return WrongType(path + ".arguments", "a string");
      absl::StatusOr<protocol::PyJson> parsed =
          protocol::ParseToolArguments(args->get<std::string>());
      if (!parsed.ok()) return WithParam(parsed.status(), path + ".arguments");
      // Consecutive calls share one assistant turn; a call right after an assistant text
      // message belongs to that message.
      const bool attach =
          !conv->messages.empty() && conv->messages.back().role == protocol::Role::kAssistant &&
          (was_call ||
           (conv->messages.back().tool_calls.empty() && !pending_reasoning.has_value()));
      protocol::Message* asst = CurrentAssistant(conv, attach);
      if (asst->request_path.empty()) asst->request_path = path;
      if (pending_reasoning) {
        asst->reasoning_content = std::move(pending_reasoning);
        pending_reasoning.reset();
      }
      protocol::ToolCall call;
      call.id = call_id->get<std::string>();
      call.name = name->get<std::string>();
      call.arguments = *std::move(parsed);
      asst->tool_calls.push_back(std::move(call));
      last_was_call = true;
    } else if (type == "function_call_output") {
      const Json* call_id = Field(item, "call_id");
      if (!call_id || !call_id->is_string()) return WrongType(path + ".call_id", "a string");
      const std::string& id = call_id->get_ref<const std::string&>();
      // The call must be in the closest preceding assistant turn.
      bool found = false;
      for (auto it = conv->messages.rbegin(); it != conv->messages.rend(); ++it) {
        if (it->role == protocol::Role::kTool) continue;
        if (it->role == protocol::Role::kAssistant) {
          for (const protocol::ToolCall& c : it->tool_calls) found = found || c.id == id;
        }
        break;
      }
      if (!found) {
        return protocol::MakeProtocolError(
            protocol::ProtocolError::kToolMessageWithoutCall, path,
            absl::StrCat("No tool call found for function call output with call_id ", id, "."));
      }
      protocol::Message msg;
      msg.request_path = path;
      msg.role = protocol::Role::kTool;
      msg.tool_call_id = id;
      const Json* output = Field(item, "output");
      if (!output) return Bad(path + ".output", absl::StrCat("'", path, ".output' is required"));
      RETURN_IF_ERROR(ParseItemContent(*output, path + ".output", &msg.content));
      conv->messages.push_back(std::move(msg));
    } else {
      return Bad(path + ".type", absl::StrCat("input item type '", type, "' is not supported"));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseTools(const Json& obj, ResponsesRequest* req) {
  protocol::Conversation* conv = &req->conversation;
  if (const Json* tools = Field(obj, "tools")) {
    if (!tools->is_array()) return WrongType("tools", "an array");
    req->tools_json = *tools;
    for (size_t i = 0; i < tools->size(); ++i) {
      const Json& t = (*tools)[i];
      const std::string path = absl::StrCat("tools[", i, "]");
      if (!t.is_object()) return WrongType(path, "an object");
      const Json* type = Field(t, "type");
      if (!type || !type->is_string()) return WrongType(path + ".type", "a string");
      if (type->get<std::string>() != "function") {
        return Bad(path + ".type",
                   absl::StrCat("tool type '", type->get<std::string>(), "' is not supported"));
      }
      protocol::ToolDefinition def;
      const Json* name = Field(t, "name");
      if (!name || !name->is_string()) return WrongType(path + ".name", "a string");
      def.name = name->get<std::string>();
      RETURN_IF_ERROR(codec_util::CheckOpenAiName(def.name, path + ".name"));
      if (const Json* d = Field(t, "description")) {
        if (!d->is_string()) return WrongType(path + ".description", "a string");
        def.description = d->get<std::string>();
      }
      if (const Json* p = Field(t, "parameters")) {
        if (!p->is_object()) return WrongType(path + ".parameters", "an object");
        absl::StatusOr<protocol::PyJson> pj = protocol::PyJson::FromNlohmann(*p);
        if (!pj.ok()) return WithParam(pj.status(), path + ".parameters");
        def.parameters = *std::move(pj);
      }
      conv->tools.push_back(std::move(def));
    }
  }
  if (const Json* tc = Field(obj, "tool_choice")) {
    req->tool_choice_json = *tc;
    if (tc->is_string()) {
      ASSIGN_OR_RETURN(conv->tool_choice,
                       codec_util::ToolChoiceMode(tc->get_ref<const std::string&>()));
    } else if (tc->is_object()) {
      const Json* type = Field(*tc, "type");
      if (!type || !type->is_string() || type->get<std::string>() != "function") {
        return Bad("tool_choice.type", "tool_choice.type must be 'function'");
      }
      const Json* name = Field(*tc, "name");
      if (!name || !name->is_string()) return WrongType("tool_choice.name", "a string");
      const std::string& n = name->get_ref<const std::string&>();
      bool declared = false;
      for (const protocol::ToolDefinition& d : conv->tools) declared = declared || d.name == n;
      if (!declared) {
        return protocol::MakeProtocolError(
            protocol::ProtocolError::kInvalidToolChoice, "tool_choice.name",
            absl::StrCat("Tool choice '", n, "' not found in 'tools' parameter."));
      }
      conv->tool_choice = protocol::ToolChoice::Named(n);
    } else {
      return WrongType("tool_choice", "a string or an object");
    }
  }
  return absl::OkStatus();
}

absl::Status ParseTextFormat(const Json& obj, protocol::Conversation* conv) {
  const Json* text = Field(obj, "text");
  if (!text) return absl::OkStatus();
  if (!text->is_object()) return WrongType("text", "an object");
  const Json* format = Field(*text, "format");
  if (!format) return absl::OkStatus();
  if (!format->is_object()) return WrongType("text.format", "an object");
  const Json* type = Field(*format, "type");
  if (!type || !type->is_string()) return WrongType("text.format.type", "a string");
  const std::string& t = type->get_ref<const std::string&>();
  Json chat;  // the Chat-shaped response_format (conversation.h)
  if (t == "text") return absl::OkStatus();
  if (t == "json_object") {
    chat = Json{{"type", "json_object"}};
  } else if (t == "json_schema") {
    RETURN_IF_ERROR(codec_util::CheckJsonSchemaName(*format, "text.format.name"));
    Json schema = Json::object();
    for (const char* k : {"name", "description", "schema", "strict"}) {
      if (const Json* f = Field(*format, k)) schema[k] = *f;
    }
    chat = Json{{"type", "json_schema"}, {"json_schema", std::move(schema)}};
  } else {
    return Bad("text.format.type", absl::StrCat("text.format.type '", t, "' is not supported"));
  }
  absl::StatusOr<protocol::PyJson> pj = protocol::PyJson::FromNlohmann(chat);
  if (!pj.ok()) return WithParam(pj.status(), "text.format");
  conv->response_format = protocol::ResponseFormat{*std::move(pj)};
  return absl::OkStatus();
}

std::string OutputStatusForItem(bool valid) { return valid ? "completed" : "incomplete"; }

}  // namespace

absl::StatusOr<ResponsesRequest> ParseResponsesRequest(std::string_view body) {
  ASSIGN_OR_RETURN(Json obj, codec_util::ParseObjectBody(body));
  ResponsesRequest req;
  std::optional<std::string> s;
  RETURN_IF_ERROR(codec_util::ReadString(obj, "model", "model", &s));
  if (s) req.model = *s;
  if (Field(obj, "previous_response_id")) {
    return Bad("previous_response_id",
               "previous_response_id is not supported: this server does not store responses "
               "(store: false); send the full conversation in 'input'");
  }
  // Output logprobs are not implemented for Responses (they are for Chat Completions and
  // Completions): say so rather than silently return none.
  if (const Json* t = Field(obj, "top_logprobs"); t != nullptr && !t->is_null()) {
    return Bad("top_logprobs",
               "top_logprobs is not supported on /v1/responses; use /v1/chat/completions with "
               "logprobs and top_logprobs");
  }
  if (const Json* inc = Field(obj, "include"); inc != nullptr && inc->is_array()) {
    for (const Json& v : *inc) {
      if (v.is_string() && v.get<std::string>() == "message.output_text.logprobs") {
        return Bad("include",
                   "include 'message.output_text.logprobs' is not supported on /v1/responses; "
                   "use /v1/chat/completions with logprobs");
      }
    }
  }
  s.reset();
  RETURN_IF_ERROR(codec_util::ReadString(obj, "instructions", "instructions", &s));
  if (s) {
    req.instructions = *s;
    req.conversation.messages.push_back(protocol::Message::System(*s));
    req.conversation.messages.back().request_path = "instructions";
  }
  const Json* input = Field(obj, "input");
  if (!input) return Bad("input", "'input' is required");
  RETURN_IF_ERROR(ParseInput(*input, &req.conversation));
  bool has_non_system = false;
  for (const protocol::Message& m : req.conversation.messages) {
    has_non_system = has_non_system || m.role != protocol::Role::kSystem;
  }
  if (!has_non_system) return Bad("input", "'input' must contain at least one item");
  RETURN_IF_ERROR(ParseTools(obj, &req));
  RETURN_IF_ERROR(ParseTextFormat(obj, &req.conversation));
  if (const Json* text = Field(obj, "text"); text != nullptr && text->is_object()) {
    if (const Json* f = Field(*text, "format")) req.text_format_json = *f;
  }
  if (const Json* r = Field(obj, "reasoning")) {
    if (!r->is_object()) return WrongType("reasoning", "an object");
    std::optional<std::string> effort;
    RETURN_IF_ERROR(codec_util::ReadString(*r, "effort", "reasoning.effort", &effort));
    if (effort) {
      RETURN_IF_ERROR(
          codec_util::CheckReasoningEffort(*effort, "reasoning.effort", /*allow_none=*/true));
    }
    if (effort && *effort == "none") {
      req.thinking = false;
    } else if (effort) {
      req.thinking = true;
      req.reasoning_effort = *effort;
    }
  }
  std::optional<bool> b;
  RETURN_IF_ERROR(codec_util::ReadBool(obj, "parallel_tool_calls", "parallel_tool_calls", &b));
  if (b) req.parallel_tool_calls = *b;
  b.reset();
  RETURN_IF_ERROR(codec_util::ReadBool(obj, "stream", "stream", &b));
  req.sampling.stream = b.value_or(false);
  // Nothing is stored (the body reports `store: false` whatever was asked; docs/protocol.md) and
  // every response is produced synchronously, so background mode cannot be honoured.
  b.reset();
  RETURN_IF_ERROR(codec_util::ReadBool(obj, "store", "store", &b));
  b.reset();
  RETURN_IF_ERROR(codec_util::ReadBool(obj, "background", "background", &b));
  if (b.value_or(false)) return Bad("background", "background mode is not supported");
  RETURN_IF_ERROR(
      codec_util::ReadNumber(obj, "temperature", "temperature", 0, 2, &req.sampling.temperature));
  RETURN_IF_ERROR(codec_util::ReadNumber(obj, "top_p", "top_p", 0, 1, &req.sampling.top_p));
  if (req.sampling.top_p && *req.sampling.top_p <= 0)
    return Bad("top_p", "'top_p' must be in (0, 1]");
  RETURN_IF_ERROR(codec_util::ReadInt(obj, "max_output_tokens", "max_output_tokens", 1, INT32_MAX,
                                      &req.sampling.max_tokens));
  req.sampling.max_tokens_param = "max_output_tokens";
  RETURN_IF_ERROR(codec_util::ReadSeed(obj, "seed", "seed", &req.sampling.seed));
  RETURN_IF_ERROR(codec_util::ReadVllmSamplingExtensions(obj, &req.sampling));
  RETURN_IF_ERROR(codec_util::ReadThinkingTokenBudget(obj, &req.thinking_token_budget));
  RETURN_IF_ERROR(codec_util::ReadCacheSalt(obj, &req.cache_salt));
  RETURN_IF_ERROR(codec_util::ReadTrafficClass(obj, &req.traffic_class));
  return req;
}

nlohmann::ordered_json ResponsesUsageJson(const Usage& usage) {
  Json j;
  j["input_tokens"] = usage.prompt_tokens;
  j["input_tokens_details"] = Json{{"cached_tokens", usage.cached_tokens}};
  j["output_tokens"] = usage.completion_tokens;
  j["output_tokens_details"] = Json{{"reasoning_tokens", usage.reasoning_tokens}};
  j["total_tokens"] = usage.prompt_tokens + usage.completion_tokens;
  return j;
}

ResponsesEncoder::ResponsesEncoder(ResponseMeta meta) : meta_(std::move(meta)) {}

std::string ResponsesEncoder::ItemId(const char* prefix, size_t index) const {
  std::string_view base = meta_.id;
  if (base.substr(0, 5) == "resp_") base.remove_prefix(5);
  return absl::StrCat(prefix, AbslView(base), "_", index);
}

Json ResponsesEncoder::Event(const char* type, Json fields) {
  Json j;
  j["type"] = type;
  j["sequence_number"] = sequence_++;
  for (auto it = fields.begin(); it != fields.end(); ++it) j[it.key()] = it.value();
  return j;
}

Json ResponsesEncoder::Response() const {
  Json r;
  r["id"] = meta_.id;
  r["object"] = "response";
  r["created_at"] = meta_.created_at;
  r["status"] = status_;
  r["error"] = nullptr;
  r["incomplete_details"] = nullptr;
  if (status_ == "incomplete") r["incomplete_details"] = Json{{"reason", "max_output_tokens"}};
  if (status_ == "failed") {
    r["error"] = Json{{"code", "server_error"},
                      {"message", error_.empty() ? std::string("generation failed") : error_}};
  }
  const ResponsesRequest* req = meta_.request;
  r["instructions"] = req && !req->instructions.empty() ? Json(req->instructions) : Json(nullptr);
  if (req && req->sampling.max_tokens) {
    r["max_output_tokens"] = *req->sampling.max_tokens;
  } else {
    r["max_output_tokens"] = nullptr;
  }
  r["model"] = meta_.model;
  r["output"] = Json::array();
  for (const Json& item : output_) r["output"].push_back(item);
  r["parallel_tool_calls"] = req ? req->parallel_tool_calls : true;
  r["previous_response_id"] = nullptr;
  r["store"] = false;
  r["temperature"] =
      req && req->sampling.temperature ? Json(*req->sampling.temperature) : Json(1.0);
  r["text"] = Json{{"format", req ? req->text_format_json : Json{{"type", "text"}}}};
  r["tool_choice"] = req ? req->tool_choice_json : Json("auto");
  r["tools"] = req ? req->tools_json : Json::array();
  r["top_p"] = req && req->sampling.top_p ? Json(*req->sampling.top_p) : Json(1.0);
  r["usage"] = usage_ ? ResponsesUsageJson(*usage_) : Json(nullptr);
  return r;
}

std::vector<Json> ResponsesEncoder::Start() {
  std::vector<Json> out;
  out.push_back(Event("response.created", Json{{"response", Response()}}));
  out.push_back(Event("response.in_progress", Json{{"response", Response()}}));
  return out;
}

void ResponsesEncoder::OpenItem(Open kind, const protocol::OutputEvent* start,
                                std::vector<Json>* out) {
  const size_t index = output_.size();
  open_ = kind;
  open_text_.clear();
  Json part;
  switch (kind) {
    case Open::kReasoning:
      open_item_ = Json{{"id", ItemId("rs_", index)},
                        {"type", "reasoning"},
                        {"summary", Json::array()},
                        {"content", Json::array()},
                        {"status", "in_progress"}};
      part = Json{{"type", "reasoning_text"}, {"text", ""}};
      break;
    case Open::kMessage:
      open_item_ = Json{{"id", ItemId("msg_", index)},
                        {"type", "message"},
                        {"status", "in_progress"},
                        {"role", "assistant"},
                        {"content", Json::array()}};
      part = Json{{"type", "output_text"}, {"text", ""}, {"annotations", Json::array()}};
      break;
    case Open::kFunctionCall:
      open_tool_index_ = start->tool_index;
      open_item_ = Json{{"id", ItemId("fc_", index)},     {"type", "function_call"},
                        {"status", "in_progress"},        {"arguments", ""},
                        {"call_id", start->tool_call_id}, {"name", start->tool_name}};
      break;
    case Open::kNone:
      return;
  }
  out->push_back(
      Event("response.output_item.added", Json{{"output_index", index}, {"item", open_item_}}));
  if (kind != Open::kFunctionCall) {
    out->push_back(Event("response.content_part.added", Json{{"item_id", open_item_["id"]},
                                                             {"output_index", index},
                                                             {"content_index", 0},
                                                             {"part", part}}));
  }
}

void ResponsesEncoder::CloseOpen(std::vector<Json>* out, const char* status) {
  if (open_ == Open::kNone) return;
  const size_t index = output_.size();
  const Json id = open_item_["id"];
  if (open_ == Open::kFunctionCall) {
    out->push_back(
        Event("response.function_call_arguments.done",
              Json{{"item_id", id}, {"output_index", index}, {"arguments", open_text_}}));
    open_item_["arguments"] = open_text_;
    if (open_item_["status"] == "in_progress") open_item_["status"] = status;
  } else {
    const bool reasoning = open_ == Open::kReasoning;
    Json part =
        reasoning
            ? Json{{"type", "reasoning_text"}, {"text", open_text_}}
            : Json{{"type", "output_text"}, {"text", open_text_}, {"annotations", Json::array()}};
    out->push_back(Event(
        reasoning ? "response.reasoning_text.done" : "response.output_text.done",
        Json{
            {"item_id", id}, {"output_index", index}, {"content_index", 0}, {"text", open_text_}}));
    out->push_back(Event(
        "response.content_part.done",
        Json{{"item_id", id}, {"output_index", index}, {"content_index", 0}, {"part", part}}));
    open_item_["content"] = Json::array({part});
    open_item_["status"] = status;
  }
  out->push_back(
      Event("response.output_item.done", Json{{"output_index", index}, {"item", open_item_}}));
  output_.push_back(std::move(open_item_));
  open_item_ = Json();
  open_ = Open::kNone;
  open_tool_index_ = -1;
}

std::vector<Json> ResponsesEncoder::OnEvent(const protocol::OutputEvent& ev) {
  using Type = protocol::OutputEvent::Type;
  std::vector<Json> out;
  if (finished_) return out;
  switch (ev.type) {
    case Type::kReasoningDelta:
    case Type::kContentDelta: {
      if (ev.text.empty()) break;
      const Open kind = ev.type == Type::kReasoningDelta ? Open::kReasoning : Open::kMessage;
      if (open_ != kind) {
        CloseOpen(&out);
        OpenItem(kind, nullptr, &out);
      }
      open_text_ += ev.text;
      out.push_back(Event(
          kind == Open::kReasoning ? "response.reasoning_text.delta" : "response.output_text.delta",
          Json{{"item_id", open_item_["id"]},
               {"output_index", output_.size()},
               {"content_index", 0},
               {"delta", ev.text}}));
      if (kind == Open::kMessage) out.back()["logprobs"] = Json::array();
      break;
    }
    case Type::kToolCallStart:
      CloseOpen(&out);
      OpenItem(Open::kFunctionCall, &ev, &out);
      break;
    case Type::kToolCallArguments:
      if (open_ != Open::kFunctionCall || open_tool_index_ != ev.tool_index || ev.text.empty()) {
        break;
      }
      open_text_ += ev.text;
      out.push_back(
          Event("response.function_call_arguments.delta", Json{{"item_id", open_item_["id"]},
                                                               {"output_index", output_.size()},
                                                               {"delta", ev.text}}));
      break;
    case Type::kToolCallEnd:
      if (open_ != Open::kFunctionCall || open_tool_index_ != ev.tool_index) break;
      open_item_["status"] = OutputStatusForItem(ev.valid);
      CloseOpen(&out);
      break;
    case Type::kFinish:
      // An item cut by max_output_tokens is "incomplete", like the response.
      CloseOpen(&out,
                ev.finish_reason == protocol::FinishReason::kLength ? "incomplete" : "completed");
      finished_ = true;
      finish_reason_ = ev.finish_reason;
      error_ = ev.error;
      break;
  }
  return out;
}

std::vector<Json> ResponsesEncoder::Complete(const Usage& usage) {
  std::vector<Json> out;
  CloseOpen(&out);
  usage_ = usage;
  const char* type = "response.completed";
  switch (finish_reason_) {
    case protocol::FinishReason::kStop:
    case protocol::FinishReason::kStopSequence:
    case protocol::FinishReason::kToolCalls:
      status_ = "completed";
      break;
    case protocol::FinishReason::kLength:
      status_ = "incomplete";
      type = "response.incomplete";
      break;
    case protocol::FinishReason::kToolCallError:
    case protocol::FinishReason::kCancelled:
      status_ = "failed";
      type = "response.failed";
      if (error_.empty()) error_ = std::string(protocol::FinishReasonName(finish_reason_));
      break;
  }
  finished_ = true;
  out.push_back(Event(type, Json{{"response", Response()}}));
  return out;
}

std::vector<Json> ResponsesEncoder::Fail(const Usage& usage, std::string_view message) {
  std::vector<Json> out;
  CloseOpen(&out, "incomplete");
  usage_ = usage;
  status_ = "failed";
  error_ = std::string(message);
  finished_ = true;
  out.push_back(Event("response.failed", Json{{"response", Response()}}));
  return out;
}

}  // namespace deepinfer::api
