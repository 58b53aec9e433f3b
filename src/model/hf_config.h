// HfConfig: a Hugging Face config.json with typed getters whose errors name the file and key.
//
//   ASSIGN_OR_RETURN(HfConfig cfg, HfConfig::Load(dir));          // reads dir/config.json
//   ASSIGN_OR_RETURN(int64_t hidden, cfg.GetInt("hidden_size"));  // required
//   ASSIGN_OR_RETURN(double theta, cfg.GetDouble("rope_theta", 10000.0));  // optional
//   ASSIGN_OR_RETURN(HfConfig scaling, cfg.GetObject("rope_scaling"));
// Errors (all name the source file and the dotted key path, e.g. "config.json:
// rope_scaling.factor"):
//   NotFound        - the file does not exist
//   InvalidArgument - not valid JSON / not an object; a required key missing; a key of the wrong
//                     type (JSON null counts as missing for getters with a default)
// Integers given as floats with an integral value (e.g. 4096.0) are accepted by GetInt.
// No exceptions escape (nlohmann is used with allow_exceptions=false and type checks).
#ifndef DEEPINFER_MODEL_HF_CONFIG_H_
#define DEEPINFER_MODEL_HF_CONFIG_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace deepinfer::model {

class HfConfig {
 public:
  // Reads `dir`/config.json (or `dir` itself when it names a file).
  static absl::StatusOr<HfConfig> Load(const std::string& dir);
  // Parses JSON text; `source` names it in messages.
  static absl::StatusOr<HfConfig> Parse(std::string_view text, const std::string& source);

  // True when `key` is present and not null.
  bool Has(std::string_view key) const;

  absl::StatusOr<int64_t> GetInt(std::string_view key) const;
  absl::StatusOr<int64_t> GetInt(std::string_view key, int64_t default_value) const;
  absl::StatusOr<double> GetDouble(std::string_view key) const;  // ints accepted
  absl::StatusOr<double> GetDouble(std::string_view key, double default_value) const;
  absl::StatusOr<bool> GetBool(std::string_view key) const;
  absl::StatusOr<bool> GetBool(std::string_view key, bool default_value) const;
  absl::StatusOr<std::string> GetString(std::string_view key) const;
  absl::StatusOr<std::string> GetString(std::string_view key,
                                        const std::string& default_value) const;
  // A list of integers; a scalar integer is returned as a one-element list (HF's
  // `eos_token_id` may be either).
  absl::StatusOr<std::vector<int64_t>> GetIntList(std::string_view key) const;
  absl::StatusOr<std::vector<double>> GetDoubleList(std::string_view key) const;
  absl::StatusOr<std::vector<std::string>> GetStringList(std::string_view key) const;
  // A nested object as its own HfConfig (messages then name "parent.key").
  absl::StatusOr<HfConfig> GetObject(std::string_view key) const;

  // The first entry of "architectures" (InvalidArgument when missing or empty).
  absl::StatusOr<std::string> Architecture() const;

  const nlohmann::json& json() const { return *json_; }
  // The file the config came from (nested objects keep it; their keys print as "parent.key").
  const std::string& source() const { return source_; }

 private:
  HfConfig(std::shared_ptr<const nlohmann::json> root, const nlohmann::json* node,
           std::string source, std::string prefix)
      : root_(std::move(root)),
        json_(node),
        source_(std::move(source)),
        prefix_(std::move(prefix)) {}
  // Null when absent or JSON null.
  const nlohmann::json* Find(std::string_view key) const;
  absl::Status Missing(std::string_view key) const;
  absl::Status WrongType(std::string_view key, std::string_view expected) const;
  std::string KeyPath(std::string_view key) const;

  std::shared_ptr<const nlohmann::json> root_;  // keeps the document alive for nested views
  const nlohmann::json* json_ = nullptr;
  std::string source_;
  std::string prefix_;  // "" or "rope_scaling."
};

}  // namespace deepinfer::model

#endif  // DEEPINFER_MODEL_HF_CONFIG_H_
