#include "model/hf_config.h"

#include <cmath>
#include <filesystem>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/status.h"
#include "common/strings.h"

namespace deepinfer::model {
namespace {

using Json = nlohmann::json;

// An integer value of `j` (integral floats allowed). False when not an integer.
bool AsInt(const Json& j, int64_t* out) {
  if (j.is_number_unsigned()) {
    uint64_t v = j.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    *out = static_cast<int64_t>(v);
    return true;
  }
  if (j.is_number_integer()) {
    *out = j.get<int64_t>();
    return true;
  }
  if (j.is_number_float()) {
    double d = j.get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.0e15) return false;
    *out = static_cast<int64_t>(d);
    return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<HfConfig> HfConfig::Load(const std::string& dir) {
  std::error_code ec;
  std::string path = dir;
  if (std::filesystem::is_directory(dir, ec)) {
    path = (std::filesystem::path(dir) / "config.json").string();
  }
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open (no config.json?)"));
  }
  return Parse(*text, path);
}

absl::StatusOr<HfConfig> HfConfig::Parse(std::string_view text, const std::string& source) {
  auto root = std::make_shared<Json>(Json::parse(text.begin(), text.end(), nullptr,
                                                 /*allow_exceptions=*/false));
  if (root->is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not valid JSON"));
  }
  if (!root->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": top level is not a JSON object"));
  }
  const Json* node = root.get();
  return HfConfig(std::move(root), node, source, "");
}

std::string HfConfig::KeyPath(std::string_view key) const {
  return absl::StrCat(prefix_, AbslView(key));
}

const Json* HfConfig::Find(std::string_view key) const {
  auto it = json_->find(std::string(key));
  if (it == json_->end() || it->is_null()) return nullptr;
  return &*it;
}

absl::Status HfConfig::Missing(std::string_view key) const {
  return absl::InvalidArgumentError(
      absl::StrCat(source_, ": missing required key '", KeyPath(key), "'"));
}

absl::Status HfConfig::WrongType(std::string_view key, std::string_view expected) const {
  const Json* j = Find(key);
  return absl::InvalidArgumentError(absl::StrCat(source_, ": key '", KeyPath(key), "' must be ",
                                                 AbslView(expected), ", got ",
                                                 j ? j->dump() : std::string("null")));
}

bool HfConfig::Has(std::string_view key) const { return Find(key) != nullptr; }

absl::StatusOr<int64_t> HfConfig::GetInt(std::string_view key) const {
  const Json* j = Find(key);
  if (j == nullptr) return Missing(key);
  int64_t v = 0;
  if (!AsInt(*j, &v)) return WrongType(key, "an integer");
  return v;
}

absl::StatusOr<int64_t> HfConfig::GetInt(std::string_view key, int64_t default_value) const {
  if (!Has(key)) return default_value;
  return GetInt(key);
}

absl::StatusOr<double> HfConfig::GetDouble(std::string_view key) const {
  const Json* j = Find(key);
  if (j == nullptr) return Missing(key);
  if (!j->is_number()) return WrongType(key, "a number");
  return j->get<double>();
}

absl::StatusOr<double> HfConfig::GetDouble(std::string_view key, double default_value) const {
  if (!Has(key)) return default_value;
  return GetDouble(key);
}

absl::StatusOr<bool> HfConfig::GetBool(std::string_view key) const {
  const Json* j = Find(key);
  if (j == nullptr) return Missing(key);
  if (!j->is_boolean()) return WrongType(key, "a boolean");
  return j->get<bool>();
}

absl::StatusOr<bool> HfConfig::GetBool(std::string_view key, bool default_value) const {
  if (!Has(key)) return default_value;
  return GetBool(key);
}

absl::StatusOr<std::string> HfConfig::GetString(std::string_view key) const {
  const Json* j = Find(key);
  if (j == nullptr) return Missing(key);
  if (!j->is_string()) return WrongType(key, "a string");
  return j->get<std::string>();
}

absl::StatusOr<std::string> HfConfig::GetString(std::string_view key,
                                                const std::string& default_value) const {
  if (!Has(key)) return default_value;
  return GetString(key);
}

absl::StatusOr<std::vector<int64_t>> HfConfig::GetIntList(std::string_view key) const {
  const Json* j = Find(key);
  if (j == nullptr) return Missing(key);
  std::vector<int64_t> out;
  int64_t v = 0;
  if (AsInt(*j, &v)) return std::vector<int64_t>{v};
  if (!j->is_array()) return WrongType(key, "an integer or a list of integers");
  for (const Json& e : *j) {
    if (!AsInt(e, &v)) return WrongType(key, "a list of integers");
    out.push_back(v);
  }
  return out;
}

absl::StatusOr<std::vector<double>> HfConfig::GetDoubleList(std::string_view key) const {
  const Json* j = Find(key);
  if (j == nullptr) return Missing(key);
  if (!j->is_array()) return WrongType(key, "a list of numbers");
  std::vector<double> out;
  for (const Json& e : *j) {
    if (!e.is_number()) return WrongType(key, "a list of numbers");
    out.push_back(e.get<double>());
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> HfConfig::GetStringList(std::string_view key) const {
  const Json* j = Find(key);
  if (j == nullptr) return Missing(key);
  if (!j->is_array()) return WrongType(key, "a list of strings");
  std::vector<std::string> out;
  for (const Json& e : *j) {
    if (!e.is_string()) return WrongType(key, "a list of strings");
    out.push_back(e.get<std::string>());
  }
  return out;
}

absl::StatusOr<HfConfig> HfConfig::GetObject(std::string_view key) const {
  const Json* j = Find(key);
  if (j == nullptr) return Missing(key);
  if (!j->is_object()) return WrongType(key, "an object");
  return HfConfig(root_, j, source_, absl::StrCat(KeyPath(key), "."));
}

absl::StatusOr<std::string> HfConfig::Architecture() const {
  ASSIGN_OR_RETURN(std::vector<std::string> archs, GetStringList("architectures"));
  if (archs.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": 'architectures' is empty"));
  }
  return archs.front();
}

}  // namespace deepinfer::model
