// Internal to deepinfer_api: what the route handlers of ApiServer share (openai_server.h).
// One file per concept:
//   openai_server.cc      ApiServer, routing, authentication, the model check, route metrics
//   server_util.cc        small response helpers (ids, JSON / error responses, RecordingWriter)
//   constraint_plan.cc    structured output of chat-like requests (response_format, forced tools)
//   request_params.cc     SamplingParams from the API fields, with the context / KV checks
//   request_pump.cc       submission, the streaming pump (disconnects, early stop), log + metrics
//   request_metrics.cc    vLLM's per-request /metrics series (api/request_metrics.h)
//   prompt_ids.cc         prompt tokenization under the context bound (byte bound, early exit)
//   chat_handler.cc       POST /v1/chat/completions
//   completion_handler.cc POST /v1/completions
//   codec_handler.cc      POST /v1/responses, /v1/messages, /v1/messages/count_tokens
//   info_handlers.cc      /tokenize, /detokenize, /v1/models, /metrics, /reset_prefix_cache
// Handlers reach the engine only through EngineBackend (api/engine_backend.h).
#ifndef DEEPINFER_API_SERVER_INTERNAL_H_
#define DEEPINFER_API_SERVER_INTERNAL_H_

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "api/constraint_rules.h"
#include "api/engine_backend.h"
#include "api/engine_metrics.h"
#include "api/request_metrics.h"
#include "api/openai_codec.h"
#include "api/openai_server.h"
#include "http/metrics.h"
#include "http/server.h"
#include "nlohmann/json.hpp"
#include "protocol/conversation.h"
#include "protocol/output_parser.h"
#include "protocol/prompt_encoder.h"
#include "structured/compiler.h"

namespace deepinfer::api {

// "<prefix><24 random alphanumerics>", unique enough to key live engine requests.
std::string RandomId(std::string_view prefix);
// The id of the generation request `req` (vLLM's rule): "<prefix><request id>", where the request
// id is the client's X-Request-Id or the transport's random one (http::HttpRequest::request_id,
// echoed in the response header); RandomId(prefix) when the transport set none. The response's
// `id`, the engine request and the log line use it.
std::string RequestIdFor(const http::HttpRequest& req, std::string_view prefix);
int64_t UnixSeconds();
void SendJson(http::ResponseWriter& w, int status, const nlohmann::ordered_json& j);
// /v1/messages and everything below it speak Anthropic's error shape.
bool IsMessagesRoute(const std::string& path);
// What an in-flight request gets when the server's drain deadline passes (a server-side
// condition: Unavailable -> 503 / Anthropic 529 overloaded_error).
absl::Status ServerClosingError();
// An OpenAI-shaped error response (and the rejected request's log line).
void SendError(http::ResponseWriter& w, const absl::Status& status);
protocol::StreamEnd StreamEndFor(engine::FinishReason r);

// Wraps the transport writer to remember the HTTP status the handler answered with.
class RecordingWriter : public http::ResponseWriter {
 public:
  explicit RecordingWriter(http::ResponseWriter& inner) : inner_(inner) {}
  void Send(int status, std::string_view content_type, std::string body,
            const std::map<std::string, std::string>& extra_headers) override {
    status_ = status;
    inner_.Send(status, content_type, std::move(body), extra_headers);
  }
  bool BeginStream(int status, std::string_view content_type) override {
    status_ = status;
    return inner_.BeginStream(status, content_type);
  }
  bool WriteChunk(std::string_view data) override { return inner_.WriteChunk(data); }
  void EndStream() override { inner_.EndStream(); }
  bool ClientClosed() override { return inner_.ClientClosed(); }
  bool ServerClosing() override { return inner_.ServerClosing(); }
  int status() const { return status_; }
  // Overrides the recorded status (e.g. 499 when the client left mid-stream).
  void set_status(int status) { status_ = status; }

