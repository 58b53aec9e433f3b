// The structured-output rules of chat-like requests (Chat Completions, Responses, Messages;
// docs/structured-output.md), as free functions so the HTTP handlers (api/constraint_plan.cc)
// and the Python package's request encoder (python/request_encoder.cc) apply one set of rules:
// which constraint a request needs, how it changes the prompt, its grammar spec, and where the
// grammar starts when the prompt opens reasoning.
#ifndef DEEPINFER_API_CONSTRAINT_RULES_H_
#define DEEPINFER_API_CONSTRAINT_RULES_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/sampling_params.h"
#include "protocol/conversation.h"
#include "protocol/prompt_encoder.h"
#include "structured/compiler.h"

namespace deepinfer::api {

// Structured output of a chat-like request: response_format, or DSML tool calls for
// tool_choice required / named.
struct ConstraintPlan {
  enum class Kind { kNone, kResponseFormat, kToolCalls };
  Kind kind = Kind::kNone;
  protocol::ToolChoice tool_choice;  // kToolCalls: the client's choice
  bool parallel = true;              // kToolCalls with required: more than one call allowed
  // The most reasoning tokens before a forced `</think>` (Anthropic thinking.budget_tokens,
  // vLLM's thinking_token_budget); applies when the prompt opens reasoning. Any kind.
  std::optional<int64_t> reasoning_budget;
};

// Before encoding: picks the constraint and adapts the encoder input. response_format turns
// thinking off unless `thinking_requested` is true. tool_choice required / named in thinking
// mode renders the `auto` prompt and the grammar then forces the block after `</think>`
// (DeepSeek's API answers 400 there; docs/protocol.md). Errors: InvalidArgument (400) for
// response_format with a forced tool_choice.
absl::StatusOr<ConstraintPlan> PlanConstraint(const protocol::Conversation& conv,
                                              std::optional<bool> thinking_requested,
                                              bool parallel_tool_calls,
                                              protocol::EncodeOptions* options);

// The grammar spec of a Chat-shaped response_format: json_schema with a schema, else
// json_object. Errors: InvalidArgument when the format is not a JSON object.
absl::StatusOr<structured::ConstraintSpec> ResponseFormatSpec(
    const protocol::ResponseFormat& format);

// The grammar spec of a forced DSML tool call (plan.kind == kToolCalls) in `family`'s syntax,
// starting where the encoded prompt left the parser (`start`).
structured::ConstraintSpec ToolCallsSpec(const ConstraintPlan& plan,
                                         const protocol::Conversation& conv,
                                         protocol::ModelFamily family,
                                         protocol::ParserStart start);

// The control tokens that leave a reasoning span another way than `</think>`.
struct ReasoningExits {
  int32_t think_end = -1;
  std::vector<int32_t> blocked;  // EOS ids (model, tokenizer, chat template) and the DSML tag
};

// When the prompt opens reasoning (vLLM-style reasoning integration): free reasoning, then the
// grammar after `</think>`, the other exits masked until then. A forced tool call also forces
// `</think>` once the tokens left only fit the shortest call (response_format keeps vLLM's
// behaviour: reasoning may use max_tokens up); a reasoning budget forces it after that many
// tokens, with or without a grammar. Does nothing without a grammar or a budget.
void StartGrammarAfterReasoning(const ConstraintPlan& plan, const ReasoningExits& exits,
                                engine::SamplingParams* params);

}  // namespace deepinfer::api

#endif  // DEEPINFER_API_CONSTRAINT_RULES_H_
