// Sampling defaults from the model directory's generation_config.json (Hugging Face), applied to
// request fields the client omitted, as vLLM's `--generation-config auto` (its default) does:
// temperature, top_p, top_k, min_p, repetition_penalty, and max_new_tokens as the default
// max_tokens of chat-like requests. A field the client sends always wins.
#ifndef DEEPINFER_API_GENERATION_CONFIG_H_
#define DEEPINFER_API_GENERATION_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace deepinfer::api {

struct SamplingDefaults {
  std::optional<double> temperature;         // [0, 2]
  std::optional<double> top_p;               // (0, 1]
  std::optional<int> top_k;                  // -1 / 0 = off, else >= 1
  std::optional<double> min_p;               // [0, 1]
  std::optional<double> repetition_penalty;  // (0, 2]
  std::optional<int64_t> max_new_tokens;     // >= 1

  bool empty() const {
    return !temperature && !top_p && !top_k && !min_p && !repetition_penalty && !max_new_tokens;
  }
  // "temperature=0.6 top_p=0.95" (the fields set), for the start-up log line.
  std::string Describe() const;
};

// Parses generation_config.json text. Fields other than the six above are ignored, do_sample
// included (vLLM reads the same six). Errors: InvalidArgument naming `source` and the field for
// malformed JSON, a wrong type or an out-of-range value.
absl::StatusOr<SamplingDefaults> ParseGenerationConfig(std::string_view json,
                                                       std::string_view source);

// Reads `<model_dir>/generation_config.json`; no file = no defaults. Errors: as
// ParseGenerationConfig, or the file cannot be read.
absl::StatusOr<SamplingDefaults> ReadGenerationConfig(const std::string& model_dir);

}  // namespace deepinfer::api

#endif  // DEEPINFER_API_GENERATION_CONFIG_H_