 private:
  http::ResponseWriter& inner_;
  int status_ = 0;
};

// A Chat/Completions request cut off by the shutdown deadline: a stream ends with an error chunk
// and [DONE], a non-stream request gets the error response; either way the status is logged as
// the server-side 503.
void EndOpenAiRequestForShutdown(RecordingWriter& w, bool stream_mode);

// Timing and token counts of one generation request, for the log line and the metrics.
struct RequestRecord {
  std::string id;
  std::string route;
  int64_t prompt_tokens = 0;
  // The request's prefix-cache hit: sample 0's (with n > 1 the other samples fork its prompt).
  int64_t cached_tokens = 0;
  int64_t replayed_tokens = 0;
  // Of cached_tokens: served from the host tier (L1) and from the KV store (L2); the rest came
  // from the engine's block pool.
  int64_t cached_host_tokens = 0;
  int64_t cached_store_tokens = 0;
  int64_t generated_tokens = 0;
  // Decoding counts, summed over samples (each StepOutput carries its sample's running count):
  // draft tokens verified / accepted (speculative decoding), tokens jump-forward appended, and
  // forward passes that computed the request, drafts the variable-length planner trimmed.
  // Fields: 0 drafted (verified), 1 accepted, 2 forced, 3 forward passes, 4 trimmed, 5 verify
  // steps, 6.. accepted at draft position 0, 1, ...
  static constexpr int kAcceptedAt = 6;
  std::vector<std::array<int, kAcceptedAt + engine::kStepOutputDraftPositions>> decoding;
  int64_t Decoding(int field) const {
    int64_t n = 0;
    for (const auto& d : decoding) n += d[field];
    return n;
  }
  int64_t arrival_ns = 0;      // when the handler started (0: the engine's arrival)
  int64_t first_token_ns = 0;  // 0 = no token
  int64_t last_token_ns = 0;
  // Sample 0's engine arrival and first admission by the scheduler (0: never scheduled).
  int64_t engine_arrival_ns = 0;
  int64_t scheduled_ns = 0;
  // Sample 0's engine finish, when it was seen (vllm:request_success_total's finished_reason).
  std::optional<engine::FinishReason> finish;
  // Seconds between consecutive token messages of each sample (vllm:inter_token_latency_seconds:
  // one observation per engine step that produced tokens), and each sample's last message time.
  std::vector<float> inter_token_s;
  std::vector<int64_t> sample_last_ns;
  void Observe(const engine::StepOutput& o) {
    if (arrival_ns == 0) arrival_ns = o.arrival_ns;
    prompt_tokens = o.prompt_tokens;
    if (o.sample_index == 0) {
      cached_tokens = o.cached_tokens;
      replayed_tokens = o.replayed_tokens;
      cached_host_tokens = o.cached_host_tokens;
      cached_store_tokens = o.cached_store_tokens;
    }
    generated_tokens += static_cast<int64_t>(o.token_ids.size());
    if (o.sample_index >= 0 && o.sample_index < 1024) {
      if (decoding.size() <= static_cast<size_t>(o.sample_index)) decoding.resize(o.sample_index + 1);
      auto& d = decoding[o.sample_index];
      d = {o.drafted_tokens, o.accepted_tokens, o.forced_tokens, o.forward_passes,
           o.trimmed_drafts, o.verify_steps};
      for (int j = 0; j < engine::kStepOutputDraftPositions; ++j) {
        d[kAcceptedAt + j] = o.accepted_per_position[j];
      }
    }
    if (o.first_token_ns > 0 && (first_token_ns == 0 || o.first_token_ns < first_token_ns)) {
      first_token_ns = o.first_token_ns;
    }
    if (!o.token_ids.empty()) last_token_ns = std::max(last_token_ns, o.now_ns);
    if (o.sample_index == 0 && o.finish) finish = o.finish;
    if (o.sample_index == 0) {
      engine_arrival_ns = o.arrival_ns;
      if (o.scheduled_ns > 0) scheduled_ns = o.scheduled_ns;
    }
    if (!o.token_ids.empty() && o.sample_index >= 0) {
      if (sample_last_ns.size() <= static_cast<size_t>(o.sample_index)) {
        sample_last_ns.resize(o.sample_index + 1, 0);
      }
      int64_t& last = sample_last_ns[o.sample_index];
      if (last > 0 && o.now_ns >= last) inter_token_s.push_back((o.now_ns - last) * 1e-9f);
      last = o.now_ns;
    }
  }
};

struct ApiServer::Impl {
  // Registers the request metrics in the server's registry.
  explicit Impl(ApiServer* server);

