#include "api/constraint_rules.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "nlohmann/json.hpp"
#include "structured/tool_call_grammar.h"

namespace deepinfer::api {

absl::StatusOr<ConstraintPlan> PlanConstraint(const protocol::Conversation& conv,
                                              std::optional<bool> thinking_requested,
                                              bool parallel_tool_calls,
                                              protocol::EncodeOptions* options) {
  ConstraintPlan plan;
  const protocol::ToolChoice::Mode mode = conv.tool_choice.mode;
  const bool forced_tools =
      !conv.tools.empty() &&
      (mode == protocol::ToolChoice::Mode::kRequired || mode == protocol::ToolChoice::Mode::kNamed);
  if (conv.response_format) {
    if (forced_tools) {
      return absl::InvalidArgumentError(
          "response_format cannot be combined with tool_choice 'required' or a named tool: the "
          "output must be a tool call");
    }
    // Constrained answers skip reasoning unless the client asked for it; with reasoning the
    // grammar starts after `</think>` (StartGrammarAfterReasoning).
    if (!thinking_requested.value_or(false)) options->thinking = false;
    plan.kind = ConstraintPlan::Kind::kResponseFormat;
    return plan;
  }
  if (!forced_tools) return plan;
  // Thinking mode with a forced tool_choice: DeepSeek's API answers 400 (shared/spec/protocol.md
  // §20(b)); deepinfer lets the model reason and forces the call after `</think>` (issue #22).
  plan.kind = ConstraintPlan::Kind::kToolCalls;
  plan.tool_choice = conv.tool_choice;
  plan.parallel = parallel_tool_calls;
  return plan;
}

absl::StatusOr<structured::ConstraintSpec> ResponseFormatSpec(
    const protocol::ResponseFormat& format) {
  nlohmann::json f = nlohmann::json::parse(format.format.Dump(), nullptr, false);
  if (f.is_discarded() || !f.is_object()) {
    return absl::InvalidArgumentError("response_format must be an object");
  }
  structured::ConstraintSpec spec;
  spec.kind = structured::ConstraintSpec::Kind::kJsonObject;
  if (f.value("type", "") == "json_schema") {
    const nlohmann::json& js = f["json_schema"];
    if (js.is_object() && js.contains("schema")) {
      spec.kind = structured::ConstraintSpec::Kind::kJsonSchema;
      spec.text = js["schema"].dump();
    }
  }
  return spec;
}

structured::ConstraintSpec ToolCallsSpec(const ConstraintPlan& plan,
                                         const protocol::Conversation& conv,
                                         protocol::ModelFamily family,
                                         protocol::ParserStart start) {
  structured::ToolCallGrammarOptions o;
  for (const protocol::ToolDefinition& t : conv.tools) {
    o.tools.push_back({t.name, t.parameters.Dump()});
  }
  if (plan.tool_choice.mode == protocol::ToolChoice::Mode::kNamed) {
    o.forced_tool = plan.tool_choice.name;
  }
  o.parallel = plan.parallel;
  o.syntax = family == protocol::ModelFamily::kDeepSeekV41 ? structured::DsmlSyntax::V41()
                                                           : structured::DsmlSyntax::V4();
  switch (start) {
    case protocol::ParserStart::kToolCalls:
      o.start = structured::ToolCallStart::kInBlock;
      break;
    case protocol::ParserStart::kToolArguments:
      o.start = structured::ToolCallStart::kInInvoke;
      break;
    default:
      o.start = structured::ToolCallStart::kAnswer;
      break;
  }
  structured::ConstraintSpec spec;
  spec.kind = structured::ConstraintSpec::Kind::kToolCalls;
  spec.text = structured::ToolCallGrammarOptionsToJson(o);
  return spec;
}

void StartGrammarAfterReasoning(const ConstraintPlan& plan, const ReasoningExits& exits,
                                engine::SamplingParams* params) {
  const bool has_grammar = params->grammar != nullptr;
  if (!has_grammar && !plan.reasoning_budget) return;
  params->grammar_after_token_ids = {exits.think_end};
  if (has_grammar) {
    params->grammar_blocked_before = exits.blocked;
    params->grammar_trigger_reserve = plan.kind == ConstraintPlan::Kind::kToolCalls;
  }
  if (plan.reasoning_budget) {
    params->grammar_trigger_budget =
        static_cast<int>(std::min<int64_t>(*plan.reasoning_budget, INT32_MAX));
  }
}

}  // namespace deepinfer::api
