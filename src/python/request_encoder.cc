#include "python/request_encoder.h"

#include "absl/strings/str_cat.h"
#include "api/constraint_rules.h"
#include "api/messages_codec.h"
#include "api/openai_codec.h"
#include "api/responses_codec.h"
#include "common/status.h"
#include "common/strings.h"
#include "model/hf_config.h"

namespace deepinfer::python {
namespace {

// The request after the codec, in the fields the encoding needs.
struct Parsed {
  protocol::Conversation conversation;
  std::optional<bool> thinking;
  std::string reasoning_effort;
  bool parallel_tool_calls = true;
  std::vector<std::string> stop;
};

// The three codecs' requests share these field names.
template <typename Request>
Parsed FromRequest(Request r) {
  Parsed p;
  p.conversation = std::move(r.conversation);
  p.thinking = r.thinking;
  p.reasoning_effort = r.reasoning_effort;
  p.parallel_tool_calls = r.parallel_tool_calls;
  p.stop = r.sampling.stop;
  return p;
}

absl::StatusOr<Parsed> ParseBody(RequestApi api, std::string_view body) {
  switch (api) {
    case RequestApi::kChatCompletions: {
      ASSIGN_OR_RETURN(api::ChatCompletionRequest r, api::ParseChatCompletionRequest(body));
      return FromRequest(std::move(r));
    }
    case RequestApi::kResponses: {
      ASSIGN_OR_RETURN(api::ResponsesRequest r, api::ParseResponsesRequest(body));
      return FromRequest(std::move(r));
    }
    case RequestApi::kMessages: {
      ASSIGN_OR_RETURN(api::MessagesRequest r, api::ParseMessagesRequest(body));
      return FromRequest(std::move(r));
    }
  }
  return absl::InvalidArgumentError("api: unknown API");
}

}  // namespace

absl::StatusOr<RequestApi> ParseRequestApi(std::string_view name) {
  if (name == "chat.completions" || name == "chat") return RequestApi::kChatCompletions;
  if (name == "responses") return RequestApi::kResponses;
  if (name == "messages") return RequestApi::kMessages;
  return absl::InvalidArgumentError(
      absl::StrCat("api: unknown API \"", AbslView(name),
                   "\" (expected \"chat.completions\", \"responses\" or \"messages\")"));
}

absl::StatusOr<std::unique_ptr<RequestEncoder>> RequestEncoder::FromDirectory(
    const std::string& dir) {
  ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok, Tokenizer::FromDirectory(dir));
  ASSIGN_OR_RETURN(model::HfConfig config, model::HfConfig::Load(dir));
  ASSIGN_OR_RETURN(std::string model_type, config.GetString("model_type", ""));
  ASSIGN_OR_RETURN(std::unique_ptr<RequestEncoder> enc, Create(tok.get(), model_type));
  enc->owned_ = std::move(tok);
  return enc;
}

absl::StatusOr<std::unique_ptr<RequestEncoder>> RequestEncoder::Create(
    const Tokenizer* tokenizer, std::string_view model_type) {
  absl::StatusOr<protocol::ModelFamily> family = protocol::ModelFamilyFromModelType(model_type);
  if (!family.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this model (model_type '", AbslView(model_type),
        "') has no DeepSeek chat template; chat and deepinfer.protocol are not available"));
  }
  absl::StatusOr<protocol::MarkerIds> markers = protocol::MarkerIds::FromTokenizer(*tokenizer);
  if (!markers.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this model has no usable chat template: its tokenizer lacks a control token (",
        markers.status().message(), ")"));
  }
  return std::unique_ptr<RequestEncoder>(new RequestEncoder(tokenizer, nullptr, *family, *markers));
}

absl::StatusOr<EncodedRequest> RequestEncoder::Encode(RequestApi api, std::string_view body) const {
  ASSIGN_OR_RETURN(Parsed req, ParseBody(api, body));
  protocol::EncodeOptions options;
  options.family = family_;
  options.thinking = req.thinking.value_or(true);
  std::optional<bool> thinking_requested = req.thinking;
  if (api == RequestApi::kChatCompletions) {
    // Chat's `reasoning_effort: "none"` is thinking off (api/chat_handler.cc); the other codecs
    // already map their "none" into `thinking`.
    if (req.reasoning_effort == "none") options.thinking = false;
    if (!req.reasoning_effort.empty()) thinking_requested = req.reasoning_effort != "none";
  }
  const protocol::Conversation& conv = req.conversation;
  EncodedRequest out;
  ASSIGN_OR_RETURN(out.plan,
                   api::PlanConstraint(conv, thinking_requested, req.parallel_tool_calls, &options));
  std::optional<structured::ConstraintSpec> spec;
  if (out.plan.kind == api::ConstraintPlan::Kind::kResponseFormat) {
    ASSIGN_OR_RETURN(spec, api::ResponseFormatSpec(*conv.response_format));
  }
  if (!req.reasoning_effort.empty() && req.reasoning_effort != "none") {
    ASSIGN_OR_RETURN(options.effort, protocol::ReasoningEffort::Parse(req.reasoning_effort));
  }
  ASSIGN_OR_RETURN(out.prompt, protocol::EncodePrompt(conv, options));
  absl::StatusOr<std::vector<int32_t>> ids = protocol::PromptToIds(out.prompt, *tokenizer_);
  if (!ids.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot tokenize the chat template: ", ids.status().message()));
  }
  out.prompt_token_ids = *std::move(ids);
  out.thinking = options.thinking;
  if (out.plan.kind == api::ConstraintPlan::Kind::kToolCalls) {
    spec = api::ToolCallsSpec(out.plan, conv, family_, out.prompt.start);
  }
  out.constraint = std::move(spec);
  out.parser_options.start = out.prompt.start;
  out.parser_options.forced_tool_name = out.prompt.forced_tool_name;
  out.parser_options.stop = req.stop;
  // parallel_tool_calls false: the stream ends with the first call (the handlers' rule).
  out.parser_options.max_tool_calls = req.parallel_tool_calls ? 0 : 1;
  std::vector<std::string> declared;
  for (const protocol::ToolDefinition& t : conv.tools) declared.push_back(t.name);
  out.parser_options.declared_tools = std::move(declared);
  return out;
}

absl::Status RequestEncoder::ApplyConstraint(const EncodedRequest& encoded,
                                             structured::GrammarCompiler& compiler,
                                             const std::vector<int32_t>& model_eos_ids,
                                             engine::SamplingParams* params) const {
  if (!encoded.constraint.has_value()) return absl::OkStatus();
  absl::StatusOr<std::shared_ptr<const structured::CompiledGrammar>> g =
      compiler.Get(*encoded.constraint);
  if (!g.ok()) {
    return Annotate(g.status(),
                    encoded.constraint->kind == structured::ConstraintSpec::Kind::kToolCalls
                        ? "tools"
                        : "response_format");
  }
  params->grammar = *g;
  if (encoded.prompt.start == protocol::ParserStart::kReasoning) {
    api::ReasoningExits exits;
    exits.think_end = markers_.think_end;
    exits.blocked = model_eos_ids;
    exits.blocked.push_back(markers_.eos);
    if (tokenizer_->eos_id() >= 0) exits.blocked.push_back(tokenizer_->eos_id());
    exits.blocked.push_back(markers_.dsml);
    api::StartGrammarAfterReasoning(encoded.plan, exits, params);
  }
  return absl::OkStatus();
}

}  // namespace deepinfer::python
