// DeepSeek V4 / V4.1 prompt encoder (shared/spec/protocol.md §1.4–§1.7, DEEPINFER-DESIGN.md §13).
//
// EncodePrompt() renders a Conversation into a list of pieces: special tokens (by their exact
// spelling, to be mapped to ids by the tokenizer) and plain-text spans. Special tokens come only
// from the template, never from user/tool/argument text, so a user typing `<｜User｜>` gets the
// plain ids of its characters (spec §1.6, §5 case 1). Adjacent text is merged, so text spans are
// cut only at special tokens (spec §4.4: cutting plain text elsewhere changes BPE ids).
//
// Algorithm (reference encoding_dsv4.py / V4.1 encoding.py plus the recipe's normalisation,
// spec §1.4–§1.6):
//   1. validate (typed errors, conversation.h);
//   2. leading system messages are merged with "\n\n"; V4: a later system message becomes a user
//      message; V4.1: it stays a mid-conversation `<｜System｜>` message;
//   3. tools (unless tool_choice is none or the list is empty) and response_format are attached
//      to the first system message; an empty one is inserted at index 0 when there is none;
//   4. tool messages become user tool_result blocks; consecutive user/tool messages merge; tool
//      results are stably sorted into the call order of the preceding assistant;
//   5. drop_thinking is disabled when tools are rendered; when active in thinking mode, assistant
//      messages before the last user message lose reasoning_content and developer messages before
//      it are removed;
//   6. per-message rendering and the generation header (`<｜Assistant｜>` + `<think>`/`</think>`);
//      tool_choice required / named prefill the DSML block opener in chat mode; in thinking
//      mode the prompt ends with `<think>` like `auto` (tools rendered) and the caller forces the
//      block after the reasoning (deepinfer's choice: DeepSeek's API answers 400 there).
// Thread-safety: stateless functions.
#ifndef DEEPINFER_PROTOCOL_PROMPT_ENCODER_H_
#define DEEPINFER_PROTOCOL_PROMPT_ENCODER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "protocol/conversation.h"

namespace deepinfer {
class Tokenizer;
class ThreadPool;
}  // namespace deepinfer

namespace deepinfer::protocol {

enum class ModelFamily {
  kDeepSeekV4,   // DSML tool_calls/invoke/parameter, "max" effort paragraph
  kDeepSeekV41,  // DSML " calls"/" invoke"/" parameter", <｜System｜>, numeric effort
};

// From config.json "model_type": "deepseek_v4" -> V4, "deepseek_v41" (or
// "deepseek_v41_text") -> V4.1. Error: Unimplemented naming the model type.
absl::StatusOr<ModelFamily> ModelFamilyFromModelType(std::string_view model_type);

// Reasoning effort as the client asked for it (already translated from the wire: Chat
// `reasoning_effort`, Responses `reasoning.effort`, Messages `output_config.effort`).
struct ReasoningEffort {
  enum class Kind { kDefault, kLow, kHigh, kMax, kNumeric };
  Kind kind = Kind::kDefault;
  int value = 0;  // kNumeric: 1..100 (V4.1 only)

  // Accepts "low", "high", "max" and the DeepSeek API aliases "minimal" -> low,
  // "medium" -> high, "xhigh" -> high, "ultra" -> max. Error: InvalidArgument
  // (kInvalidReasoningEffort) naming the value. ("none" is not an effort: it means thinking off,
  // which the codec handles.)
  static absl::StatusOr<ReasoningEffort> Parse(std::string_view name);
  static ReasoningEffort Numeric(int v) { return {Kind::kNumeric, v}; }
};

struct EncodeOptions {
  ModelFamily family = ModelFamily::kDeepSeekV4;
  bool thinking = true;  // the official API default
  ReasoningEffort effort;
  // The reference's drop_thinking (default on; automatically off when tools are rendered).
  bool drop_thinking = true;
};

// Where the output parser starts, given how the prompt ends.
enum class ParserStart {
  kReasoning,      // prompt ends with <think>
  kAnswer,         // prompt ends with </think> (or an assistant prefix)
  kToolCalls,      // tool_choice required: prompt ends inside the DSML block
  kToolArguments,  // tool_choice named: prompt ends after `invoke name="NAME">\n`
};

// One piece of the rendered prompt.
struct PromptPiece {
  bool special = false;
  // special: the token's exact spelling (e.g. "<｜User｜>"); else plain text.
  std::string text;
};

struct EncodedPrompt {
  std::vector<PromptPiece> pieces;  // no two adjacent text pieces
  ParserStart start = ParserStart::kAnswer;
  std::string forced_tool_name;  // start == kToolArguments: the named tool

  // The whole prompt as one string (special tokens spelled out), for byte comparisons.
  std::string Text() const;
};

// Renders `conversation`. Errors: InvalidArgument tagged with a ProtocolError (conversation.h).
absl::StatusOr<EncodedPrompt> EncodePrompt(const Conversation& conversation,
                                           const EncodeOptions& options);

// Maps pieces to ids with the tokenizer: special pieces via Tokenizer::TokenId(), text pieces with
// Tokenizer::EncodeTemplate() (plain text, added tokens never matched; parallel on `pool` for long
// prompts). With `max_tokens`, the tokenizer stops as soon as the prompt provably has more ids
// (Tokenizer::EncodeTemplateAtMost). Errors: NotFound naming a special token the tokenizer does
// not know; OutOfRange "more than <max_tokens> tokens" when the limit is exceeded.
absl::StatusOr<std::vector<int32_t>> PromptToIds(const EncodedPrompt& prompt,
                                                 const Tokenizer& tokenizer,
                                                 ThreadPool* pool = nullptr,
                                                 size_t max_tokens = SIZE_MAX);

}  // namespace deepinfer::protocol

#endif  // DEEPINFER_PROTOCOL_PROMPT_ENCODER_H_
