#include "engine/sampling_params.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/strings.h"

namespace deepinfer::engine {
namespace {

absl::Status Bad(const char* field, double value, const char* range) {
  return absl::InvalidArgumentError(
      absl::StrCat("sampling parameter ", field, " = ", value, " is out of range ", range));
}

absl::Status ValidateSoArgs(const StructuredOutputArgs& a) {
  using Type = StructuredOutputArgs::SchemaType;
  const std::string type(SchemaTypeName(a.schema_type));
  if (a.schema_type == Type::kJsonObject) {
    if (!a.schema.empty()) {
      return absl::InvalidArgumentError(
          "so_args: schema_type json_object takes no schema (use json_schema to give one)");
    }
  } else if (a.schema.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("so_args: schema_type ", type, " needs a non-empty schema"));
  }
  if (a.whitespace == StructuredOutputArgs::Whitespace::kFlexible &&
      (a.schema_type == Type::kRegex || a.schema_type == Type::kEbnf)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "so_args: flexible whitespace applies to JSON only, not to schema_type ", type));
  }
  return absl::OkStatus();
}

}  // namespace

std::string_view SchemaTypeName(StructuredOutputArgs::SchemaType type) {
  switch (type) {
    case StructuredOutputArgs::SchemaType::kJsonSchema:
      return "json_schema";
    case StructuredOutputArgs::SchemaType::kJsonObject:
      return "json_object";
    case StructuredOutputArgs::SchemaType::kRegex:
      return "regex";
    case StructuredOutputArgs::SchemaType::kEbnf:
      return "ebnf";
  }
  return "unknown";
}

absl::StatusOr<StructuredOutputArgs::SchemaType> ParseSchemaType(std::string_view name) {
  using Type = StructuredOutputArgs::SchemaType;
  for (Type t : {Type::kJsonSchema, Type::kJsonObject, Type::kRegex, Type::kEbnf}) {
    if (name == SchemaTypeName(t)) return t;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("so_args: unknown schema_type \"", AbslView(name),
                   "\" (expected json_schema, json_object, regex or ebnf)"));
}

absl::Status SamplingParams::Validate() const {
  if (!(temperature >= 0.0f && temperature <= 100.0f))
    return Bad("temperature", temperature, "[0, 100]");
  if (!(top_p > 0.0f && top_p <= 1.0f)) return Bad("top_p", top_p, "(0, 1]");
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return Bad("min_p", min_p, "[0, 1]");
  if (top_k < -1) return Bad("top_k", top_k, "-1 (off), 0 (off) or >= 1");
  if (!(repetition_penalty > 0.0f && repetition_penalty <= 2.0f)) {
    return Bad("repetition_penalty", repetition_penalty, "(0, 2]");
  }
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f)) {
    return Bad("presence_penalty", presence_penalty, "[-2, 2]");
  }
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) {
    return Bad("frequency_penalty", frequency_penalty, "[-2, 2]");
  }
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0) return Bad("logit_bias token id", id, ">= 0");
    if (!(bias >= -100.0f && bias <= 100.0f)) return Bad("logit_bias value", bias, "[-100, 100]");
  }
  if (n < 1 || n > 128) return Bad("n", n, "[1, 128]");
  if (max_tokens < 1) return Bad("max_tokens", max_tokens, ">= 1");
  if (min_tokens < 0 || min_tokens > max_tokens)
    return Bad("min_tokens", min_tokens, "[0, max_tokens]");
  for (int32_t id : stop_token_ids) {
    if (id < 0) return Bad("stop_token_ids entry", id, ">= 0");
  }
  if (logprobs < -1 || logprobs > 20) return Bad("logprobs", logprobs, "[-1, 20]");
  if (prompt_logprobs < -1 || prompt_logprobs > 20) {
    return Bad("prompt_logprobs", prompt_logprobs, "[-1, 20]");
  }
  if (grammar_trigger_budget < -1) {
    return Bad("grammar_trigger_budget", grammar_trigger_budget, ">= -1");
  }
  if ((grammar_trigger_budget >= 0 || grammar_trigger_reserve) &&
      grammar_after_token_ids.empty()) {
    return absl::InvalidArgumentError(
        "sampling parameters grammar_trigger_budget / grammar_trigger_reserve need "
        "grammar_after_token_ids");
  }
  if (so_args.has_value()) {
    if (grammar != nullptr) {
      return absl::InvalidArgumentError(
          "sampling parameters so_args and grammar are both set (give one constraint)");
    }
    if (absl::Status s = ValidateSoArgs(*so_args); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace deepinfer::engine
