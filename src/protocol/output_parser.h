// Streaming output parser: model token ids in, protocol events out (shared/spec/protocol.md §2.3,
// DEEPINFER-DESIGN.md §13).
//
// Stages: reasoning -> answer -> tool calls. The control tokens `</think>`, `<think>`, `｜DSML｜`
// and EOS are recognised by token id only; the same text spelled with ordinary tokens stays
// literal text (spec §5 case 18). Everything else is decoded incrementally (no broken UTF-8: an
// incomplete trailing sequence is held until later ids complete it and dropped at end of stream,
// spec §5 case 9). The text between control tokens is matched against the ordinary-text parts of
// the DSML grammar (`tool_calls>`, `invoke name="`, `parameter name="`, `string="true|false">`,
// closers) incrementally, so a chunk may end anywhere; only a live partial match is held back.
//
// Events (concatenated, they are identical however the output is chunked, and equal the
// non-streaming parse, which is just Feed(all) + Finish()):
//   kReasoningDelta / kContentDelta  text pieces (valid UTF-8)
//   kToolCallStart      tool_index, tool_call_id, tool_name — as soon as the name is complete
//   kToolCallArguments  tool_index, a fragment of the arguments JSON text; the fragments of one
//                       call concatenate to the reference layout {"k": "v", "n": 2} (string values
//                       JSON-escaped piece by piece, string="false" values passed through raw)
//   kToolCallEnd        tool_index, valid (false: the call is broken and must not be executed;
//                       `error` says why)
//   kFinish             finish_reason (+ stop_sequence), always the last event, exactly once
//
// Policies (docs/protocol.md lists them with their tests):
//   * `</think>` optionally preceded by newlines ends reasoning (newlines dropped); a DSML tag in
//     reasoning also ends it and starts tool calls (no-`</think>` case); leading newlines of
//     reasoning and of the answer are dropped; `</think>`/`<think>` ids in the answer are dropped.
//   * Stop strings are matched only in answer text, with hold-back of partial matches; output is
//     cut before the match and the parser finishes (kStopSequence). The engine should stop
//     generating once finished() is true.
//   * Malformed DSML never becomes content and never becomes an executable call: a call whose
//     invoke/parameter is not properly closed, has a duplicate parameter, an invalid
//     string="false" JSON value or an undeclared name ends with valid=false (undeclared names are
//     not announced at all), and the stream finishes with kToolCallError. A missing parameter
//     closer before the next `<｜DSML｜parameter` / `</｜DSML｜invoke>` is repaired (the parameter
//     is closed implicitly); a missing block wrapper (bare invoke) or a missing block closer at
//     EOS is tolerated; near-miss wrappers `toolcalls` / `function_calls` are accepted.
// Thread-safety: one parser per output stream, used from one thread.
#ifndef DEEPINFER_PROTOCOL_OUTPUT_PARSER_H_
#define DEEPINFER_PROTOCOL_OUTPUT_PARSER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "protocol/prompt_encoder.h"

namespace deepinfer {
class Tokenizer;
class StreamingDetokenizer;
}  // namespace deepinfer

namespace deepinfer::protocol {

enum class FinishReason {
  kStop,           // EOS (or end of stream) in reasoning/answer, no tool call
  kStopSequence,   // a client stop string matched (stop_sequence names it)
  kLength,         // the engine hit max_tokens / context (Finish(StreamEnd::kLength))
  kToolCalls,      // at least one complete, valid tool call and no broken one
  kToolCallError,  // the model produced DSML that could not be turned into valid tool calls
  kCancelled,      // Finish(StreamEnd::kCancelled)
};
std::string_view FinishReasonName(FinishReason reason);

struct OutputEvent {
  enum class Type {
    kReasoningDelta,
    kContentDelta,
    kToolCallStart,
    kToolCallArguments,
    kToolCallEnd,
    kFinish,
  };
  Type type = Type::kContentDelta;
  std::string text;          // deltas and argument fragments
  int tool_index = -1;       // tool events: 0, 1, ... in output order
  std::string tool_call_id;  // kToolCallStart
  std::string tool_name;     // kToolCallStart
  bool valid = true;         // kToolCallEnd
  std::string error;         // kToolCallEnd (valid == false), kFinish (kToolCallError)
  FinishReason finish_reason = FinishReason::kStop;  // kFinish
  std::string stop_sequence;                         // kFinish with kStopSequence