  // The compiled grammar for a Chat-shaped response_format (json_object / json_schema),
  // compiled off the engine thread by the grammar compiler (created on first use) and cached.
  // Errors: InvalidArgument naming the unsupported schema keyword (-> 400).
  absl::StatusOr<std::shared_ptr<const structured::CompiledGrammar>> GrammarFor(
      const protocol::ResponseFormat& format);
  // The grammar compiler (created on first use).
  structured::GrammarCompiler* Compiler() ABSL_LOCKS_EXCLUDED(grammar_mu);
  absl::Mutex grammar_mu;
  std::unique_ptr<structured::GrammarCompiler> grammar_compiler ABSL_GUARDED_BY(grammar_mu);

  // Structured output of a chat-like request (api/constraint_rules.h).
  using ConstraintPlan = ::deepinfer::api::ConstraintPlan;
  // Before encoding: api::PlanConstraint, with its 400 naming response_format.
  absl::StatusOr<ConstraintPlan> PlanConstraint(protocol::Conversation* conv,
                                                std::optional<bool> thinking_requested,
                                                bool parallel_tool_calls,
                                                protocol::EncodeOptions* options);
  // After encoding: the grammar and its start (`</think>` when the prompt opened reasoning) into
  // `params`. A forced tool call after reasoning also forces `</think>` once the tokens left only
  // fit the shortest call; a reasoning budget forces it after that many tokens (with or without
  // a grammar). Errors: InvalidArgument naming an unenforceable schema keyword (400), with the
  // parameter set ("response_format" / "tools"); min_tokens together with a grammar (the grammar
  // may need EOS before min_tokens: 400 naming min_tokens).
  absl::Status ApplyConstraint(const ConstraintPlan& plan, const protocol::Conversation& conv,
                               const protocol::EncodedPrompt& encoded,
                               engine::SamplingParams* params);

  void Route(const http::HttpRequest& req, RecordingWriter& w);
  void HandleChat(const http::HttpRequest& req, RecordingWriter& w);
  // /v1/responses, /v1/messages, /v1/messages/count_tokens (the codecs over the same protocol).
  enum class CodecApi { kResponses, kMessages, kCountTokens };
  void HandleCodec(const http::HttpRequest& req, RecordingWriter& w, CodecApi api);
  void HandleCompletion(const http::HttpRequest& req, RecordingWriter& w);
  void HandleTokenize(const http::HttpRequest& req, RecordingWriter& w);
  void HandleDetokenize(const http::HttpRequest& req, RecordingWriter& w);
  void HandleModels(const http::HttpRequest& req, RecordingWriter& w);
  void HandleMetrics(RecordingWriter& w);
  // POST /reset_prefix_cache (vLLM's route): Engine::ResetPrefixCache, then 200
  // {"status": "ok"}.
  void HandleResetPrefixCache(RecordingWriter& w);

