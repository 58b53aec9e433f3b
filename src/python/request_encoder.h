// deepinfer.protocol's C++ side (issue #28): a Chat Completions / Responses / Messages request
// body in, what the server derives from it before submitting out: the prompt token ids (the
// DeepSeek template through protocol::EncodePrompt and PromptToIds), the output parser's options
// and the grammar the server would constrain the output with.
//
// It follows the route handlers step for step (api/chat_handler.cc, api/codec_handler.cc,
// api/constraint_plan.cc): the same codec parses the body, a response_format turns thinking off
// unless the request asked for it, `reasoning_effort: "none"` turns thinking off, the effort is
// passed to the encoder. Those few rules are restated here because the handlers keep them in
// ApiServer::Impl (not callable without a server); python_protocol_test compares the ids with a
// running server's /tokenize so the two cannot drift apart unnoticed.
#ifndef DEEPINFER_PYTHON_REQUEST_ENCODER_H_
#define DEEPINFER_PYTHON_REQUEST_ENCODER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "api/constraint_rules.h"
#include "engine/sampling_params.h"
#include "protocol/output_parser.h"
#include "protocol/prompt_encoder.h"
#include "structured/compiler.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::python {

enum class RequestApi { kChatCompletions, kResponses, kMessages };
// "chat.completions" (or "chat"), "responses", "messages". Error: InvalidArgument naming the
// accepted names.
absl::StatusOr<RequestApi> ParseRequestApi(std::string_view name);

// A request as the server would submit it.
struct EncodedRequest {
  std::vector<int32_t> prompt_token_ids;
  protocol::EncodedPrompt prompt;
  bool thinking = true;  // the encoder's thinking flag after the handler's rules
  // start stage, forced tool, the request's stop strings, declared tool names.
  protocol::OutputParserOptions parser_options;
  // The grammar the server constrains the output with (response_format, or tool_choice
  // required / named); nullopt = none.
  std::optional<structured::ConstraintSpec> constraint;
  // Which constraint the request needs (api/constraint_rules.h: the server's rules).
  api::ConstraintPlan plan;
};

class RequestEncoder {
 public:
  // Loads DIR/tokenizer.json and reads the model family from DIR/config.json's model_type.
  // Errors: the tokenizer's / config's load errors; FailedPrecondition when the model has no
  // DeepSeek chat template (model_type not a DeepSeek-V4 family, or a control token missing).
  static absl::StatusOr<std::unique_ptr<RequestEncoder>> FromDirectory(const std::string& dir);
  // Over a tokenizer owned elsewhere (must outlive the encoder), family from `model_type`.
  static absl::StatusOr<std::unique_ptr<RequestEncoder>> Create(const Tokenizer* tokenizer,
                                                                std::string_view model_type);

  // Parses `body` (JSON text) with the API's codec and encodes it. Errors: the codec's and the
  // prompt encoder's InvalidArgument (messages naming the field, as in the server's 400s);
  // Internal when the template cannot be tokenized.
  absl::StatusOr<EncodedRequest> Encode(RequestApi api, std::string_view body) const;

  // Sets the engine-side constraint of `encoded` on `params` (grammar from `compiler`; after
  // `</think>` when the prompt opens reasoning, with EOS / DSML masked before it, as the server
  // does). No-op without a constraint. `model_eos_ids`: the model's EOS ids (ModelInfo).
  // Errors: the grammar compiler's (InvalidArgument naming the tools or response_format).
  absl::Status ApplyConstraint(const EncodedRequest& encoded, structured::GrammarCompiler& compiler,
                               const std::vector<int32_t>& model_eos_ids,
                               engine::SamplingParams* params) const;

  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const protocol::MarkerIds& markers() const { return markers_; }
  protocol::ModelFamily family() const { return family_; }

 private:
  RequestEncoder(const Tokenizer* tokenizer, std::unique_ptr<Tokenizer> owned,
                 protocol::ModelFamily family, protocol::MarkerIds markers)
      : tokenizer_(tokenizer), owned_(std::move(owned)), family_(family), markers_(markers) {}

  const Tokenizer* tokenizer_;
  std::unique_ptr<Tokenizer> owned_;
  protocol::ModelFamily family_;
  protocol::MarkerIds markers_;
};

}  // namespace deepinfer::python

#endif  // DEEPINFER_PYTHON_REQUEST_ENCODER_H_
