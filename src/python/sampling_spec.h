// Sampling parameters as the Python package's SamplingParams carries them, and their resolution
// into engine::SamplingParams (issue #28). Every field is optional: an unset field takes the value
// of the model's generation_config.json when it sets one, else vLLM's default (temperature 1.0,
// top_p 1.0, max_tokens 16, ...). `seed` (vLLM's name) and `seq_seed` (DeepInfer's name) are the
// same per-sequence seed.
#ifndef DEEPINFER_PYTHON_SAMPLING_SPEC_H_
#define DEEPINFER_PYTHON_SAMPLING_SPEC_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/sampling_params.h"

namespace deepinfer::python {

// What the caller set; nullopt = unset.
struct SamplingSpec {
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> top_k;
  std::optional<double> min_p;
  std::optional<int64_t> max_tokens;
  std::optional<int64_t> min_tokens;
  std::optional<double> presence_penalty;
  std::optional<double> frequency_penalty;
  std::optional<double> repetition_penalty;
  std::optional<int64_t> n;
  std::optional<int64_t> logprobs;
  std::optional<int64_t> prompt_logprobs;
  // Seeds modulo 2^64 (the Python layer maps negative ints like the CLI's --seed does).
  std::optional<uint64_t> seed;
  std::optional<uint64_t> seq_seed;
  bool ignore_eos = false;
  bool skip_special_tokens = true;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  // so_args: schema_type name ("json_schema", "regex", "ebnf", "json_object") and schema text;
  // unset when so_schema_type is empty.
  std::string so_schema_type;
  std::string so_schema;
  bool so_flexible_whitespace = false;
};

// The model's generation_config.json values that vLLM takes as sampling defaults.
struct GenerationDefaults {
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> top_k;
  std::optional<double> min_p;
  std::optional<double> repetition_penalty;
  std::optional<int64_t> max_tokens;  // generation_config's max_new_tokens
};

// Reads DIR/generation_config.json. A missing file means no defaults. Errors: InvalidArgument
// for a file that is not a JSON object or a key of the wrong type (naming the file and key).
absl::StatusOr<GenerationDefaults> ReadGenerationDefaults(const std::string& dir);

// Engine parameters plus what the engine does not do (stop strings are matched on text).
struct ResolvedParams {
  engine::SamplingParams engine;
  std::vector<std::string> stop;
  bool skip_special_tokens = true;
};

// Resolves `spec` over `defaults`. Errors: InvalidArgument naming the argument (seed and
// seq_seed both set and different; a value out of its range, with the range; unknown
// so_args schema_type; a so_args schema that does not parse, with the compiler's message).
absl::StatusOr<ResolvedParams> ResolveSamplingSpec(const SamplingSpec& spec,
                                                   const GenerationDefaults& defaults);

}  // namespace deepinfer::python

#endif  // DEEPINFER_PYTHON_SAMPLING_SPEC_H_