  // Errors: Unauthenticated (code invalid_api_key); the message of a missing key names the
  // header the route's clients use (`anthropic`: x-api-key).
  absl::Status CheckAuth(const http::HttpRequest& req, bool anthropic) const;
  absl::Status CheckModel(const std::string& model) const;
  std::string ModelName(const std::string& requested) const {
    return s->options_.served_model_name.empty() ? requested : s->options_.served_model_name;
  }
  // SamplingParams for a prompt of `prompt_len` tokens, with the context / KV checks.
  // Rejects a prompt that provably exceeds the context before it is tokenized: `text_bytes`
  // bytes of text plus `special_tokens` are at least special_tokens + ceil(bytes / longest
  // token) tokens (memory per request then stays bounded by the context, not the body). Error:
  // InvalidArgument with code context_length_exceeded naming `prompt_param`.
  absl::Status CheckPromptBound(int64_t text_bytes, int64_t special_tokens,
                                const char* prompt_param) const;
  absl::Status CheckPromptBound(const protocol::EncodedPrompt& prompt,
                                const char* prompt_param) const;
  // The ids of a chat-like prompt (prompt_ids.cc): with `bounded`, the byte bound first, then the
  // tokenizer stops once the prompt provably has more than MaxModelLen() tokens (count_tokens
  // passes false: it counts whatever it gets). Errors: InvalidArgument context_length_exceeded
  // naming `prompt_param`; Internal when the template names a special token the tokenizer lacks.
  absl::StatusOr<std::vector<int32_t>> PromptIds(const protocol::EncodedPrompt& encoded,
                                                 const char* prompt_param,
                                                 bool bounded = true) const;
  // The same for a completions text prompt: BOS (when the tokenizer adds one) + the text's ids.
  absl::StatusOr<std::vector<int32_t>> PromptTextIds(std::string_view text,
                                                     const char* prompt_param) const;
  // The context requests get: the model's, capped by ApiServerOptions::max_model_len.
  int64_t MaxModelLen() const {
    const int64_t model_ctx = s->backend_->model_info().max_context;
    const int64_t cap = s->options_.max_model_len;
    return cap > 0 && cap < model_ctx ? cap : model_ctx;
  }
  // The longest token's text in bytes (for CheckPromptBound).
  int64_t max_token_bytes = 1;

  // The max_tokens of a chat-like request that omits it (Chat Completions, Responses): DeepSeek
  // API's defaults, 4096 in chat mode and 32768 with thinking (README "Defaults"), or the
  // model's generation_config.json max_new_tokens when it sets one; still capped by the context.
  int64_t DefaultChatMaxTokens(bool thinking) const;
  // Reasoning tokens among `ids` while `*in_reasoning`: every id up to and including the one
  // that ends the reasoning (`</think>`, a DSML tag or EOS), which clears `*in_reasoning`. Token
  // exact, so a reasoning budget N reads as at most N + 1.
  int64_t CountReasoningTokens(std::span<const int32_t> ids, bool* in_reasoning) const;

  absl::StatusOr<engine::SamplingParams> BuildParams(const SamplingFields& f, int64_t prompt_len,
                                                     const char* prompt_param,
                                                     int64_t default_max_tokens) const;
  absl::StatusOr<std::shared_ptr<engine::RequestStream>> Submit(engine::GenerateRequest request);

  enum class PumpEnd { kDone, kClientGone };
  // Feeds every StepOutput to `on_output` until `done()` or the stream ends. Aborts the engine
  // request when the client disconnects (on_output returns false or ClientClosed()) or when
  // done() turns true before the engine finished (stop strings).
  PumpEnd Pump(engine::RequestStream& stream, http::ResponseWriter& w,
               const std::function<bool(engine::StepOutput&)>& on_output,
               const std::function<bool()>& done);

  void Finish(const RequestRecord& r, int status);

  std::string TokenText(int32_t id) const { return std::string(s->tokenizer_->TokenBytes(id)); }
  std::vector<std::pair<std::string, double>> TopText(
      const std::vector<std::pair<int32_t, float>>& top) const {
    std::vector<std::pair<std::string, double>> out;
    for (const auto& [id, lp] : top) out.emplace_back(TokenText(id), lp);
    return out;
  }

  ApiServer* s;
  http::Counter* prompt_tokens;
  http::Counter* generation_tokens;
  http::Histogram* ttft;
  http::Histogram* tpot;
  http::Histogram* e2e;
  std::unique_ptr<EngineMetrics> engine_metrics;
  std::unique_ptr<RequestMetrics> request_metrics;  // vLLM's per-request series
  http::Gauge* in_flight;
};

}  // namespace deepinfer::api

#endif  // DEEPINFER_API_SERVER_INTERNAL_H_
