#include "python/sampling_spec.h"

#include <filesystem>
#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/status.h"
#include "engine/llm.h"
#include "nlohmann/json.hpp"

namespace deepinfer::python {
namespace {

// Narrows an integer argument to int, naming it when it does not fit (Validate then checks the
// argument's own range).
absl::StatusOr<int> ToInt(const char* name, int64_t v) {
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling parameter ", name, " = ", v, " is out of range"));
  }
  return static_cast<int>(v);
}

template <typename T>
absl::Status ReadOptional(const nlohmann::json& j, const char* key, const std::string& file,
                          std::optional<T>* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_number()) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": ", key, " must be a number"));
  }
  *out = it->get<T>();
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GenerationDefaults> ReadGenerationDefaults(const std::string& dir) {
  GenerationDefaults d;
  const std::string file = dir + "/generation_config.json";
  if (!std::filesystem::exists(file)) return d;
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(file));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": not a JSON object"));
  }
  RETURN_IF_ERROR(ReadOptional(j, "temperature", file, &d.temperature));
  RETURN_IF_ERROR(ReadOptional(j, "top_p", file, &d.top_p));
  RETURN_IF_ERROR(ReadOptional(j, "top_k", file, &d.top_k));
  RETURN_IF_ERROR(ReadOptional(j, "min_p", file, &d.min_p));
  RETURN_IF_ERROR(ReadOptional(j, "repetition_penalty", file, &d.repetition_penalty));
  RETURN_IF_ERROR(ReadOptional(j, "max_new_tokens", file, &d.max_tokens));
  return d;
}

absl::StatusOr<ResolvedParams> ResolveSamplingSpec(const SamplingSpec& spec,
                                                   const GenerationDefaults& defaults) {
  ResolvedParams r;
  engine::SamplingParams& p = r.engine;
  // vLLM's defaults are engine::SamplingParams' own; generation_config overrides them; the
  // caller's values override both.
  p.temperature = static_cast<float>(spec.temperature.value_or(defaults.temperature.value_or(1.0)));
  p.top_p = static_cast<float>(spec.top_p.value_or(defaults.top_p.value_or(1.0)));
  p.min_p = static_cast<float>(spec.min_p.value_or(defaults.min_p.value_or(0.0)));
  p.repetition_penalty = static_cast<float>(
      spec.repetition_penalty.value_or(defaults.repetition_penalty.value_or(1.0)));
  p.presence_penalty = static_cast<float>(spec.presence_penalty.value_or(0.0));
  p.frequency_penalty = static_cast<float>(spec.frequency_penalty.value_or(0.0));
  ASSIGN_OR_RETURN(p.top_k, ToInt("top_k", spec.top_k.value_or(defaults.top_k.value_or(-1))));
  ASSIGN_OR_RETURN(p.max_tokens,
                   ToInt("max_tokens", spec.max_tokens.value_or(defaults.max_tokens.value_or(16))));
  ASSIGN_OR_RETURN(p.min_tokens, ToInt("min_tokens", spec.min_tokens.value_or(0)));
  ASSIGN_OR_RETURN(p.n, ToInt("n", spec.n.value_or(1)));
  ASSIGN_OR_RETURN(p.logprobs, ToInt("logprobs", spec.logprobs.value_or(-1)));
  ASSIGN_OR_RETURN(p.prompt_logprobs, ToInt("prompt_logprobs", spec.prompt_logprobs.value_or(-1)));
  if (spec.seed.has_value() && spec.seq_seed.has_value() && *spec.seed != *spec.seq_seed) {
    return absl::InvalidArgumentError(absl::StrCat(
        "seed (", *spec.seed, ") and seq_seed (", *spec.seq_seed,
        ") are the same per-sequence seed under two names; give one, or equal values"));
  }
  if (spec.seq_seed.has_value()) p.seed = *spec.seq_seed;
  if (spec.seed.has_value()) p.seed = *spec.seed;
  p.ignore_eos = spec.ignore_eos;
  p.stop_token_ids = spec.stop_token_ids;
  if (!spec.so_schema_type.empty()) {
    engine::StructuredOutputArgs a;
    ASSIGN_OR_RETURN(a.schema_type, engine::ParseSchemaType(spec.so_schema_type));
    a.schema = spec.so_schema;
    a.whitespace = spec.so_flexible_whitespace ? engine::StructuredOutputArgs::Whitespace::kFlexible
                                               : engine::StructuredOutputArgs::Whitespace::kCompact;
    // Parsed without a vocabulary, so a bad schema fails here, before anything is submitted.
    if (absl::Status st = engine::CheckStructuredOutputArgs(a); !st.ok()) {
      // Validate's messages already start with "so_args"; the grammar front ends' do not.
      if (absl::StartsWith(st.message(), "so_args")) return st;
      return Annotate(st, absl::StrCat("so_args (", spec.so_schema_type, ")"));
    }
    p.so_args = std::move(a);
  }
  RETURN_IF_ERROR(p.Validate());
  for (const std::string& s : spec.stop) {
    if (!s.empty()) r.stop.push_back(s);
  }
  r.skip_special_tokens = spec.skip_special_tokens;
  return r;
}

}  // namespace deepinfer::python
