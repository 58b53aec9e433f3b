// Structured output of chat-like requests (docs/structured-output.md): response_format and
// forced DSML tool calls as grammars, compiled off the engine thread and cached.
#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "api/errors.h"
#include "api/server_internal.h"
#include "structured/compiler.h"
#include "structured/tool_call_grammar.h"

namespace deepinfer::api {

using OJson = nlohmann::ordered_json;
using engine::StepOutput;

absl::StatusOr<std::shared_ptr<const structured::CompiledGrammar>> ApiServer::Impl::GrammarFor(
    const protocol::ResponseFormat& format) {
  nlohmann::json f = nlohmann::json::parse(format.format.Dump(), nullptr, false);
  if (f.is_discarded() || !f.is_object()) {
    return absl::InvalidArgumentError("response_format must be an object");
  }
  structured::ConstraintSpec spec;
  const std::string type = f.value("type", "");
  if (type == "json_schema") {
    const nlohmann::json& js = f["json_schema"];
    if (js.is_object() && js.contains("schema")) {
      spec.kind = structured::ConstraintSpec::Kind::kJsonSchema;
      spec.text = js["schema"].dump();
    } else {
      spec.kind = structured::ConstraintSpec::Kind::kJsonObject;
    }
  } else {
    spec.kind = structured::ConstraintSpec::Kind::kJsonObject;
  }
  return Compiler()->Get(spec);
}

structured::GrammarCompiler* ApiServer::Impl::Compiler() {
  absl::MutexLock lock(&grammar_mu);
  if (!grammar_compiler) {
    std::vector<int32_t> eos = s->backend_->model_info().eos_token_ids;
    if (s->tokenizer_->eos_id() >= 0) eos.push_back(s->tokenizer_->eos_id());
    auto vocab = std::make_shared<structured::VocabularyIndex>(structured::VocabularyFromTokenizer(
        *s->tokenizer_, s->backend_->model_info().vocab_size, eos));
    grammar_compiler = std::make_unique<structured::GrammarCompiler>(
        std::move(vocab), structured::GrammarCompiler::Options{});
  }
  return grammar_compiler.get();
}

absl::StatusOr<ApiServer::Impl::ConstraintPlan> ApiServer::Impl::PlanConstraint(
    protocol::Conversation* conv, std::optional<bool> thinking_requested, bool parallel_tool_calls,
    protocol::EncodeOptions* options) {
  ConstraintPlan plan;
  const protocol::ToolChoice::Mode mode = conv->tool_choice.mode;
  const bool forced_tools =
      !conv->tools.empty() &&
      (mode == protocol::ToolChoice::Mode::kRequired || mode == protocol::ToolChoice::Mode::kNamed);
  if (conv->response_format) {
    if (forced_tools) {
      return WithParam(absl::InvalidArgumentError(
                           "response_format cannot be combined with tool_choice 'required' or a "
                           "named tool: the output must be a tool call"),
                       "response_format");
    }
    // Constrained answers skip reasoning unless the client asked for it; with reasoning the
    // grammar starts after `</think>` (ApplyConstraint).
    if (!thinking_requested.value_or(false)) options->thinking = false;
    plan.kind = ConstraintPlan::Kind::kResponseFormat;
    return plan;
  }
  if (!forced_tools) return plan;
  plan.kind = ConstraintPlan::Kind::kToolCalls;
  plan.tool_choice = conv->tool_choice;
  plan.parallel = parallel_tool_calls;
  // Thinking mode with a forced tool_choice: DeepSeek's API answers 400 (shared/spec/protocol.md
  // §20(b)); deepinfer lets the model reason and forces the call after `</think>` (issue #22;
  // the encoder renders the auto prompt, ApplyConstraint starts the grammar after reasoning).
  return plan;
}

absl::Status ApiServer::Impl::ApplyConstraint(const ConstraintPlan& plan,
                                              const protocol::Conversation& conv,
                                              const protocol::EncodedPrompt& encoded,
                                              engine::SamplingParams* params) {
  const bool after_reasoning = encoded.start == protocol::ParserStart::kReasoning;
  if (plan.kind == ConstraintPlan::Kind::kNone) {
    if (after_reasoning && plan.reasoning_budget) {
      // A budget alone: `</think>` forced after it, the answer is free (engine::GrammarConstraint
      // without a grammar).
      params->grammar_after_token_ids = {s->markers_->think_end};
      params->grammar_trigger_budget =
          static_cast<int>(std::min<int64_t>(*plan.reasoning_budget, INT32_MAX));
    }
    return absl::OkStatus();
  }
  if (params->min_tokens > 0) {
    return WithParam(absl::InvalidArgumentError(
                         "min_tokens cannot be combined with response_format or a forced "
                         "tool_choice (the constrained output may have to end before it)"),
                     "min_tokens");
  }
  if (plan.kind == ConstraintPlan::Kind::kResponseFormat) {
    absl::StatusOr<std::shared_ptr<const structured::CompiledGrammar>> g =
        GrammarFor(*conv.response_format);
    if (!g.ok()) return WithParam(g.status(), "response_format");
    params->grammar = *g;
  } else {
    structured::ToolCallGrammarOptions o;
    for (const protocol::ToolDefinition& t : conv.tools) {
      o.tools.push_back({t.name, t.parameters.Dump()});
    }
    if (plan.tool_choice.mode == protocol::ToolChoice::Mode::kNamed) {
      o.forced_tool = plan.tool_choice.name;
    }
    o.parallel = plan.parallel;
    o.syntax = *s->family_ == protocol::ModelFamily::kDeepSeekV41 ? structured::DsmlSyntax::V41()
                                                                  : structured::DsmlSyntax::V4();
    switch (encoded.start) {
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
    absl::StatusOr<std::shared_ptr<const structured::CompiledGrammar>> g = Compiler()->Get(spec);
    if (!g.ok()) return WithParam(g.status(), "tools");
    params->grammar = *g;
  }
  if (after_reasoning) {
    // vLLM-style reasoning integration: free reasoning, then the grammar after `</think>`.
    // EOS and the DSML tag would leave the reasoning another way: masked until then.
    params->grammar_after_token_ids = {s->markers_->think_end};
    params->grammar_blocked_before = s->backend_->model_info().eos_token_ids;
    params->grammar_blocked_before.push_back(s->markers_->eos);
    if (s->tokenizer_->eos_id() >= 0)
      params->grammar_blocked_before.push_back(s->tokenizer_->eos_id());
    params->grammar_blocked_before.push_back(s->markers_->dsml);
    // A forced call must not be swallowed by reasoning that would not end in time: `</think>`
    // is forced once the tokens left only fit the shortest call (response_format keeps vLLM's
    // behaviour: reasoning may use max_tokens up, finish_reason length).
    params->grammar_trigger_reserve = plan.kind == ConstraintPlan::Kind::kToolCalls;
    if (plan.reasoning_budget) {
      params->grammar_trigger_budget =
          static_cast<int>(std::min<int64_t>(*plan.reasoning_budget, INT32_MAX));
    }
  }
  return absl::OkStatus();
}

}  // namespace deepinfer::api