  bool operator==(const OutputEvent&) const = default;
};

// Why the token stream ended, when not by an EOS id.
enum class StreamEnd { kEndOfSequence, kLength, kCancelled };

struct OutputParserOptions {
  ParserStart start = ParserStart::kAnswer;  // EncodedPrompt::start
  std::string forced_tool_name;              // start == kToolArguments
  std::vector<std::string> stop;             // client stop strings (empty ones ignored)
  // Declared tool names; a call to any other name is broken (spec §5 case 20d). nullopt: accept
  // any name.
  std::optional<std::vector<std::string>> declared_tools;
  // Makes the id of tool call `index`; default "call_" + 24 random alphanumerics.
  std::function<std::string(int index)> make_tool_call_id;
  // vLLM's min_tokens for stop strings: they end the stream only once this many ids were fed
  // (OutputParser counts every id, reasoning included); text that could still become a stop
  // string stays held, so one that straddles the boundary still matches. 0 = from the start.
  int64_t min_tokens = 0;
  // parallel_tool_calls false: > 0 ends the stream (kToolCalls, or kToolCallError when a call
  // was broken) as soon as this many announced calls have ended; later output is never parsed
  // (the caller stops the engine once finished()). 0 = no limit.
  int max_tool_calls = 0;
};

// Text/marker level state machine (the core; also what the fuzz target drives).
class OutputStateMachine {
 public:
  enum class Marker { kThinkBegin, kThinkEnd, kDsml, kEos };

  explicit OutputStateMachine(OutputParserOptions options);
  ~OutputStateMachine();
  OutputStateMachine(const OutputStateMachine&) = delete;
  OutputStateMachine& operator=(const OutputStateMachine&) = delete;

  // `text` must be valid UTF-8 pieces as produced by the detokenizer (a chunk may end anywhere
  // between code points). Ignored once finished().
  void FeedText(std::string_view text, std::vector<OutputEvent>* out);
  // A control token. kEos finishes the stream. Ignored once finished().
  void FeedMarker(Marker marker, std::vector<OutputEvent>* out);
  // Ends the stream: flushes held-back text with the stage's default action and emits kFinish.
  // No-op once finished().
  void Finish(StreamEnd end, std::vector<OutputEvent>* out);
  bool finished() const;
  // Whether stop strings may end the stream (OutputParserOptions::min_tokens). While disarmed a
  // complete stop string is plain text; text that could still become one is held.
  void SetStopsArmed(bool armed);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// Ids of the control tokens (from the checkpoint's tokenizer; never hard-coded).
struct MarkerIds {
  int32_t think_begin = -1;
  int32_t think_end = -1;
  int32_t dsml = -1;
  int32_t eos = -1;
  // Looks up <think>, </think>, ｜DSML｜ and the tokenizer's EOS. Error: NotFound naming the
  // missing token.
  static absl::StatusOr<MarkerIds> FromTokenizer(const Tokenizer& tokenizer);
};

// Token-id level parser: marker ids go to the state machine out of band, all other ids through
// the tokenizer's StreamingDetokenizer (special tokens other than the markers are skipped).
class OutputParser {
 public:
  // `tokenizer` must outlive the parser.
  OutputParser(const Tokenizer* tokenizer, MarkerIds markers, OutputParserOptions options);
  ~OutputParser();
  OutputParser(const OutputParser&) = delete;
  OutputParser& operator=(const OutputParser&) = delete;

  std::vector<OutputEvent> Feed(std::span<const int32_t> ids);
  // Bytes of an incomplete UTF-8 sequence still held are dropped (spec §5 case 9).
  std::vector<OutputEvent> Finish(StreamEnd end);
  bool finished() const { return machine_.finished(); }

 private:
  const Tokenizer* tokenizer_;
  MarkerIds markers_;
  int64_t min_tokens_ = 0;
  int64_t ids_seen_ = 0;
  std::unique_ptr<StreamingDetokenizer> detok_;
  OutputStateMachine machine_;
};

// Non-streaming view of an event sequence.
struct ParsedToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text
  bool valid = true;
  std::string error;
};
struct ParsedOutput {
  std::string reasoning;
  std::string content;
  std::vector<ParsedToolCall> tool_calls;
  FinishReason finish_reason = FinishReason::kStop;
  std::string stop_sequence;
  std::string error;
};
ParsedOutput Aggregate(std::span<const OutputEvent> events);

// Merges adjacent deltas of the same kind (and arguments of the same call): the canonical form in
// which any two chunkings of the same output compare equal.
std::vector<OutputEvent> CoalesceEvents(std::span<const OutputEvent> events);

}  // namespace deepinfer::protocol

#endif  // DEEPINFER_PROTOCOL_OUTPUT_PARSER_H_
