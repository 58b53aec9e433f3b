#include "api/generation_config.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/strings.h"
#include "nlohmann/json.hpp"

namespace deepinfer::api {

namespace {

using Json = nlohmann::json;

absl::Status BadField(std::string_view source, std::string_view field, std::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat(AbslView(source), ": field '", AbslView(field), "' ", AbslView(why)));
}

// A number in [lo, hi] (open at lo when `open_lo`); null or absent leaves `out` unset.
absl::Status Number(const Json& j, const char* field, double lo, double hi, bool open_lo,
                    std::string_view source, std::optional<double>* out) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_number()) return BadField(source, field, "must be a number");
  const double v = it->get<double>();
  if (!(open_lo ? v > lo : v >= lo) || !(v <= hi)) {
    return BadField(source, field,
                    absl::StrCat("must be in ", open_lo ? "(" : "[", lo, ", ", hi, "], got ", v));
  }
  *out = v;
  return absl::OkStatus();
}

}  // namespace

std::string SamplingDefaults::Describe() const {
  std::string s;
  auto add = [&s](std::string_view name, auto v) {
    if (!s.empty()) s += " ";
    absl::StrAppend(&s, AbslView(name), "=", v);
  };
  if (temperature) add("temperature", *temperature);
  if (top_p) add("top_p", *top_p);
  if (top_k) add("top_k", *top_k);
  if (min_p) add("min_p", *min_p);
  if (repetition_penalty) add("repetition_penalty", *repetition_penalty);
  if (max_new_tokens) add("max_new_tokens", *max_new_tokens);
  return s;
}

absl::StatusOr<SamplingDefaults> ParseGenerationConfig(std::string_view json,
                                                       std::string_view source) {
  Json j = Json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(AbslView(source), " is not a JSON object"));
  }
  SamplingDefaults d;
  if (absl::Status st = Number(j, "temperature", 0, 2, false, source, &d.temperature); !st.ok())
    return st;
  if (absl::Status st = Number(j, "top_p", 0, 1, true, source, &d.top_p); !st.ok()) return st;
  if (absl::Status st = Number(j, "min_p", 0, 1, false, source, &d.min_p); !st.ok()) return st;
  if (absl::Status st = Number(j, "repetition_penalty", 0, 2, true, source, &d.repetition_penalty);
      !st.ok()) {
    return st;
  }
  if (auto it = j.find("top_k"); it != j.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() < -1 || it->get<int64_t>() > (1 << 20)) {
      return BadField(source, "top_k", "must be an integer in [-1, 2^20]");
    }
    d.top_k = static_cast<int>(it->get<int64_t>());
  }
  if (auto it = j.find("max_new_tokens"); it != j.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 1) {
      return BadField(source, "max_new_tokens", "must be an integer >= 1");
    }
    d.max_new_tokens = it->get<int64_t>();
  }
  return d;
}

absl::StatusOr<SamplingDefaults> ReadGenerationConfig(const std::string& model_dir) {
  const std::filesystem::path path = std::filesystem::path(model_dir) / "generation_config.json";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return SamplingDefaults{};
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path.string()));
  std::stringstream buf;
  buf << in.rdbuf();
  return ParseGenerationConfig(buf.str(), path.string());
}

}  // namespace deepinfer::api
