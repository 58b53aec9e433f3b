// Route handlers of the OpenAI-compatible server (ARCHITECTURE.md §3, STYLE.md habits 8-9):
// HTTP request -> codec (api/openai_codec.h) -> protocol (conversation, DeepSeek prompt encoder)
// -> tokenizer -> engine -> output parser / detokenizer -> SSE or JSON.
//
// Routes:
//   POST /v1/chat/completions   stream and non-stream; DeepSeek models only (a model without a
//                               DeepSeek chat template gets a 400 saying so)
//   POST /v1/completions        prompt text or ids, echo, logprobs, stop strings
//   GET  /v1/models, /v1/models/{id}
//   POST /tokenize, /detokenize (vLLM shapes)
//   GET  /health                200 {"status":"ok"}; 503 while shutting down
//   GET  /metrics               Prometheus text (http/metrics.h)
//   POST /v1/responses, /v1/messages, /v1/messages/count_tokens (api/*_codec.h)
//   POST /reset_prefix_cache    vLLM's route: empties the engine's prefix cache
//                               (Engine::ResetPrefixCache; blocks held by running requests stay
//                               theirs), then 200 {"status":"ok"}
// Every generation route takes vLLM's `cache_salt` (prefix-cache isolation between tenants) and
// reports the prompt tokens served from the prefix cache in its usage (Chat / Completions:
// prompt_tokens_details.cached_tokens and DeepSeek's prompt_cache_hit_tokens /
// prompt_cache_miss_tokens; Responses: input_tokens_details.cached_tokens; Messages:
// cache_read_input_tokens, with input_tokens the rest, Anthropic's accounting). With n > 1 the
// request's hit is sample 0's.
// GET routes also answer HEAD (headers only); every route answers OPTIONS with 204 and `Allow`,
// and any other method with 405 and `Allow` (RFC 9110 §15.5.6). Errors on /v1/messages* use
// Anthropic's shape {"type":"error","error":{"type","message"}}, all others OpenAI's.
//
// Shutdown: when the HTTP server's drain deadline passes (ResponseWriter::ServerClosing()), an
// in-flight stream ends with its API family's terminal error (Chat / Completions: a `data:
// {"error":{...}}` chunk and `data: [DONE]`; Messages: `event: error` with overloaded_error;
// Responses: `response.failed`), a non-streaming request gets the family's 503 / 529 error, and
// the request is logged with that server-side status (not 499, which means the client left).
//
// Threading: Handle() runs on HTTP worker threads (one per connection) and does all JSON,
// templating, tokenization and detokenization there; it talks to the engine only through
// EngineBackend (api/engine_backend.h: Submit / Abort / Stats / model_info / ResetPrefixCache)
// and the per-request RequestStream. A closed client connection
// aborts the engine request at once (freeing its KV); one request's failure never affects others.
// Every finished generation request logs one line (id, prompt / cached / replayed / generated
// tokens, TTFT, TPOT, total, status). Request ids follow vLLM: the response `id` is the API's
// prefix plus the client's X-Request-Id (or the transport's random id), which the response's
// X-Request-Id header echoes (http/request_id.h); the log line names the same id.
// GET /metrics: our deepinfer_* series plus vLLM's names (api/engine_metrics.h,
// api/request_metrics.h); deepinfer_http_requests_total counts by route, every route above its
// own label value (/v1/models/{id} as /v1/models) and unknown paths as "other".
#ifndef DEEPINFER_API_OPENAI_SERVER_H_
#define DEEPINFER_API_OPENAI_SERVER_H_

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "api/engine_backend.h"
#include "api/generation_config.h"
#include "engine/engine.h"
#include "http/metrics.h"
#include "http/server.h"
#include "protocol/output_parser.h"
#include "protocol/prompt_encoder.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::api {

struct ApiServerOptions {
  // The model id clients must send ("" = any name is accepted) and /v1/models lists; responses
  // report it as `model` and /metrics as the model_name label (vLLM: the first
  // --served-model-name).
  std::string served_model_name = "deepinfer";
  // Further names clients may send for the same model (vLLM's later --served-model-name
  // values); /v1/models lists them after served_model_name.
  std::vector<std::string> served_model_aliases;
  // When non-empty, /v1/*, /tokenize, /detokenize and /reset_prefix_cache need
  // "Authorization: Bearer <api_key>"
  // (scheme case-insensitive, RFC 9110 §11.1) or "x-api-key: <api_key>" (Anthropic clients).
  std::string api_key;
  // vLLM's --max-model-len: the context (prompt + completion) a request may use, reported as
  // max_model_len; 0 or more than the model's = the model's.
  int64_t max_model_len = 0;
  // Poll interval (ms) for client-disconnect checks while waiting for tokens.
  int poll_interval_ms = 20;
  // Defaults for omitted sampling fields (the model's generation_config.json, vLLM's
  // `--generation-config auto`; api/generation_config.h). Empty: the APIs' own defaults.
  SamplingDefaults sampling_defaults;
};

class ApiServer {
 public:
  // `engine` and `tokenizer` are not owned and must outlive the server. Chat support is decided
  // here from the model type (protocol::ModelFamilyFromModelType) and the tokenizer's control
  // tokens; when either is missing chat requests get a 400 naming the reason.
  ApiServer(engine::Engine* engine, const Tokenizer* tokenizer, ApiServerOptions options);
  // The same over any backend (not owned; must outlive the server), e.g. a remote one.
  ApiServer(EngineBackend* backend, const Tokenizer* tokenizer, ApiServerOptions options);
  ~ApiServer();
  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;

  // The http::Handler.
  void Handle(const http::HttpRequest& request, http::ResponseWriter& writer);

  // Body for transport-level errors (408, 413, malformed HTTP, ...): Anthropic's error shape
  // when `path` is a /v1/messages route, OpenAI's otherwise ("" = the path is unknown).
  // Matches http::ErrorBodyFn.
  static std::pair<std::string, std::string> TransportErrorBody(int status,
                                                                const std::string& message,
                                                                const std::string& path = "");

  // /health answers 503 from now on (set when graceful shutdown begins).
  void SetShuttingDown() { shutting_down_ = true; }

  // Why chat is unavailable ("" when it is available).
  const std::string& chat_unavailable_reason() const { return chat_unavailable_; }

  http::MetricsRegistry& metrics() { return metrics_; }

  struct Impl;  // request handling helpers (server_internal.h)

 private:
  // Decides chat support and builds the handlers (both constructors, once backend_ is set).
  void Init();

  std::unique_ptr<EngineBackend> owned_backend_;  // set by the engine::Engine constructor
  EngineBackend* backend_;
  const Tokenizer* tokenizer_;
  ApiServerOptions options_;
  std::optional<protocol::ModelFamily> family_;
  std::optional<protocol::MarkerIds> markers_;
  std::string chat_unavailable_;
  std::atomic<bool> shutting_down_{false};
  http::MetricsRegistry metrics_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace deepinfer::api

#endif  // DEEPINFER_API_OPENAI_SERVER_H_
