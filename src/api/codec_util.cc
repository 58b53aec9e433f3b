#include "api/codec_util.h"

#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "api/errors.h"
#include "api/openai_codec.h"
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

std::string NamedSseEvent(const Json& event) {
  const Json* type = Field(event, "type");
  return absl::StrCat(
      "event: ", type != nullptr && type->is_string() ? type->get<std::string>() : "message",
      "\ndata: ", DumpJson(event), "\n\n");
}

const Json* Field(const Json& obj, const char* name) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::StatusOr<Json> ParseObjectBody(std::string_view body) {
  Json j = Json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Bad("", "the request body is not valid JSON");
  if (!j.is_object()) return Bad("", "the request body must be a JSON object");
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
      return Bad(path, absl::StrCat("'", AbslView(path), "' is too large"));
    }
    v = f->get<int64_t>();
  } else if (f->is_number_float() && std::floor(f->get<double>()) == f->get<double>() &&
             std::fabs(f->get<double>()) < 9e15) {
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

}  // namespace deepinfer::api::codec_util
