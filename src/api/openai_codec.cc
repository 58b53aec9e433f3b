#include "api/openai_codec.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "api/codec_util.h"
#include "api/errors.h"
#include "api/json_body.h"
#include "common/status.h"
#include "common/strings.h"
#include "protocol/py_json.h"

namespace deepinfer::api {
namespace {

using codec_util::Bad;
using codec_util::Field;
using codec_util::Json;
using codec_util::WrongType;

absl::StatusOr<Json> ParseObject(std::string_view body) {
  absl::StatusOr<Json> parsed = ParseJsonLinear(body);
  if (!parsed.ok() && !ErrorCode(parsed.status()).empty()) return parsed.status();
  if (!parsed.ok()) {
    return Bad("",
               "We could not parse the JSON body of your request. (HINT: This likely means "
               "you aren't using your HTTP library correctly. The OpenAI API expects a JSON "
               "payload, but what was sent was not valid JSON.)");
  }
  if (!parsed->is_object()) return Bad("", "the request body must be a JSON object");
  return parsed;
}

absl::Status GetString(const Json& obj, const char* name, std::string* out) {
  const Json* f = Field(obj, name);
  if (!f) return absl::OkStatus();
  if (!f->is_string()) return WrongType(name, "a string");
  *out = f->get<std::string>();
  return absl::OkStatus();
}

absl::Status GetBool(const Json& obj, const char* name, bool* out) {
  const Json* f = Field(obj, name);
  if (!f) return absl::OkStatus();
  if (!f->is_boolean()) return WrongType(name, "a boolean");
  *out = f->get<bool>();
  return absl::OkStatus();
}

absl::Status GetNumber(const Json& obj, const char* name, double lo, double hi,
                       std::optional<double>* out) {
  const Json* f = Field(obj, name);
  if (!f) return absl::OkStatus();
  if (!f->is_number()) return WrongType(name, "a number");
  double v = f->get<double>();
  if (!(v >= lo && v <= hi)) {
    return Bad(name, absl::StrCat("'", name, "' must be between ", lo, " and ", hi, ", got ", v));
  }
  *out = v;
  return absl::OkStatus();
}

absl::Status GetInt(const Json& obj, const char* name, int64_t lo, int64_t hi,
                    std::optional<int64_t>* out) {
  const Json* f = Field(obj, name);
  if (!f) return absl::OkStatus();
  int64_t v = 0;
  if (f->is_number_integer()) {
    if (f->is_number_unsigned() && f->get<uint64_t>() > uint64_t{INT64_MAX}) {
      return Bad(name, absl::StrCat("'", name, "' must be between ", lo, " and ", hi, ", got ",
                                    f->get<uint64_t>()));
    }
    v = f->get<int64_t>();
  } else if (f->is_number_float() && std::floor(f->get<double>()) == f->get<double>()) {
    // 16.0 is accepted as 16, like pydantic; integral values beyond 9e15 (including integers
    // too long for 64 bits, which the JSON parser reads as doubles) are out of range.
    if (std::fabs(f->get<double>()) >= 9e15) {
      return Bad(name, absl::StrCat("'", name, "' must be between ", lo, " and ", hi, ", got ",
                                    f->get<double>()));
    }
    v = static_cast<int64_t>(f->get<double>());
  } else {
    return WrongType(name, "an integer");
  }
  if (v < lo || v > hi) {
    return Bad(name, absl::StrCat("'", name, "' must be between ", lo, " and ", hi, ", got ", v));
  }
  *out = v;
  return absl::OkStatus();
}

absl::Status ParseStop(const Json& obj, std::vector<std::string>* out) {
  const Json* f = Field(obj, "stop");
  if (!f) return absl::OkStatus();
  if (f->is_string()) {
    if (!f->get<std::string>().empty()) out->push_back(f->get<std::string>());
    return absl::OkStatus();
  }
  if (!f->is_array()) return WrongType("stop", "a string or an array of strings");
  if (f->size() > 16) return Bad("stop", "'stop' may hold at most 16 strings");
  for (const Json& s : *f) {
    if (!s.is_string()) return WrongType("stop", "a string or an array of strings");
    if (!s.get<std::string>().empty()) out->push_back(s.get<std::string>());
  }
  return absl::OkStatus();
}

absl::Status ParseSampling(const Json& obj, SamplingFields* s) {
  RETURN_IF_ERROR(GetNumber(obj, "temperature", 0, 2, &s->temperature));
  RETURN_IF_ERROR(GetNumber(obj, "top_p", 0, 1, &s->top_p));
  if (s->top_p && *s->top_p <= 0) return Bad("top_p", "'top_p' must be in (0, 1]");
  std::optional<int64_t> top_k;
  RETURN_IF_ERROR(GetInt(obj, "top_k", -1, 1 << 20, &top_k));
  if (top_k) s->top_k = static_cast<int>(*top_k);
  RETURN_IF_ERROR(GetNumber(obj, "min_p", 0, 1, &s->min_p));
  std::optional<double> v;
  RETURN_IF_ERROR(GetNumber(obj, "presence_penalty", -2, 2, &v));
  if (v) s->presence_penalty = *v;
  v.reset();
  RETURN_IF_ERROR(GetNumber(obj, "frequency_penalty", -2, 2, &v));
  if (v) s->frequency_penalty = *v;
  RETURN_IF_ERROR(GetNumber(obj, "repetition_penalty", 1e-6, 2, &s->repetition_penalty));
  std::optional<int64_t> n;
  RETURN_IF_ERROR(GetInt(obj, "n", 1, 128, &n));
  if (n) s->n = static_cast<int>(*n);
  RETURN_IF_ERROR(codec_util::ReadSeed(obj, "seed", "seed", &s->seed));
  RETURN_IF_ERROR(ParseStop(obj, &s->stop));
  RETURN_IF_ERROR(GetInt(obj, "max_tokens", 1, INT32_MAX, &s->max_tokens));
  std::optional<int64_t> mct;
  RETURN_IF_ERROR(GetInt(obj, "max_completion_tokens", 1, INT32_MAX, &mct));
  if (mct) {
    s->max_tokens = mct;
    s->max_tokens_param = "max_completion_tokens";
  }
  RETURN_IF_ERROR(GetInt(obj, "min_tokens", 0, INT32_MAX, &s->min_tokens));
  RETURN_IF_ERROR(GetBool(obj, "ignore_eos", &s->ignore_eos));
  if (const Json* st = Field(obj, "stop_token_ids")) {
    if (!st->is_array()) return WrongType("stop_token_ids", "an array of token ids");
    for (const Json& t : *st) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX) {
        return WrongType("stop_token_ids", "an array of token ids");
      }
      s->stop_token_ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
  }
  RETURN_IF_ERROR(GetBool(obj, "stream", &s->stream));
  if (const Json* so = Field(obj, "stream_options")) {
    if (!so->is_object()) return WrongType("stream_options", "an object");
    if (!s->stream) {
      return Bad("stream_options",
                 "The 'stream_options' parameter is only allowed when 'stream' is enabled.");
    }
    if (const Json* iu = Field(*so, "include_usage")) {
      if (!iu->is_boolean()) return WrongType("stream_options.include_usage", "a boolean");
      s->include_usage = iu->get<bool>();
    }
  }
  if (const Json* lb = Field(obj, "logit_bias")) {
    if (!lb->is_object()) return WrongType("logit_bias", "an object mapping token ids to numbers");
    std::unordered_set<int32_t> seen;
    for (auto it = lb->begin(); it != lb->end(); ++it) {
      // Decimal digits only: SimpleAtoi alone would also take " 5", "+5" and "-0".
      const std::string& key = it.key();
      int32_t id = 0;
      if (key.empty() || key.size() > 10 ||
          !std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
          !absl::SimpleAtoi(key, &id)) {
        return Bad("logit_bias", absl::StrCat("logit_bias key '", key, "' is not a token id"));
      }
      if (!seen.insert(id).second) {
        return Bad("logit_bias", absl::StrCat("logit_bias names token id ", id, " twice"));
      }
      if (!it.value().is_number()) return WrongType("logit_bias", "an object of numbers");
      double b = it.value().get<double>();
      if (!(b >= -100 && b <= 100)) {
        return Bad("logit_bias", "logit_bias values must be between -100 and 100");
      }
      s->logit_bias.emplace_back(id, static_cast<float>(b));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseModel(const Json& obj, std::string* model) {
  return GetString(obj, "model", model);
}

// Message content: a string, null, or an array of parts. The part types are OpenAI's for the
// role: "text" everywhere, "image_url" (rejected later unless the model takes images), and
// "refusal" in assistant messages only. Audio and file parts, bare strings and unknown types are
// 400s naming the part, as OpenAI answers them (never rendered into the prompt).
absl::Status ParseContent(const Json& msg, const std::string& path, protocol::Role role,
                          std::vector<protocol::ContentPart>* out) {
  auto it = msg.find("content");
  if (it == msg.end() || it->is_null()) return absl::OkStatus();
  if (it->is_string()) {
    out->push_back(protocol::ContentPart::Text(it->get<std::string>()));
    return absl::OkStatus();
  }
  if (!it->is_array()) return WrongType(path + ".content", "a string or an array of content parts");
  const bool assistant = role == protocol::Role::kAssistant;
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& part = (*it)[i];
    std::string ppath = absl::StrCat(path, ".content[", i, "]");
    if (!part.is_object()) return WrongType(ppath, "an object");
    std::string type;
    if (const Json* t = Field(part, "type"); t != nullptr) {
      if (!t->is_string()) return WrongType(ppath + ".type", "a string");
      type = t->get<std::string>();
    }
    if (type == "text" || (assistant && type == "refusal")) {
      const Json* t = Field(part, type.c_str());
      if (!t || !t->is_string()) return WrongType(absl::StrCat(ppath, ".", type), "a string");
      out->push_back(protocol::ContentPart::Text(t->get<std::string>()));
    } else if (type == "image_url" && !assistant) {
      const Json* iu = Field(part, "image_url");
      std::string url;
      if (iu && iu->is_object()) RETURN_IF_ERROR(GetString(*iu, "url", &url));
      if (iu && iu->is_string()) url = iu->get<std::string>();
      out->push_back(protocol::ContentPart::Image(url));
    } else if (type.empty()) {
      return Bad(ppath + ".type", "content part without a 'type'");
    } else if (type == "input_audio" && !assistant) {
      return Bad(ppath + ".type", "This model does not support audio input.");
    } else if (type == "file" && !assistant) {
      return Bad(ppath + ".type", "This model does not support file input.");
    } else {
      return Bad(ppath + ".type",
                 absl::StrCat("Invalid value: '", type, "'. Supported values are: ",
                              assistant ? "'text' and 'refusal'." : "'text' and 'image_url'."));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<protocol::Message> ParseMessage(const Json& m, size_t index) {
  std::string path = absl::StrCat("messages[", index, "]");
  if (!m.is_object()) return WrongType(path, "an object");
  const Json* role_field = Field(m, "role");
  if (!role_field) return Bad(path + ".role", absl::StrCat("'", path, ".role' is required"));
  if (!role_field->is_string()) return WrongType(path + ".role", "a string");
  absl::StatusOr<protocol::Role> role = protocol::ParseRole(role_field->get<std::string>());
  if (!role.ok()) return WithParam(role.status(), path + ".role");
  protocol::Message msg;
  msg.role = *role;
  RETURN_IF_ERROR(ParseContent(m, path, msg.role, &msg.content));
  if (const Json* name = Field(m, "name"); name != nullptr && !name->is_string()) {
    return WrongType(path + ".name", "a string");
  }
  if (const Json* rc = Field(m, "reasoning_content")) {
    if (!rc->is_string()) return WrongType(path + ".reasoning_content", "a string");
    msg.reasoning_content = rc->get<std::string>();
  }
  if (const Json* tcid = Field(m, "tool_call_id")) {
    if (!tcid->is_string()) return WrongType(path + ".tool_call_id", "a string");
    msg.tool_call_id = tcid->get<std::string>();
  }
  if (const Json* prefix = Field(m, "prefix")) {
    if (!prefix->is_boolean()) return WrongType(path + ".prefix", "a boolean");
    msg.prefix = prefix->get<bool>();
  }
  if (const Json* tcs = Field(m, "tool_calls")) {
    if (!tcs->is_array()) return WrongType(path + ".tool_calls", "an array");
    for (size_t i = 0; i < tcs->size(); ++i) {
      const Json& tc = (*tcs)[i];
      std::string tpath = absl::StrCat(path, ".tool_calls[", i, "]");
      if (!tc.is_object()) return WrongType(tpath, "an object");
      protocol::ToolCall call;
      RETURN_IF_ERROR(GetString(tc, "id", &call.id));
      const Json* fn = Field(tc, "function");
      if (!fn || !fn->is_object()) return WrongType(tpath + ".function", "an object");
      const Json* name = Field(*fn, "name");
      if (!name || !name->is_string()) return WrongType(tpath + ".function.name", "a string");
      call.name = name->get<std::string>();
      const Json* args = Field(*fn, "arguments");
      if (args == nullptr) {
        call.arguments = protocol::PyJson::Object();
      } else if (args->is_string()) {
        absl::StatusOr<protocol::PyJson> parsed =
            protocol::ParseToolArguments(args->get<std::string>());
        if (!parsed.ok()) return WithParam(parsed.status(), tpath + ".function.arguments");
        call.arguments = *std::move(parsed);
      } else if (args->is_object()) {  // accepted and serialised (spec §5 case 4)
        absl::StatusOr<protocol::PyJson> parsed = protocol::PyJson::FromNlohmann(*args);
        if (!parsed.ok()) return WithParam(parsed.status(), tpath + ".function.arguments");
        call.arguments = *std::move(parsed);
      } else {
        return Bad(tpath + ".function.arguments", protocol::kMsgToolArgumentsNotObject);
      }
      msg.tool_calls.push_back(std::move(call));
    }
  }
  return msg;
}

absl::Status ParseTools(const Json& obj, protocol::Conversation* conv) {
  const Json* tools = Field(obj, "tools");
  if (tools) {
    if (!tools->is_array()) return WrongType("tools", "an array");
    for (size_t i = 0; i < tools->size(); ++i) {
      const Json& t = (*tools)[i];
      std::string path = absl::StrCat("tools[", i, "]");
      if (!t.is_object()) return WrongType(path, "an object");
      std::string type = "function";
      RETURN_IF_ERROR(GetString(t, "type", &type));
      if (type != "function") {
        return Bad(path + ".type", absl::StrCat("tool type '", type, "' is not supported"));
      }
      const Json* fn = Field(t, "function");
      if (!fn || !fn->is_object()) return WrongType(path + ".function", "an object");
      protocol::ToolDefinition def;
      const Json* name = Field(*fn, "name");
      if (!name || !name->is_string()) return WrongType(path + ".function.name", "a string");
      def.name = name->get<std::string>();
      RETURN_IF_ERROR(codec_util::CheckOpenAiName(def.name, path + ".function.name"));
      RETURN_IF_ERROR(GetString(*fn, "description", &def.description));
      if (const Json* params = Field(*fn, "parameters")) {
        if (!params->is_object()) return WrongType(path + ".function.parameters", "an object");
        absl::StatusOr<protocol::PyJson> p = protocol::PyJson::FromNlohmann(*params);
        if (!p.ok()) return WithParam(p.status(), path + ".function.parameters");
        def.parameters = *std::move(p);
      }
      conv->tools.push_back(std::move(def));
    }
  }
  if (const Json* tc = Field(obj, "tool_choice")) {
    if (tc->is_string()) {
      ASSIGN_OR_RETURN(conv->tool_choice,
                       codec_util::ToolChoiceMode(tc->get_ref<const std::string&>()));
    } else if (tc->is_object()) {
      const Json* fn = Field(*tc, "function");
      const Json* name = fn && fn->is_object() ? Field(*fn, "name") : nullptr;
      if (!name || !name->is_string()) return WrongType("tool_choice.function.name", "a string");
      conv->tool_choice = protocol::ToolChoice::Named(name->get<std::string>());
    } else {
      return WrongType("tool_choice", "a string or an object");
    }
  }
  return absl::OkStatus();
}

absl::Status ParseResponseFormat(const Json& obj, protocol::Conversation* conv) {
  const Json* rf = Field(obj, "response_format");
  if (!rf) return absl::OkStatus();
  if (!rf->is_object()) return WrongType("response_format", "an object");
  std::string type;
  RETURN_IF_ERROR(GetString(*rf, "type", &type));
  if (type == "text") return absl::OkStatus();
  if (type != "json_object" && type != "json_schema") {
    return Bad("response_format.type",
               absl::StrCat("response_format type '", type,
                            "' is not one of 'text', 'json_object', 'json_schema'"));
  }
  if (type == "json_schema") {
    const Json* js = Field(*rf, "json_schema");
    if (!js || !js->is_object()) return WrongType("response_format.json_schema", "an object");
    RETURN_IF_ERROR(codec_util::CheckJsonSchemaName(*js, "response_format.json_schema.name"));
    if (const Json* strict = Field(*js, "strict"); strict != nullptr && !strict->is_boolean()) {
      return WrongType("response_format.json_schema.strict", "a boolean");
    }
  }
  absl::StatusOr<protocol::PyJson> format = protocol::PyJson::FromNlohmann(*rf);
  if (!format.ok()) return WithParam(format.status(), "response_format");
  conv->response_format = protocol::ResponseFormat{*std::move(format)};
  return absl::OkStatus();
}

absl::Status ParseThinking(const Json& obj, ChatCompletionRequest* req) {
  if (const Json* th = Field(obj, "thinking")) {
    if (!th->is_object()) return WrongType("thinking", "an object like {\"type\": \"enabled\"}");
    std::string type;
    RETURN_IF_ERROR(GetString(*th, "type", &type));
    if (type == "enabled") {
      req->thinking = true;
    } else if (type == "disabled") {
      req->thinking = false;
    } else {
      return Bad("thinking.type", "thinking.type must be 'enabled' or 'disabled'");
    }
  }
  if (const Json* kw = Field(obj, "chat_template_kwargs")) {
    if (!kw->is_object()) return WrongType("chat_template_kwargs", "an object");
    for (const char* key : {"thinking", "enable_thinking"}) {
      if (const Json* t = Field(*kw, key)) {
        if (!t->is_boolean()) {
          return WrongType(absl::StrCat("chat_template_kwargs.", key), "a boolean");
        }
        req->thinking = t->get<bool>();
      }
    }
  }
  RETURN_IF_ERROR(GetString(obj, "reasoning_effort", &req->reasoning_effort));
  if (!req->reasoning_effort.empty()) {
    RETURN_IF_ERROR(codec_util::CheckReasoningEffort(req->reasoning_effort, "reasoning_effort",
                                                     /*allow_none=*/true));
  }
  return absl::OkStatus();
}

std::vector<int> ByteValues(std::string_view s) {
  std::vector<int> out;
  out.reserve(s.size());
  for (unsigned char c : s) out.push_back(c);
  return out;
}

}  // namespace

absl::StatusOr<ChatCompletionRequest> ParseChatCompletionRequest(std::string_view body) {
  ASSIGN_OR_RETURN(Json obj, ParseObject(body));
  ChatCompletionRequest req;
  RETURN_IF_ERROR(ParseModel(obj, &req.model));
  const Json* messages = Field(obj, "messages");
  if (!messages) return Bad("messages", "'messages' is a required property");
  if (!messages->is_array()) return WrongType("messages", "an array");
  if (messages->empty()) {
    return protocol::MakeProtocolError(protocol::ProtocolError::kEmptyMessages, "messages",
                                       "'messages' must contain at least one message");
  }
  for (size_t i = 0; i < messages->size(); ++i) {
    ASSIGN_OR_RETURN(protocol::Message m, ParseMessage((*messages)[i], i));
    req.conversation.messages.push_back(std::move(m));
  }
  RETURN_IF_ERROR(ParseTools(obj, &req.conversation));
  RETURN_IF_ERROR(ParseResponseFormat(obj, &req.conversation));
  RETURN_IF_ERROR(ParseThinking(obj, &req));
  RETURN_IF_ERROR(ParseSampling(obj, &req.sampling));
  RETURN_IF_ERROR(GetBool(obj, "logprobs", &req.logprobs));
  RETURN_IF_ERROR(GetBool(obj, "parallel_tool_calls", &req.parallel_tool_calls));
  RETURN_IF_ERROR(codec_util::ReadThinkingTokenBudget(obj, &req.thinking_token_budget));
  RETURN_IF_ERROR(codec_util::ReadCacheSalt(obj, &req.cache_salt));
  RETURN_IF_ERROR(codec_util::ReadTrafficClass(obj, &req.traffic_class));
  RETURN_IF_ERROR(GetBool(obj, "return_token_ids", &req.return_token_ids));
  std::optional<int64_t> top;
  RETURN_IF_ERROR(GetInt(obj, "top_logprobs", 0, 20, &top));
  if (top) {
    if (!req.logprobs && *top > 0) {
      return Bad("top_logprobs", "'top_logprobs' requires 'logprobs' to be true");
    }
    req.top_logprobs = static_cast<int>(*top);
  }
  return req;
}

absl::StatusOr<CompletionRequest> ParseCompletionRequest(std::string_view body) {
  ASSIGN_OR_RETURN(Json obj, ParseObject(body));
  CompletionRequest req;
  RETURN_IF_ERROR(ParseModel(obj, &req.model));
  const Json* prompt = Field(obj, "prompt");
  if (!prompt) return Bad("prompt", "'prompt' is a required property");
  // Accepted shapes: "text", [ids...], and the one-element batches ["text"] and [[ids...]].
  const Json* p = prompt;
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) {
    p = &(*p)[0];
  } else if (p->is_array() && !p->empty() && ((*p)[0].is_string() || (*p)[0].is_array())) {
    return WithParam(absl::UnimplementedError("batched prompts (more than one prompt per "
                                              "request) are not supported; send one request "
                                              "per prompt"),
                     "prompt");
  }
  if (p->is_string()) {
    req.prompt_text = p->get<std::string>();
    if (req.prompt_text.empty()) return Bad("prompt", "'prompt' must not be empty");
  } else if (p->is_array()) {
    if (p->empty()) return Bad("prompt", "'prompt' must not be empty");
    req.prompt_is_ids = true;
    for (const Json& id : *p) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
        return Bad("prompt", "'prompt' must be a string or an array of token ids");
      }
      req.prompt_ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
  } else {
    return WrongType("prompt", "a string or an array of token ids");
  }
  RETURN_IF_ERROR(GetBool(obj, "echo", &req.echo));
  std::optional<int64_t> lp;
  RETURN_IF_ERROR(GetInt(obj, "logprobs", 0, 20, &lp));
  if (lp) req.logprobs = static_cast<int>(*lp);
  std::optional<int64_t> plp;
  RETURN_IF_ERROR(GetInt(obj, "prompt_logprobs", 0, 20, &plp));
  if (plp) req.prompt_logprobs = static_cast<int>(*plp);
  RETURN_IF_ERROR(codec_util::ReadCacheSalt(obj, &req.cache_salt));
  RETURN_IF_ERROR(codec_util::ReadTrafficClass(obj, &req.traffic_class));
  RETURN_IF_ERROR(GetBool(obj, "return_token_ids", &req.return_token_ids));
  RETURN_IF_ERROR(GetBool(obj, "speculative", &req.speculative));
  RETURN_IF_ERROR(ParseSampling(obj, &req.sampling));
  // best_of is not implemented beyond n (docs/protocol.md); OpenAI's checks still apply, except
  // that best_of == n (SGLang's bench_serving sends best_of: 1 with stream) means n samples.
  std::optional<int64_t> best_of;
  RETURN_IF_ERROR(GetInt(obj, "best_of", 1, 20, &best_of));
  if (best_of && *best_of != req.sampling.n && req.sampling.stream) {
    return Bad("best_of", "'best_of' cannot be used with 'stream'");
  }
  if (best_of && *best_of < req.sampling.n) {
    return Bad("best_of", "'best_of' must be greater than or equal to 'n'");
  }
  if (const Json* suffix = Field(obj, "suffix")) {
    if (!suffix->is_string()) return WrongType("suffix", "a string");
    if (!suffix->get<std::string>().empty()) {
      return WithParam(absl::UnimplementedError("'suffix' is not supported"), "suffix");
    }
  }
  return req;
}

nlohmann::ordered_json UsageJson(const Usage& u) {
  return {
      {"prompt_tokens", u.prompt_tokens},
      {"completion_tokens", u.completion_tokens},
      {"total_tokens", u.prompt_tokens + u.completion_tokens},
      {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}},
      {"completion_tokens_details", {{"reasoning_tokens", u.reasoning_tokens}}},
      {"prompt_cache_hit_tokens", u.cached_tokens},
      {"prompt_cache_miss_tokens", u.prompt_tokens - u.cached_tokens},
  };
}

nlohmann::ordered_json ChatLogprobEntry(const TokenLogprobText& t, bool with_top) {
  nlohmann::ordered_json top = nlohmann::ordered_json::array();
  if (with_top) {
    for (const auto& [bytes, lp] : t.top) {
      top.push_back({{"token", bytes}, {"logprob", lp}, {"bytes", ByteValues(bytes)}});
    }
  }
  return {{"token", t.bytes},
          {"logprob", t.logprob},
          {"bytes", ByteValues(t.bytes)},
          {"top_logprobs", top}};
}

nlohmann::ordered_json CompletionLogprobsJson(const CompletionLogprobs& lp) {
  nlohmann::ordered_json token_logprobs = nlohmann::ordered_json::array();
  for (const auto& v : lp.token_logprobs) {
    token_logprobs.push_back(v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json());
  }
  nlohmann::ordered_json top = nlohmann::ordered_json::array();
  for (const auto& entry : lp.top_logprobs) {
    if (!entry) {
      top.push_back(nullptr);
      continue;
    }
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [tok, v] : *entry) {
      if (!m.contains(tok)) m[tok] = v;  // the same text from two ids: keep the likelier
    }
    top.push_back(std::move(m));
  }
  return {{"tokens", lp.tokens},
          {"token_logprobs", token_logprobs},
          {"top_logprobs", top},
          {"text_offset", lp.text_offset}};
}

nlohmann::ordered_json ChatCompletionJson(
    const std::string& id, int64_t created, const std::string& model,
    const std::vector<ChatChoiceOut>& choices, const Usage& usage,
    const std::optional<std::vector<int32_t>>& prompt_token_ids) {
  nlohmann::ordered_json out_choices = nlohmann::ordered_json::array();
  for (const ChatChoiceOut& c : choices) {
    nlohmann::ordered_json message = {{"role", "assistant"}};
    message["content"] = c.content ? nlohmann::ordered_json(*c.content) : nlohmann::ordered_json();
    if (c.reasoning_content) message["reasoning_content"] = *c.reasoning_content;
    if (!c.tool_calls.empty()) {
      nlohmann::ordered_json calls = nlohmann::ordered_json::array();
      for (const ChatToolCallOut& t : c.tool_calls) {
        calls.push_back({{"id", t.id},
                         {"type", "function"},
                         {"function", {{"name", t.name}, {"arguments", t.arguments}}}});
      }
      message["tool_calls"] = std::move(calls);
    }
    out_choices.push_back({{"index", c.index},
                           {"message", std::move(message)},
                           {"logprobs", c.logprobs ? *c.logprobs : nlohmann::ordered_json()},
                           {"finish_reason", c.finish_reason}});
    if (c.token_ids) out_choices.back()["token_ids"] = *c.token_ids;
  }
  nlohmann::ordered_json out = {{"id", id},
                                {"object", "chat.completion"},
                                {"created", created},
                                {"model", model},
                                {"system_fingerprint", "deepinfer"},
                                {"choices", std::move(out_choices)},
                                {"usage", UsageJson(usage)}};
  if (prompt_token_ids) out["prompt_token_ids"] = *prompt_token_ids;
  return out;
}

std::string ChatFinishReason(protocol::FinishReason r) {
  switch (r) {
    case protocol::FinishReason::kLength:
      return "length";
    case protocol::FinishReason::kToolCalls:
      return "tool_calls";
    default:
      return "stop";
  }
}

std::optional<nlohmann::ordered_json> ChatDeltaForEvent(const protocol::OutputEvent& e) {
  using OJson = nlohmann::ordered_json;
  using Type = protocol::OutputEvent::Type;
  switch (e.type) {
    case Type::kReasoningDelta:
      return OJson{{"reasoning_content", e.text}};
    case Type::kContentDelta:
      return OJson{{"content", e.text}};
    case Type::kToolCallStart:
      return OJson{{"tool_calls",
                    OJson::array({{{"index", e.tool_index},
                                   {"id", e.tool_call_id},
                                   {"type", "function"},
                                   {"function", {{"name", e.tool_name}, {"arguments", ""}}}}})}};
    case Type::kToolCallArguments:
      return OJson{{"tool_calls", OJson::array({{{"index", e.tool_index},
                                                 {"function", {{"arguments", e.text}}}}})}};
    case Type::kToolCallEnd:
      return std::nullopt;
    case Type::kFinish:
      return OJson::object();
  }
  return std::nullopt;
}

ChatChoiceOut ChatChoiceFromEvents(std::span<const protocol::OutputEvent> events,
                                   bool with_reasoning) {
  const protocol::ParsedOutput po = protocol::Aggregate(events);
  ChatChoiceOut c;
  const bool truncated = po.finish_reason == protocol::FinishReason::kLength;
  for (const protocol::ParsedToolCall& t : po.tool_calls) {
    if (t.valid || truncated) c.tool_calls.push_back({t.id, t.name, t.arguments});
  }
  if (!(po.content.empty() && !c.tool_calls.empty())) c.content = po.content;
  if (with_reasoning) c.reasoning_content = po.reasoning;
  c.finish_reason = ChatFinishReason(po.finish_reason);
  return c;
}

nlohmann::ordered_json ChatChunkJson(const std::string& id, int64_t created,
                                     const std::string& model, int index,
                                     nlohmann::ordered_json delta, const std::string& finish_reason,
                                     std::optional<nlohmann::ordered_json> logprobs,
                                     bool usage_null) {
  nlohmann::ordered_json choice = {
      {"index", index},
      {"delta", std::move(delta)},
      {"logprobs", logprobs ? *logprobs : nlohmann::ordered_json()},
      {"finish_reason",
       finish_reason.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(finish_reason)}};
  nlohmann::ordered_json out = {{"id", id},
                                {"object", "chat.completion.chunk"},
                                {"created", created},
                                {"model", model},
                                {"system_fingerprint", "deepinfer"},
                                {"choices", nlohmann::ordered_json::array({std::move(choice)})}};
  if (usage_null) out["usage"] = nullptr;
  return out;
}

nlohmann::ordered_json ChatUsageChunkJson(const std::string& id, int64_t created,
                                          const std::string& model, const Usage& usage) {
  return {{"id", id},
          {"object", "chat.completion.chunk"},
          {"created", created},
          {"model", model},
          {"system_fingerprint", "deepinfer"},
          {"choices", nlohmann::ordered_json::array()},
          {"usage", UsageJson(usage)}};
}

nlohmann::ordered_json CompletionJson(const std::string& id, int64_t created,
                                      const std::string& model,
                                      const std::vector<CompletionChoiceOut>& choices,
                                      const std::optional<Usage>& usage) {
  nlohmann::ordered_json out_choices = nlohmann::ordered_json::array();
  for (const CompletionChoiceOut& c : choices) {
    out_choices.push_back(
        {{"index", c.index},
         {"text", c.text},
         {"logprobs", c.logprobs ? *c.logprobs : nlohmann::ordered_json()},
         {"finish_reason", c.finish_reason.empty() ? nlohmann::ordered_json()
                                                   : nlohmann::ordered_json(c.finish_reason)}});
    if (c.prompt_logprobs) out_choices.back()["prompt_logprobs"] = *c.prompt_logprobs;
    if (c.prompt_token_ids) out_choices.back()["prompt_token_ids"] = *c.prompt_token_ids;
    if (c.token_ids) out_choices.back()["token_ids"] = *c.token_ids;
  }
  nlohmann::ordered_json out = {
      {"id", id},       {"object", "text_completion"},       {"created", created},
      {"model", model}, {"system_fingerprint", "deepinfer"}, {"choices", std::move(out_choices)}};
  if (usage) out["usage"] = UsageJson(*usage);
  return out;
}

std::string DumpJson(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string SseEvent(const nlohmann::ordered_json& j) {
  return absl::StrCat("data: ", DumpJson(j), "\n\n");
}

}  // namespace deepinfer::api
