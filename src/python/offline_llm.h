// The Python package's LLM (issue #28): a model directory loaded into an engine::LLM with its
// tokenizer, generation_config defaults and (for DeepSeek models) the chat template, plus
// OfflineBatch, the incremental view of a set of submitted requests that generate(), the
// streaming iterator and chat() are built on. All behaviour lives here; src/python/module.cc only
// converts between Python objects and these types.
//
// Thread-safety: OfflineLLM may be used from several threads (engine::LLM is); an OfflineBatch
// from one thread at a time.
#ifndef DEEPINFER_PYTHON_OFFLINE_LLM_H_
#define DEEPINFER_PYTHON_OFFLINE_LLM_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "api/stop_matcher.h"
#include "engine/llm.h"
#include "protocol/output_parser.h"
#include "python/request_encoder.h"
#include "python/sampling_spec.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::python {

// LLM(model=DIR, **engine options).
struct OfflineLLMOptions {
  std::string model;  // Hugging Face directory (config.json, *.safetensors, tokenizer.json)
  int64_t kv_memory_bytes = int64_t{512} << 20;
  int max_num_seqs = 64;
  int max_num_batched_tokens = 2048;
  bool enable_prefix_caching = true;
  bool async_scheduling = true;
  int compile_threads = 2;  // grammar compiler threads (so_args)
  bool fp32_activations = false;
};

// A prompt: text (encoded with the tokenizer, BOS first when the model has one) or token ids.
struct PromptInput {
  std::optional<std::string> text;
  std::vector<int32_t> token_ids;  // used when text is unset
};

// One sample's output so far (vLLM's CompletionOutput).
struct CompletionState {
  int index = 0;
  std::string text;  // chat: the answer content
  std::vector<int32_t> token_ids;
  std::vector<engine::TokenLogprob> logprobs;  // when SamplingParams.logprobs >= 0
  double cumulative_logprob = 0;
  std::string finish_reason;  // "" while running; "stop", "length", "abort", "tool_calls", ...
  std::string stop_reason;    // the stop string that matched, else ""
  // chat(): reasoning text and parsed tool calls (chat_json: the protocol events, coalesced).
  std::string reasoning;
  std::vector<protocol::ParsedToolCall> tool_calls;
  std::string error;  // chat: why a tool call is broken
};

// One request's output so far (vLLM's RequestOutput).
struct RequestState {
  std::string request_id;
  std::optional<std::string> prompt;
  std::vector<int32_t> prompt_token_ids;
  std::vector<engine::TokenLogprob> prompt_logprobs;
  std::vector<CompletionState> outputs;
  int num_cached_tokens = 0;
  bool finished = false;
};

class OfflineLLM;

// Requests submitted together. Poll() moves engine outputs into the RequestStates; destroying
// the batch (or Abort()) aborts whatever still runs, so no request outlives its batch.
class OfflineBatch {
 public:
  ~OfflineBatch();
  OfflineBatch(const OfflineBatch&) = delete;
  OfflineBatch& operator=(const OfflineBatch&) = delete;

  // Waits up to `timeout` for engine outputs and applies all that are queued. Returns the
  // indices of the requests that changed. Errors: the first engine error of a sample (then
  // everything is aborted).
  absl::StatusOr<std::vector<int>> Poll(std::chrono::nanoseconds timeout);
  // Aborts every live request and waits until the engine has released them (their samples end
  // with finish_reason "abort"). Idempotent.
  void Abort();
  bool finished() const;
  const std::vector<RequestState>& requests() const { return requests_; }

 private:
  friend class OfflineLLM;
  struct Sample {
    std::unique_ptr<StreamingDetokenizer> detok;
    std::unique_ptr<api::StopMatcher> stop;
    std::unique_ptr<protocol::OutputParser> parser;
    std::vector<protocol::OutputEvent> events;
    bool done = false;
  };
  struct Live {
    std::shared_ptr<engine::RequestStream> stream;
    std::vector<Sample> samples;
    bool aborted = false;  // Abort sent (every sample done early by stop strings)
    bool closed = false;   // the engine's stream is finished and drained
  };
  OfflineBatch(std::shared_ptr<OfflineLLM> llm) : llm_(std::move(llm)) {}
  // Applies one engine message to request i; returns an error for a sample that failed.
  absl::Status Apply(int i, engine::StepOutput out);
  void FinishSample(int i, int s, std::string reason);

  std::shared_ptr<OfflineLLM> llm_;
  std::vector<ResolvedParams> params_;
  std::vector<RequestState> requests_;
  std::vector<Live> live_;
};

class OfflineLLM : public std::enable_shared_from_this<OfflineLLM> {
 public:
  // Loads the model, tokenizer and generation_config.json of options.model. Errors:
  // InvalidArgument for bad engine options (naming them), the loaders' errors (NotFound for a
  // missing directory / file, InvalidArgument for a bad config) and Engine::Create's.
  static absl::StatusOr<std::shared_ptr<OfflineLLM>> Create(const OfflineLLMOptions& options);
  ~OfflineLLM();

  const GenerationDefaults& generation_defaults() const { return defaults_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const model::ModelInfo& model_info() const;
  // Null when the model has no DeepSeek chat template (chat() is then unavailable).
  const RequestEncoder* chat_encoder() const { return encoder_.get(); }
  engine::EngineStats Stats() const;

  // The ids of `prompt` (text: BOS + tokenizer ids, as `deepinfer generate --prompt`).
  // Error: InvalidArgument for an empty prompt with no BOS to start from.
  absl::StatusOr<std::vector<int32_t>> PromptIds(const PromptInput& prompt) const;

  // Submits every prompt (so_args compiled first; all or nothing). `params` has one entry, or
  // one per prompt. Errors: InvalidArgument naming the prompt ("prompt i: ...") and the
  // engine's Submit errors (nothing is left running).
  absl::StatusOr<std::unique_ptr<OfflineBatch>> Start(const std::vector<PromptInput>& prompts,
                                                      const std::vector<ResolvedParams>& params);
  // chat(): every conversation is a Chat Completions body (messages, tools, tool_choice,
  // thinking, response_format ...), encoded as the server does; outputs are parsed into content,
  // reasoning and tool calls. Errors: FailedPrecondition without a chat template; the codec's
  // and encoder's InvalidArgument ("conversation i: ..."); Start's.
  absl::StatusOr<std::unique_ptr<OfflineBatch>> StartChat(
      const std::vector<std::string>& bodies, const std::vector<ResolvedParams>& params);

 private:
  friend class OfflineBatch;
  OfflineLLM() = default;
  absl::StatusOr<std::unique_ptr<OfflineBatch>> Submit(
      std::vector<std::vector<int32_t>> ids, std::vector<ResolvedParams> params,
      std::vector<std::optional<std::string>> texts, std::vector<EncodedRequest> chat);

  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<engine::LLM> llm_;
  std::unique_ptr<RequestEncoder> encoder_;
  GenerationDefaults defaults_;
};

}  // namespace deepinfer::python

#endif  // DEEPINFER_PYTHON_OFFLINE_LLM_H_
