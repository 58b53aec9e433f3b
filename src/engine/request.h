// What callers exchange with the engine: a GenerateRequest in, a RequestStream of StepOutputs
// out. Thread-safety: RequestStream is safe for one producer (the engine thread) and any number
// of consumer threads (typically one HTTP thread).
#ifndef DEEPINFER_ENGINE_REQUEST_H_
#define DEEPINFER_ENGINE_REQUEST_H_

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "engine/sampling_params.h"
#include "kv/block_record.h"

namespace deepinfer::engine {

// A request as submitted. `prompt` holds token ids (tokenization is the caller's job).
struct GenerateRequest {
  // Unique among the engine's live requests (AlreadyExists otherwise); "" = engine assigns one.
  std::string request_id;
  std::vector<int32_t> prompt;  // non-empty, ids < vocab_size
  SamplingParams params;
  // Prefix-cache isolation (vLLM's `cache_salt`): folded into every block key of this request,
  // so requests with different salts never share cached KV. "" = no salt (shared with every
  // other unsalted request).
  std::string cache_salt;
  // Traffic class of the request ("traffic_class" / X-Traffic-Class): selects the KV store's
  // TTL for the blocks it writes (3 d agent, 7 d chat by default).
  kv::TrafficClass traffic_class = kv::TrafficClass::kChat;
  // Whether this request may use the engine's speculative decoding (EngineConfig::speculative);
  // false runs it without drafts in the same batches.
  bool speculative = true;
};

// Why a sample stopped.
enum class FinishReason {
  kStop,    // EOS (unless ignore_eos) or one of stop_token_ids was generated
  kLength,  // max_tokens reached, or the model's max context
  kAbort,   // Engine::Abort / Shutdown
  kError,   // the forward failed; StepOutput::error says why
};
std::string_view FinishReasonName(FinishReason reason);  // "stop", "length", "abort", "error"

// A token and its log-probability (natural log) under the model's raw distribution.
struct TokenLogprob {
  int32_t token_id = 0;
  float logprob = 0.0f;
  // Rank of token_id in the distribution (1 = most likely).
  int32_t rank = 0;
  // The top-k alternatives (k = SamplingParams::logprobs), most likely first.
  std::vector<std::pair<int32_t, float>> top;

  bool operator==(const TokenLogprob&) const = default;
};

// Draft positions StepOutput counts accepted drafts for (>= kMaxSpeculativeTokens, engine.h).
inline constexpr int kStepOutputDraftPositions = 5;

// One message on a request's stream: new tokens of one sample (usually one token per step),
// and/or its end. The last message of each sample has `finish` set; after every sample's last
// message the stream is closed.
struct StepOutput {
  int sample_index = 0;                // 0..n-1
  std::vector<int32_t> token_ids;      // newly generated ids (may be empty on abort/error)
  std::vector<TokenLogprob> logprobs;  // parallel to token_ids when params.logprobs >= 0
  // Prompt logprobs (only in the first message of sample 0, when params.prompt_logprobs >= 0):
  // entry i is prompt token i+1 given prompt tokens 0..i.
  std::vector<TokenLogprob> prompt_logprobs;
  std::optional<FinishReason> finish;
  absl::Status error;  // non-OK only with FinishReason::kError
  // Timings (MonotonicNanos clock) and counts, filled on every message.
  int64_t arrival_ns = 0;      // Submit() time
  int64_t first_token_ns = 0;  // when this sample's first token was produced (0 if none yet)
  // When the scheduler first admitted this sample (0 while it waits): queue time is
  // scheduled_ns - arrival_ns (vllm:request_queue_time_seconds).
  int64_t scheduled_ns = 0;
  int64_t now_ns = 0;          // when this message was produced
  int prompt_tokens = 0;
  // Prompt tokens served from the prefix cache (KV-CACHE.md §5): the hit, not counting replayed
  // tokens. 0 when prefix caching is off or nothing matched.
  int cached_tokens = 0;
  // Tokens of the hit prefix recomputed by a bounded replay (the block before the hit end,
  // KV-CACHE.md §5 rule 4); 0 when the hit restored a snapshot or there was no hit.
  int replayed_tokens = 0;
  // True when this sample's KV descends from a replayed (approximate) window state.
  bool approximate = false;
  // Of cached_tokens: tokens whose blocks came from the host tier (L1) and from the KV store
  // (L2, fetched through L1); the rest were in the engine's block pool (L0).
  int cached_host_tokens = 0;
  int cached_store_tokens = 0;
  int output_tokens = 0;  // this sample's generated tokens so far
  // This sample's counts so far (per-request log fields): draft tokens verified and accepted
  // (speculative decoding), tokens appended by jump-forward, forward passes that computed it.
  int drafted_tokens = 0;
  int accepted_tokens = 0;
  int forced_tokens = 0;
  int forward_passes = 0;
  // Drafts proposed but not verified because the variable-length planner trimmed them.
  int trimmed_drafts = 0;
  // Steps that verified drafts for this sample, and its accepted drafts by position in the draft
  // (0 = first): mean accepted length = 1 + accepted / verify_steps.
  int verify_steps = 0;
  std::array<int, kStepOutputDraftPositions> accepted_per_position{};
};

// Output queue of one request. The engine pushes; consumers pop with or without a timeout.
class RequestStream {
 public:
  RequestStream(std::string request_id, int num_samples)
      : request_id_(std::move(request_id)), open_samples_(num_samples) {}

  const std::string& request_id() const { return request_id_; }

  // Pops the next message, waiting up to `timeout`. Returns nullopt on timeout or when the stream
  // is finished and drained (check finished() to tell them apart).
  std::optional<StepOutput> Next(std::chrono::nanoseconds timeout);
  // Pops the next message, waiting as long as needed; nullopt once finished and drained.
  std::optional<StepOutput> Next();
  // Pops everything queued now without waiting.
  std::vector<StepOutput> Drain();
  // True when every sample's final message has been pushed (they may not be popped yet).
  bool finished() const;

  // Engine side: appends a message; a message with `finish` closes its sample.
  void Push(StepOutput output);

 private:
  const std::string request_id_;
  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  std::deque<StepOutput> queue_ ABSL_GUARDED_BY(mu_);
  int open_samples_ ABSL_GUARDED_BY(mu_);
};

}  // namespace deepinfer::engine

#endif  // DEEPINFER_ENGINE_REQUEST_H_
