#include "sim/sim_io.h"

#include <filesystem>
#include <fstream>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace deepinfer::sim {

absl::StatusOr<nlohmann::json> ConfigReader::Parse(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false,
                                           /*ignore_comments=*/true);
  if (j.is_discarded()) return absl::InvalidArgumentError("config: not valid JSON");
  if (!j.is_object()) return absl::InvalidArgumentError("config: top level must be an object");
  return j;
}

absl::StatusOr<double> ConfigReader::Number(const std::string& field, double def, double lo,
                                            double hi) const {
  if (!Has(field)) return def;
  const auto& v = (*obj_)[field];
  if (!v.is_number() || v.get<double>() < lo || v.get<double>() > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat(PathOf(field), ": expected a number in [", lo, ", ", hi, "]"));
  }
  return v.get<double>();
}

absl::StatusOr<int64_t> ConfigReader::Int(const std::string& field, int64_t def, int64_t lo,
                                          int64_t hi) const {
  if (!Has(field)) return def;
  const auto& v = (*obj_)[field];
  if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat(PathOf(field), ": expected an integer in [", lo, ", ", hi, "]"));
  }
  return v.get<int64_t>();
}

absl::StatusOr<std::string> ConfigReader::String(const std::string& field,
                                                 const std::string& def) const {
  if (!Has(field)) return def;
  const auto& v = (*obj_)[field];
  if (!v.is_string()) return absl::InvalidArgumentError(PathOf(field) + ": expected a string");
  return v.get<std::string>();
}

absl::StatusOr<bool> ConfigReader::Bool(const std::string& field, bool def) const {
  if (!Has(field)) return def;
  const auto& v = (*obj_)[field];
  if (!v.is_boolean()) return absl::InvalidArgumentError(PathOf(field) + ": expected true/false");
  return v.get<bool>();
}

absl::StatusOr<ConfigReader> ConfigReader::Object(const std::string& field) const {
  static const nlohmann::json kEmpty = nlohmann::json::object();
  if (!Has(field)) return ConfigReader(&kEmpty, PathOf(field));
  const auto& v = (*obj_)[field];
  if (!v.is_object()) return absl::InvalidArgumentError(PathOf(field) + ": expected an object");
  return ConfigReader(&v, PathOf(field));
}

absl::Status ConfigReader::RejectUnknown(const std::vector<std::string>& known) const {
  if (!obj_) return absl::OkStatus();
  const std::set<std::string> k(known.begin(), known.end());
  for (auto it = obj_->begin(); it != obj_->end(); ++it) {
    if (!k.count(it.key())) {
      return absl::InvalidArgumentError(absl::StrCat(PathOf(it.key()), ": unknown field"));
    }
  }
  return absl::OkStatus();
}

void Results::Table(const std::string& name, const std::vector<std::string>& header) {
  tables_[name] = {absl::StrJoin(header, ",")};
}

void Results::Row(const std::string& name, const std::vector<std::string>& cells) {
  tables_[name].push_back(absl::StrJoin(cells, ","));
}

absl::Status Results::Write(const std::string& dir) const {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  for (const auto& [name, rows] : tables_) {
    std::ofstream out(dir + "/" + name + ".csv", std::ios::binary | std::ios::trunc);
    for (const std::string& r : rows) out << r << "\n";
    if (!out) return absl::InternalError(absl::StrCat("write failed: ", dir, "/", name, ".csv"));
  }
  std::ofstream out(dir + "/summary.json", std::ios::binary | std::ios::trunc);
  out << summary_.dump(2) << "\n";
  if (!out) return absl::InternalError(absl::StrCat("write failed: ", dir, "/summary.json"));
  return absl::OkStatus();
}

std::string Fmt(double x) { return absl::StrFormat("%.6f", x); }

}  // namespace deepinfer::sim
