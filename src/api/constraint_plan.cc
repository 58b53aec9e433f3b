// Structured output of chat-like requests (docs/structured-output.md): response_format and
// forced DSML tool calls as grammars, compiled off the engine thread and cached.
#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "api/errors.h"
#include "api/server_internal.h"
#include "common/status.h"
#include "structured/compiler.h"

namespace deepinfer::api {

using OJson = nlohmann::ordered_json;
using engine::StepOutput;

absl::StatusOr<std::shared_ptr<const structured::CompiledGrammar>> ApiServer::Impl::GrammarFor(
    const protocol::ResponseFormat& format) {
  ASSIGN_OR_RETURN(structured::ConstraintSpec spec, ResponseFormatSpec(format));
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
  absl::StatusOr<ConstraintPlan> plan =
      api::PlanConstraint(*conv, thinking_requested, parallel_tool_calls, options);
  if (!plan.ok()) return WithParam(plan.status(), "response_format");
  return plan;
}

absl::Status ApiServer::Impl::ApplyConstraint(const ConstraintPlan& plan,
                                              const protocol::Conversation& conv,
                                              const protocol::EncodedPrompt& encoded,
                                              engine::SamplingParams* params) {
  if (plan.kind != ConstraintPlan::Kind::kNone) {
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
      absl::StatusOr<std::shared_ptr<const structured::CompiledGrammar>> g =
          Compiler()->Get(ToolCallsSpec(plan, conv, *s->family_, encoded.start));
      if (!g.ok()) return WithParam(g.status(), "tools");
      params->grammar = *g;
    }
  }
  if (encoded.start == protocol::ParserStart::kReasoning) {
    ReasoningExits exits;
    exits.think_end = s->markers_->think_end;
    exits.blocked = s->backend_->model_info().eos_token_ids;
    exits.blocked.push_back(s->markers_->eos);
    if (s->tokenizer_->eos_id() >= 0) exits.blocked.push_back(s->tokenizer_->eos_id());
    exits.blocked.push_back(s->markers_->dsml);
    StartGrammarAfterReasoning(plan, exits, params);
  }
  return absl::OkStatus();
}

}  // namespace deepinfer::api
