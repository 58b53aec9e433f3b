// Per-request sampling parameters (OpenAI / vLLM semantics) and their validation.
//
// The engine applies them in this order to each sampled position's logits row (sampler.h):
//   raw logits -> logprobs (reported; "raw" = log-softmax of the unmodified model logits, vLLM's
//   default `logprobs_mode`) -> logit_bias -> min_tokens EOS/stop masking -> repetition penalty
//   (prompt + output tokens) -> presence / frequency penalties (output tokens) -> temperature ->
//   top-k -> top-p -> min-p -> sample (or argmax when temperature == 0).
#ifndef DEEPINFER_ENGINE_SAMPLING_PARAMS_H_
#define DEEPINFER_ENGINE_SAMPLING_PARAMS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace deepinfer::structured {
class CompiledGrammar;
}  // namespace deepinfer::structured

namespace deepinfer::engine {

// A user-facing structured-output constraint (DEEPINFER-DESIGN.md §11 `so_args`; vLLM's
// StructuredOutputsParams, SGLang's json_schema / regex / ebnf sampling parameters). The offline
// LLM compiles it with its structured::GrammarCompiler before submitting; Engine::Submit only
// takes compiled grammars (SamplingParams::grammar). Syntax of each kind:
// docs/structured-output.md.
struct StructuredOutputArgs {
  enum class SchemaType {
    kJsonSchema,  // `schema` is a JSON schema (text)
    kJsonObject,  // any JSON object; `schema` must be empty
    kRegex,       // `schema` is a regex (ECMA-262 subset) the whole output must match
    kEbnf,        // `schema` is an EBNF grammar (start rule `root`)
  };
  // JSON output whitespace (kJsonSchema / kJsonObject): compact (none) or flexible (up to 8
  // bytes of [ \t\n] between JSON tokens). Must stay compact for regex / EBNF.
  enum class Whitespace { kCompact, kFlexible };

  SchemaType schema_type = SchemaType::kJsonSchema;
  std::string schema;
  Whitespace whitespace = Whitespace::kCompact;
};

// "json_schema", "json_object", "regex", "ebnf" (the `schema_type` strings of so_args).
std::string_view SchemaTypeName(StructuredOutputArgs::SchemaType type);
// Inverse of SchemaTypeName. Errors: InvalidArgument naming the unknown type and the valid ones.
absl::StatusOr<StructuredOutputArgs::SchemaType> ParseSchemaType(std::string_view name);

struct SamplingParams {
  // 0 = greedy (argmax); > 0 divides the logits. Range [0, 100].
  float temperature = 1.0f;
  // Nucleus sampling: keep the smallest set of most likely tokens whose probability sums to
  // >= top_p. Range (0, 1]; 1 = off.
  float top_p = 1.0f;
  // Keep tokens whose probability is >= min_p * (max probability). Range [0, 1]; 0 = off.
  float min_p = 0.0f;
  // Keep the top_k most likely tokens. -1 (or 0) = off; otherwise >= 1.
  int top_k = -1;
  // vLLM/HF repetition penalty over prompt and output tokens: positive logits are divided by it,
  // negative ones multiplied. Range (0, 2]; 1 = off.
  float repetition_penalty = 1.0f;
  // OpenAI penalties over output tokens: logit -= presence * [count > 0] + frequency * count.
  // Range [-2, 2].
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // Added to the logit of the token id before penalties. Ids must be in the vocabulary (checked
  // at Engine::Submit, which knows the vocabulary size); bias in [-100, 100].
  std::vector<std::pair<int32_t, float>> logit_bias;
  // Independent samples of the same prompt (each its own sequence, sample_index 0..n-1). [1, 128].
  int n = 1;
  // Seed of the counter-based RNG (Philox4x32-10 keyed by (seed, sample index, step)): a seeded
  // request gives the same tokens whatever else is in the batch. Unset: the engine picks one.
  std::optional<uint64_t> seed;
  // Maximum generated tokens per sample (>= 1). Also bounded by the model's max context.
  int max_tokens = 16;
  // EOS and stop_token_ids are masked until this many tokens were generated. [0, max_tokens].
  int min_tokens = 0;
  // Do not stop at the model's EOS token(s) (stop_token_ids still stop).
  bool ignore_eos = false;
  // Generation stops (finish reason kStop) after producing any of these ids; the id is included
  // in the output (the protocol layer decides whether to show it).
  std::vector<int32_t> stop_token_ids;
  // -1: no logprobs; 0: logprob of the chosen token only; k >= 1: plus the top-k alternatives.
  // Range [-1, 20].
  int logprobs = -1;
  // Same for prompt tokens (prompt token i's logprob given tokens < i; the first prompt token
  // has none). Range [-1, 20].
  int prompt_logprobs = -1;

  // Structured output (DEEPINFER-DESIGN.md §11): when set, every sampled token is constrained
  // by this grammar (compiled off the engine thread by structured::GrammarCompiler); EOS is
  // allowed only once the grammar is complete, and the engine steers to completion when
  // max_tokens runs low. Logprobs are then those of the masked distribution.
  std::shared_ptr<const structured::CompiledGrammar> grammar;
  // Structured output given as a schema / regex / EBNF text instead of a compiled grammar; the
  // offline LLM compiles it into `grammar` before submitting (LLM::Create with a tokenizer).
  // Mutually exclusive with `grammar`. Engine::Submit rejects it (FailedPrecondition): the
  // engine never compiles (compilation must not block the engine thread).
  std::optional<StructuredOutputArgs> so_args;
  // With `grammar`: the grammar applies only after this token sequence has been generated (e.g.
  // the `</think>` id: reasoning first, then the constrained answer, like vLLM's reasoning-parser
  // integration). Empty: from the first token. Before it, sampling is unconstrained except for
  // `grammar_blocked_before`; if max_tokens runs out first, the request ends with finish reason
  // length and no constrained part.
  std::vector<int32_t> grammar_after_token_ids;
  // Ids masked while waiting for `grammar_after_token_ids` (the other ways out of the reasoning:
  // EOS, a DSML tag), so that the constrained part always gets its turn.
  std::vector<int32_t> grammar_blocked_before;
  // With `grammar_after_token_ids`: at most this many tokens are generated before the trigger;
  // then only the trigger's ids are allowed (a reasoning budget: Anthropic
  // thinking.budget_tokens ends the reasoning with a forced `</think>`). -1 = no budget. Also
  // valid without `grammar`: the tokens after the trigger are then unconstrained.
  int grammar_trigger_budget = -1;
  // With `grammar` and `grammar_after_token_ids`: the trigger is also forced once the tokens
  // left (max_tokens - generated) would no longer fit it plus the shortest complete constrained
  // part, so a forced tool call after reasoning always gets its turn.
  bool grammar_trigger_reserve = false;

  // Checks ranges. Errors: InvalidArgument naming the field and the accepted range, or naming
  // the inconsistency (so_args together with grammar; so_args with an empty schema, a schema
  // for json_object, or flexible whitespace for regex / EBNF).
  absl::Status Validate() const;
  bool greedy() const { return temperature == 0.0f; }
};

}  // namespace deepinfer::engine

#endif  // DEEPINFER_ENGINE_SAMPLING_PARAMS_H_
