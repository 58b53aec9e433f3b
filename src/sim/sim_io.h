// Config reading and result writing for the simulator.
//
// ConfigReader wraps a parsed JSON object and reads typed fields with defaults; every error is
// InvalidArgument naming the full field path ("workload.chat.p_resume: expected a number in
// [0, 1]"). Results is an in-memory set of CSV tables plus a JSON summary, written under an
// output directory in one go, with fixed formatting so that equal runs give equal bytes
// (SIM-3). Thread-safety: single-threaded.
#ifndef DEEPINFER_SIM_SIM_IO_H_
#define DEEPINFER_SIM_SIM_IO_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace deepinfer::sim {

// Typed access to one JSON object of the config; see the file comment.
class ConfigReader {
 public:
  // `path` is this object's dotted path ("" for the root).
  ConfigReader(const nlohmann::json* obj, std::string path) : obj_(obj), path_(std::move(path)) {}

  // Parses `text`; InvalidArgument if it is not a JSON object.
  static absl::StatusOr<nlohmann::json> Parse(const std::string& text);

  absl::StatusOr<double> Number(const std::string& field, double def, double lo, double hi) const;
  absl::StatusOr<int64_t> Int(const std::string& field, int64_t def, int64_t lo, int64_t hi) const;
  absl::StatusOr<std::string> String(const std::string& field, const std::string& def) const;
  absl::StatusOr<bool> Bool(const std::string& field, bool def) const;
  // A sub-object (an empty one if absent); InvalidArgument if present and not an object.
  absl::StatusOr<ConfigReader> Object(const std::string& field) const;
  bool Has(const std::string& field) const { return obj_ && obj_->contains(field); }
  const nlohmann::json* raw() const { return obj_; }
  // Full dotted path of `field`.
  std::string PathOf(const std::string& field) const {
    return path_.empty() ? field : path_ + "." + field;
  }
  // InvalidArgument if the object has a field not in `known` (catches typos).
  absl::Status RejectUnknown(const std::vector<std::string>& known) const;

 private:
  const nlohmann::json* obj_;
  std::string path_;
};

// CSV tables + JSON summary of one run.
class Results {
 public:
  // Starts table `name` (file name.csv) with a header row.
  void Table(const std::string& name, const std::vector<std::string>& header);
  // Appends a row of preformatted cells to `name`.
  void Row(const std::string& name, const std::vector<std::string>& cells);
  nlohmann::json& summary() { return summary_; }
  // Writes every table and summary.json under `dir` (created if needed).
  absl::Status Write(const std::string& dir) const;

 private:
  std::map<std::string, std::vector<std::string>> tables_;
  nlohmann::json summary_ = nlohmann::json::object();
};

// Fixed-precision formatting used in every CSV cell (6 decimals).
std::string Fmt(double x);

}  // namespace deepinfer::sim

#endif  // DEEPINFER_SIM_SIM_IO_H_
