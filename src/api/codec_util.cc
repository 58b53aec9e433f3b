#include "api/codec_util.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "api/errors.h"
#include "api/json_body.h"
#include "api/openai_codec.h"
#include "common/status.h"
#include "common/strings.h"

namespace deepinfer::api::codec_util {

absl::Status Bad(std::string_view param, std::string_view message) {
  return WithParam(absl::InvalidArgumentError(std::string(message)), param);
}

absl::Status WrongType(std::string_view param, std::string_view expected) {
  return Bad(param, absl::StrCat("'", AbslView(param), "' must be ", AbslView(expected)));
}

absl::StatusOr<protocol::ToolChoice> ToolChoiceMode(const std::string& mode) {
  if (mode == "auto") return protocol::ToolChoice::Auto();
  if (mode == "none") return protocol::ToolChoice::None();
  if (mode == "required") return protocol::ToolChoice::Required();
  return Bad("tool_choice",
             absl::StrCat("tool_choice '", mode, "' is not one of 'none', 'auto', 'required'"));
}

absl::Status CheckJsonSchemaName(const Json& json_schema, std::string_view path) {
  const Json* name = Field(json_schema, "name");
  if (name == nullptr) {
    return Bad(path, absl::StrCat("Missing required parameter: '", AbslView(path), "'."));
  }
  if (!name->is_string()) return WrongType(path, "a string");
  return CheckOpenAiName(name->get_ref<const std::string&>(), path);
}

absl::Status CheckOpenAiName(const std::string& n, std::string_view path) {
  const bool ok_chars = std::all_of(n.begin(), n.end(), [](unsigned char c) {
    return absl::ascii_isalnum(c) || c == '_' || c == '-';
  });
  if (n.empty() || n.size() > 64 || !ok_chars) {
    return Bad(path, absl::StrCat("Invalid '", AbslView(path), "': '", n,
                                  "'. Expected a string of 1 to 64 characters from a-z, A-Z, "
                                  "0-9, underscores and dashes."));
  }
  return absl::OkStatus();
}

absl::Status CheckReasoningEffort(const std::string& effort, std::string_view path,
                                  bool allow_none) {
  static constexpr const char* kEfforts[] = {"minimal", "low", "medium", "high",
                                             "xhigh",   "max", "ultra"};
  if (allow_none && effort == "none") return absl::OkStatus();
  for (const char* e : kEfforts) {
    if (effort == e) return absl::OkStatus();
  }
  return Bad(path, absl::StrCat("Invalid value: '", effort,
                                "'. Supported values are: ", allow_none ? "'none', " : "",
                                "'minimal', 'low', 'medium', 'high', 'xhigh', 'max' and 'ultra'."));
}

std::string NamedSseEvent(const Json& event) {
  const Json* type = Field(event, "type");
  return absl::StrCat(
      "event: ", type != nullptr && type->is_string() ? type->get<std::string>() : "message",
      "\ndata: ", DumpJson(event), "\n\n");
}

absl::Status ReadCacheSalt(const Json& obj, std::string* out) {
  const Json* f = Field(obj, "cache_salt");
  if (f == nullptr) return absl::OkStatus();
  if (!f->is_string() || f->get_ref<const std::string&>().empty()) {
    return WrongType("cache_salt", "a non-empty string");
  }
  *out = f->get<std::string>();
  return absl::OkStatus();
}

absl::Status ReadTrafficClass(const Json& obj, std::optional<kv::TrafficClass>* out) {
  const Json* f = Field(obj, "traffic_class");
  if (f == nullptr) return absl::OkStatus();
  if (f->is_string() && f->get_ref<const std::string&>() == "chat") {
    *out = kv::TrafficClass::kChat;
  } else if (f->is_string() && f->get_ref<const std::string&>() == "agent") {
    *out = kv::TrafficClass::kAgent;
  } else {
    return WrongType("traffic_class", "one of 'chat' or 'agent'");
  }
  return absl::OkStatus();
}

absl::StatusOr<kv::TrafficClass> ResolveTrafficClass(std::optional<kv::TrafficClass> body,
                                                     std::string_view header) {
  if (body) return *body;
  const std::string value = absl::AsciiStrToLower(absl::StripAsciiWhitespace(AbslView(header)));
  if (value.empty() || value == "chat") return kv::TrafficClass::kChat;
  if (value == "agent") return kv::TrafficClass::kAgent;
  return Bad("X-Traffic-Class", "'X-Traffic-Class' must be one of 'chat' or 'agent'");
}

const Json* Field(const Json& obj, const char* name) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::StatusOr<Json> ParseObjectBody(std::string_view body) {
  absl::StatusOr<Json> j = ParseJsonLinear(body);
  if (!j.ok() && !ErrorCode(j.status()).empty()) return j.status();
  if (!j.ok()) return Bad("", "the request body is not valid JSON");
  if (!j->is_object()) return Bad("", "the request body must be a JSON object");
  return j;
}

absl::Status ReadString(const Json& obj, const char* name, std::string_view path,
                        std::optional<std::string>* out) {
  const Json* f = Field(obj, name);
  if (!f) return absl::OkStatus();
  if (!f->is_string()) return WrongType(path, "a string");
  *out = f->get<std::string>();
  return absl::OkStatus();
}

absl::Status ReadBool(const Json& obj, const char* name, std::string_view path,
                      std::optional<bool>* out) {
  const Json* f = Field(obj, name);
  if (!f) return absl::OkStatus();
  if (!f->is_boolean()) return WrongType(path, "a boolean");
  *out = f->get<bool>();
  return absl::OkStatus();
}

absl::Status ReadNumber(const Json& obj, const char* name, std::string_view path, double lo,
                        double hi, std::optional<double>* out) {
  const Json* f = Field(obj, name);
  if (!f) return absl::OkStatus();
  if (!f->is_number()) return WrongType(path, "a number");
  const double v = f->get<double>();
  if (!(v >= lo && v <= hi)) {
    return Bad(path, absl::StrCat("'", AbslView(path), "' must be between ", lo, " and ", hi,
                                  ", got ", v));
  }
  *out = v;
  return absl::OkStatus();
}

absl::Status ReadInt(const Json& obj, const char* name, std::string_view path, int64_t lo,
                     int64_t hi, std::optional<int64_t>* out) {
  const Json* f = Field(obj, name);
  if (!f) return absl::OkStatus();
  int64_t v = 0;
  if (f->is_number_integer()) {
    if (f->is_number_unsigned() && f->get<uint64_t>() > uint64_t{INT64_MAX}) {
      return Bad(path, absl::StrCat("'", AbslView(path), "' must be between ", lo, " and ", hi,
                                    ", got ", f->get<uint64_t>()));
    }
    v = f->get<int64_t>();
  } else if (f->is_number_float() && std::floor(f->get<double>()) == f->get<double>()) {
    // Integral beyond 9e15 (also integers too long for 64 bits, parsed as doubles): out of range.
    if (std::fabs(f->get<double>()) >= 9e15) {
      return Bad(path, absl::StrCat("'", AbslView(path), "' must be between ", lo, " and ", hi,
                                    ", got ", f->get<double>()));
    }
    v = static_cast<int64_t>(f->get<double>());
  } else {
    return WrongType(path, "an integer");
  }
  if (v < lo || v > hi) {
    return Bad(path, absl::StrCat("'", AbslView(path), "' must be between ", lo, " and ", hi,
                                  ", got ", v));
  }
  *out = v;
  return absl::OkStatus();
}

absl::Status ReadSeed(const Json& obj, const char* name, std::string_view path,
                      std::optional<uint64_t>* out) {
  const Json* f = Field(obj, name);
  if (!f) return absl::OkStatus();
  if (f->is_number_unsigned()) {  // nlohmann keeps non-negative integers up to 2^64-1 exact
    *out = f->get<uint64_t>();
    return absl::OkStatus();
  }
  if (f->is_number_integer()) {  // negative, >= -2^63
    *out = static_cast<uint64_t>(f->get<int64_t>());
    return absl::OkStatus();
  }
  if (!f->is_number_float() || std::floor(f->get<double>()) != f->get<double>()) {
    return WrongType(path, "an integer");
  }
  // Integer literals outside [-2^63, 2^64-1] arrive here as floats, as do 16.0-style values;
  // only the exactly representable small ones are taken.
  const double v = f->get<double>();
  if (std::fabs(v) >= 9e15) {
    return Bad(path, absl::StrCat("'", AbslView(path),
                                  "' must be an integer between -9223372036854775808 and "
                                  "18446744073709551615"));
  }
  *out = static_cast<uint64_t>(static_cast<int64_t>(v));
  return absl::OkStatus();
}

absl::Status ReadVllmSamplingExtensions(const Json& obj, SamplingFields* out) {
  RETURN_IF_ERROR(ReadInt(obj, "min_tokens", "min_tokens", 0, INT32_MAX, &out->min_tokens));
  const Json* st = Field(obj, "stop_token_ids");
  if (st == nullptr) return absl::OkStatus();
  if (!st->is_array()) return WrongType("stop_token_ids", "an array of token ids");
  for (const Json& t : *st) {
    if (!t.is_number_integer() || (!t.is_number_unsigned() && t.get<int64_t>() < 0) ||
        t.get<uint64_t>() > uint64_t{INT32_MAX}) {
      return WrongType("stop_token_ids", "an array of token ids");
    }
    out->stop_token_ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return absl::OkStatus();
}

absl::Status ReadThinkingTokenBudget(const Json& obj, std::optional<int64_t>* out) {
  return ReadInt(obj, "thinking_token_budget", "thinking_token_budget", 0, INT32_MAX, out);
}

absl::Status RejectImageParts(const protocol::Conversation& conversation) {
  // Depth-first over parts, tool results included.
  std::function<bool(const std::vector<protocol::ContentPart>&)> has_image =
      [&](const std::vector<protocol::ContentPart>& parts) {
        for (const protocol::ContentPart& p : parts) {
          if (p.kind == protocol::ContentPart::Kind::kImage) return true;
          if (p.kind == protocol::ContentPart::Kind::kToolResult && has_image(p.content)) {
            return true;
          }
        }
        return false;
      };
  for (size_t i = 0; i < conversation.messages.size(); ++i) {
    const protocol::Message& m = conversation.messages[i];
    if (!has_image(m.content)) continue;
    const std::string where = m.request_path.empty() ? absl::StrCat("messages[", i, "]")
                                                      : m.request_path;
    return WithParam(WithErrorCode(absl::InvalidArgumentError(absl::StrCat(
                                       where,
                                       ": image input is not supported yet (this server has no "
                                       "vision encoder); send text only")),
                                   "unsupported_content"),
                     absl::StrCat(where, ".content"));
  }
  return absl::OkStatus();
}

}  // namespace deepinfer::api::codec_util
