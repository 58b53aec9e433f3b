#include "python/request_encoder.h"

#include "absl/strings/str_cat.h"
#include "api/messages_codec.h"
#include "api/openai_codec.h"
#include "api/responses_codec.h"
#include "common/status.h"
#include "common/strings.h"
#include "model/hf_config.h"
#include "nlohmann/json.hpp"
#include "structured/tool_call_grammar.h"

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

absl::StatusOr<Parsed> ParseBody(RequestApi api, std::string_view body) {
  Parsed p;
  switch (api) {
    case RequestApi::kChatCompletions: {
      ASSIGN_OR_RETURN(api::ChatCompletionRequest r, api::ParseChatCompletionRequest(body));
      p.conversation = std::move(r.conversation);
      p.thinking = r.thinking;
      p.reasoning_effort = r.reasoning_effort;
      p.parallel_tool_calls = r.parallel_tool_calls;
      p.stop = r.sampling.stop;
      break;
    }
    case RequestApi::kResponses: {
      ASSIGN_OR_RETURN(api::ResponsesRequest r, api::ParseResponsesRequest(body));
      p.conversation = std::move(r.conversation);
      p.thinking = r.thinking;
      p.reasoning_effort = r.reasoning_effort;
      p.parallel_tool_calls = r.parallel_tool_calls;
      p.stop = r.sampling.stop;
      break;
    }
    case RequestApi::kMessages: {
      ASSIGN_OR_RETURN(api::MessagesRequest r, api::ParseMessagesRequest(body));
      p.conversation = std::move(r.conversation);
      p.thinking = r.thinking;
      p.reasoning_effort = r.reasoning_effort;
      p.parallel_tool_calls = r.parallel_tool_calls;
      p.stop = r.sampling.stop;
      break;
    }
  }
  return p;
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
  const protocol::ToolChoice::Mode mode = conv.tool_choice.mode;
  const bool forced_tools = !conv.tools.empty() && (mode == protocol::ToolChoice::Mode::kRequired ||
                                                    mode == protocol::ToolChoice::Mode::kNamed);
  EncodedRequest out;
  std::optional<structured::ConstraintSpec> spec;
  if (conv.response_format) {
    if (forced_tools) {
      return absl::InvalidArgumentError(
          "response_format cannot be combined with tool_choice 'required' or a named tool: the "
          "output must be a tool call");
    }
    // A constrained answer skips reasoning unless the request asked for it.
    if (!thinking_requested.value_or(false)) options.thinking = false;
    nlohmann::json f = nlohmann::json::parse(conv.response_format->format.Dump(), nullptr, false);
    if (f.is_discarded() || !f.is_object()) {
      return absl::InvalidArgumentError("response_format must be an object");
    }
    spec.emplace();
    const nlohmann::json* js = f.contains("json_schema") ? &f["json_schema"] : nullptr;
    if (f.value("type", "") == "json_schema" && js != nullptr && js->is_object() &&
        js->contains("schema")) {
      spec->kind = structured::ConstraintSpec::Kind::kJsonSchema;
      spec->text = (*js)["schema"].dump();
    } else {
      spec->kind = structured::ConstraintSpec::Kind::kJsonObject;
    }
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
  if (forced_tools) {
    structured::ToolCallGrammarOptions o;
    for (const protocol::ToolDefinition& t : conv.tools) {
      o.tools.push_back({t.name, t.parameters.Dump()});
    }
    if (mode == protocol::ToolChoice::Mode::kNamed) o.forced_tool = conv.tool_choice.name;
    o.parallel = req.parallel_tool_calls;
    o.syntax = family_ == protocol::ModelFamily::kDeepSeekV41 ? structured::DsmlSyntax::V41()
                                                              : structured::DsmlSyntax::V4();
    switch (out.prompt.start) {
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
    spec.emplace();
    spec->kind = structured::ConstraintSpec::Kind::kToolCalls;
    spec->text = structured::ToolCallGrammarOptionsToJson(o);
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
    // Free reasoning, then the grammar after `</think>`; the other ways out of the reasoning
    // (EOS, a DSML tag) are masked until then.
    params->grammar_after_token_ids = {markers_.think_end};
    params->grammar_blocked_before = model_eos_ids;
    params->grammar_blocked_before.push_back(markers_.eos);
    if (tokenizer_->eos_id() >= 0) params->grammar_blocked_before.push_back(tokenizer_->eos_id());
    params->grammar_blocked_before.push_back(markers_.dsml);
    // A forced call must not be swallowed by reasoning that would not end in time: `</think>`
    // is forced once the tokens left only fit the shortest call (response_format: reasoning may
    // use max_tokens up, as vLLM).
    params->grammar_trigger_reserve =
        encoded.constraint->kind == structured::ConstraintSpec::Kind::kToolCalls;
  }
  return absl::OkStatus();
}

}  // namespace deepinfer::python
