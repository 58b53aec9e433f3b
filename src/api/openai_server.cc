#include "api/openai_server.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <functional>
#include <mutex>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "api/codec_util.h"
#include "api/engine_metrics.h"
#include "api/errors.h"
#include "api/messages_codec.h"
#include "api/openai_codec.h"
#include "api/responses_codec.h"
#include "api/stop_matcher.h"
#include "common/clock.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/strings.h"
#include "model/kv_layout.h"
#include "structured/compiler.h"
#include "structured/tool_call_grammar.h"

namespace deepinfer::api {
namespace {

using OJson = nlohmann::ordered_json;
using engine::StepOutput;

int64_t UnixSeconds() { return static_cast<int64_t>(std::time(nullptr)); }

// "<prefix><24 random alphanumerics>", unique enough to key live engine requests.
std::string RandomId(std::string_view prefix) {
  static constexpr char kAlphabet[] =
      "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
  thread_local std::mt19937_64 rng(std::random_device{}() ^
                                   static_cast<uint64_t>(MonotonicNanos()));
  std::string id(prefix);
  for (int i = 0; i < 24; ++i) id += kAlphabet[rng() % (sizeof(kAlphabet) - 1)];
  return id;
}

void SendJson(http::ResponseWriter& w, int status, const OJson& j) {
  w.Send(status, "application/json", DumpJson(j));
}

// /v1/messages and everything below it speak Anthropic's error shape.
bool IsMessagesRoute(const std::string& path) {
  return path == "/v1/messages" || absl::StartsWith(AbslView(path), "/v1/messages/");
}

// The method a known route accepts (besides OPTIONS, and HEAD for GET), nullptr for an unknown
// path.
const char* RouteMethod(const std::string& p) {
  if (p == "/health" || p == "/metrics" || p == "/v1/models" ||
      absl::StartsWith(AbslView(p), "/v1/models/")) {
    return "GET";
  }
  if (p == "/v1/chat/completions" || p == "/v1/completions" || p == "/tokenize" ||
      p == "/detokenize" || p == "/v1/responses" || p == "/v1/messages" ||
      p == "/v1/messages/count_tokens" || p == "/reset_prefix_cache") {
    return "POST";
  }
  return nullptr;
}

// What an in-flight request gets when the server's drain deadline passes (a server-side
// condition: Unavailable -> 503 / Anthropic 529 overloaded_error).
absl::Status ServerClosingError() {
  return absl::UnavailableError(
      "The server is shutting down; the request was cut off before it finished. Retry later.");
}

void SendError(http::ResponseWriter& w, const absl::Status& status) {
  const int http_status = ErrorInfoFor(status.code()).http_status;
  // Rejected requests get their log line here (generation requests log in Impl::Finish).
  LOG(INFO) << "request rejected: status=" << http_status << " " << status.message();
  w.Send(http_status, "application/json", OpenAiErrorJson(status));
}

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
void EndOpenAiRequestForShutdown(RecordingWriter& w, bool stream_mode) {
  if (!stream_mode) return SendError(w, ServerClosingError());
  w.WriteChunk(SseEvent(OJson::parse(OpenAiErrorJson(ServerClosingError()))));
  w.WriteChunk(kSseDone);
  w.EndStream();
  w.set_status(ErrorInfoFor(ServerClosingError().code()).http_status);
}

protocol::StreamEnd StreamEndFor(engine::FinishReason r) {
  switch (r) {
    case engine::FinishReason::kLength:
      return protocol::StreamEnd::kLength;
    case engine::FinishReason::kAbort:
      return protocol::StreamEnd::kCancelled;
    default:
      return protocol::StreamEnd::kEndOfSequence;
  }
}

// Timing and token counts of one generation request, for the log line and the metrics.
struct RequestRecord {
  std::string id;
  std::string route;
  int64_t prompt_tokens = 0;
  // The request's prefix-cache hit: sample 0's (with n > 1 the other samples fork its prompt).
  int64_t cached_tokens = 0;
  int64_t replayed_tokens = 0;
  int64_t generated_tokens = 0;
  int64_t arrival_ns = 0;
  int64_t first_token_ns = 0;  // 0 = no token
  int64_t last_token_ns = 0;
  void Observe(const StepOutput& o) {
    if (arrival_ns == 0) arrival_ns = o.arrival_ns;
    prompt_tokens = o.prompt_tokens;
    if (o.sample_index == 0) {
      cached_tokens = o.cached_tokens;
      replayed_tokens = o.replayed_tokens;
    }
    generated_tokens += static_cast<int64_t>(o.token_ids.size());
    if (o.first_token_ns > 0 && (first_token_ns == 0 || o.first_token_ns < first_token_ns)) {
      first_token_ns = o.first_token_ns;
    }
    if (!o.token_ids.empty()) last_token_ns = std::max(last_token_ns, o.now_ns);
  }
};

}  // namespace

struct ApiServer::Impl {
  explicit Impl(ApiServer* server) : s(server) {
    http::MetricsRegistry& m = s->metrics_;
    prompt_tokens =
        m.GetCounter("deepinfer_prompt_tokens_total", "Prompt tokens of finished requests.");
    generation_tokens =
        m.GetCounter("deepinfer_generation_tokens_total", "Generated tokens of finished requests.");
    ttft = m.GetHistogram("deepinfer_time_to_first_token_seconds",
                          "Time from arrival to the first generated token.",
                          http::Histogram::LatencyBucketsSeconds());
    tpot = m.GetHistogram("deepinfer_time_per_output_token_seconds",
                          "Mean time between generated tokens of a request (after the first).",
                          http::Histogram::TokenLatencyBucketsSeconds());
    e2e = m.GetHistogram("deepinfer_e2e_request_latency_seconds",
                         "Time from arrival to the end of a generation request.",
                         http::Histogram::LatencyBucketsSeconds());
    engine_metrics = std::make_unique<EngineMetrics>(
        &m, s->options_.served_model_name.empty() ? "deepinfer" : s->options_.served_model_name);
    in_flight = m.GetGauge("deepinfer_http_requests_in_flight", "HTTP requests being handled.");
  }

  // The compiled grammar for a Chat-shaped response_format (json_object / json_schema),
  // compiled off the engine thread by the grammar compiler (created on first use) and cached.
  // Errors: InvalidArgument naming the unsupported schema keyword (-> 400).
  absl::StatusOr<std::shared_ptr<const structured::CompiledGrammar>> GrammarFor(
      const protocol::ResponseFormat& format);
  // The grammar compiler (created on first use).
  structured::GrammarCompiler* Compiler();
  std::mutex grammar_mu;
  std::unique_ptr<structured::GrammarCompiler> grammar_compiler;  // guarded by grammar_mu

  // Structured output of a chat-like request (docs/structured-output.md): response_format, or
  // DSML tool calls for tool_choice required / named.
  struct ConstraintPlan {
    enum class Kind { kNone, kResponseFormat, kToolCalls };
    Kind kind = Kind::kNone;
    protocol::ToolChoice tool_choice;  // kToolCalls: the client's choice
    bool parallel = true;              // kToolCalls with required: more than one call allowed
  };
  // Before encoding: picks the constraint and adapts the encoder input. response_format turns
  // thinking off unless `thinking_requested` is true. tool_choice required / named in thinking
  // mode is encoded as `auto` (the encoder, like DeepSeek's API, only prefills in chat mode) and
  // the grammar then forces the block after `</think>`. Errors: InvalidArgument (400).
  absl::StatusOr<ConstraintPlan> PlanConstraint(protocol::Conversation* conv,
                                                std::optional<bool> thinking_requested,
                                                bool parallel_tool_calls,
                                                protocol::EncodeOptions* options);
  // After encoding: the grammar and its start (`</think>` when the prompt opened reasoning) into
  // `params`. Errors: InvalidArgument naming an unenforceable schema keyword (400), with the
  // parameter set ("response_format" / "tools").
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
  absl::StatusOr<engine::SamplingParams> BuildParams(const SamplingFields& f, int64_t prompt_len,
                                                     const char* prompt_param,
                                                     int64_t default_max_tokens) const;
  absl::StatusOr<std::shared_ptr<engine::RequestStream>> Submit(engine::GenerateRequest request);

  enum class PumpEnd { kDone, kClientGone };
  // Feeds every StepOutput to `on_output` until `done()` or the stream ends. Aborts the engine
  // request when the client disconnects (on_output returns false or ClientClosed()) or when
  // done() turns true before the engine finished (stop strings).
  PumpEnd Pump(engine::RequestStream& stream, http::ResponseWriter& w,
               const std::function<bool(StepOutput&)>& on_output,
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
  http::Gauge* in_flight;
};

ApiServer::ApiServer(engine::Engine* engine, const Tokenizer* tokenizer, ApiServerOptions options)
    : engine_(engine), tokenizer_(tokenizer), options_(std::move(options)) {
  const model::ModelInfo& info = engine_->model_info();
  absl::StatusOr<protocol::ModelFamily> family =
      protocol::ModelFamilyFromModelType(info.model_type);
  if (!family.ok()) {
    chat_unavailable_ = absl::StrCat("This model (model_type '", info.model_type,
                                     "') has no chat template; chat completions are not "
                                     "available. Use /v1/completions instead.");
  } else {
    absl::StatusOr<protocol::MarkerIds> markers = protocol::MarkerIds::FromTokenizer(*tokenizer_);
    if (!markers.ok()) {
      chat_unavailable_ = absl::StrCat(
          "This model has no usable chat template: its tokenizer lacks a control token (",
          markers.status().message(), "). Use /v1/completions instead.");
    } else {
      family_ = *family;
      markers_ = *markers;
    }
  }
  impl_ = std::make_unique<Impl>(this);
}

ApiServer::~ApiServer() = default;

std::pair<std::string, std::string> ApiServer::TransportErrorBody(int status,
                                                                  const std::string& message,
                                                                  const std::string& path) {
  if (IsMessagesRoute(path)) {
    // Anthropic's error types (docs.anthropic.com "Errors").
    const char* type = status == 413   ? "request_too_large"
                       : status == 503 ? "overloaded_error"
                       : status >= 500 ? "api_error"
                                       : "invalid_request_error";
    return {"application/json", AnthropicErrorJson(type, message)};
  }
  std::string code = status == 413 ? "request_too_large" : status == 408 ? "request_timeout" : "";
  return {"application/json", OpenAiErrorJson(status, message, code)};
}

void ApiServer::Handle(const http::HttpRequest& request, http::ResponseWriter& writer) {
  RecordingWriter w(writer);
  impl_->in_flight->Add(1);
  impl_->Route(request, w);
  impl_->in_flight->Add(-1);
  std::string route = request.path;
  // Bound the label set: unknown paths share one label value.
  static const char* kKnown[] = {
      "/v1/chat/completions",      "/v1/completions", "/v1/responses", "/v1/messages",
      "/v1/messages/count_tokens", "/v1/models",      "/tokenize",     "/detokenize",
      "/reset_prefix_cache",       "/health",         "/metrics"};
  if (std::find(std::begin(kKnown), std::end(kKnown), route) == std::end(kKnown)) {
    route = absl::StartsWith(AbslView(route), "/v1/models/") ? "/v1/models" : "other";
  }
  metrics_
      .GetCounter("deepinfer_http_requests_total", "HTTP requests by route and status.",
                  {{"route", route}, {"status", std::to_string(w.status())}})
      ->Inc();
}

void ApiServer::Impl::Route(const http::HttpRequest& req, RecordingWriter& w) {
  const std::string& p = req.path;
  const bool anthropic = IsMessagesRoute(p);
  auto reject = [&](int http_status, const absl::Status& st,
                    const std::map<std::string, std::string>& headers) {
    LOG(INFO) << "request rejected: status=" << http_status << " " << st.message();
    w.Send(http_status, "application/json",
           anthropic ? AnthropicErrorJson(st) : OpenAiErrorJson(st), headers);
  };
  const char* method = RouteMethod(p);
  if (method == nullptr) {
    const absl::Status st =
        absl::NotFoundError(absl::StrCat("Invalid URL (", req.method, " ", p, ")"));
    reject(404, st, {});
    return;
  }
  // RFC 9110 §9.3.7 / §15.5.6: OPTIONS and 405 name the allowed methods.
  const bool get_route = std::string_view(method) == "GET";
  const std::map<std::string, std::string> allow = {
      {"Allow", get_route ? "GET, HEAD, OPTIONS" : "POST, OPTIONS"}};
  if (req.method == "OPTIONS") {
    w.Send(204, "", "", allow);
    return;
  }
  if (req.method != method && !(get_route && req.method == "HEAD")) {
    reject(405,
           WithErrorCode(absl::InvalidArgumentError(
                             absl::StrCat("Method ", req.method, " is not allowed for ", p,
                                          " (allowed: ", allow.begin()->second, ")")),
                         "method_not_allowed"),
           allow);
    return;
  }
  if (p == "/health") {
    if (s->shutting_down_) {
      SendError(w, absl::UnavailableError("the server is shutting down"));
    } else {
      SendJson(w, 200, {{"status", "ok"}});
    }
    return;
  }
  if (p == "/metrics") {
    HandleMetrics(w);
    return;
  }
  if (absl::Status auth = CheckAuth(req, anthropic); !auth.ok()) {
    reject(anthropic ? AnthropicErrorInfoFor(auth.code()).http_status
                     : ErrorInfoFor(auth.code()).http_status,
           auth, {});
    return;
  }
  if (p == "/v1/chat/completions") {
    HandleChat(req, w);
  } else if (p == "/v1/responses") {
    HandleCodec(req, w, CodecApi::kResponses);
  } else if (p == "/v1/messages") {
    HandleCodec(req, w, CodecApi::kMessages);
  } else if (p == "/v1/messages/count_tokens") {
    HandleCodec(req, w, CodecApi::kCountTokens);
  } else if (p == "/v1/completions") {
    HandleCompletion(req, w);
  } else if (p == "/tokenize") {
    HandleTokenize(req, w);
  } else if (p == "/detokenize") {
    HandleDetokenize(req, w);
  } else if (p == "/reset_prefix_cache") {
    HandleResetPrefixCache(w);
  } else {
    HandleModels(req, w);
  }
}

absl::Status ApiServer::Impl::CheckAuth(const http::HttpRequest& req, bool anthropic) const {
  const std::string& key = s->options_.api_key;
  if (key.empty()) return absl::OkStatus();
  std::string given;
  const std::string auth = req.Header("authorization");
  if (!auth.empty()) {
    // RFC 9110 §11.1: the auth scheme is case-insensitive; one or more spaces follow it.
    const size_t space = auth.find(' ');
    if (space != std::string::npos &&
        absl::EqualsIgnoreCase(absl::string_view(auth.data(), space), "bearer")) {
      const size_t start = auth.find_first_not_of(' ', space);
      if (start != std::string::npos) given = auth.substr(start);
    }
  } else {
    // Anthropic clients send the key as `x-api-key`.
    given = req.Header("x-api-key");
    if (given.empty()) {
      return WithErrorCode(
          absl::UnauthenticatedError(
              anthropic ? "You didn't provide an API key. Send it in the x-api-key header "
                          "(x-api-key: YOUR_KEY) or as Authorization: Bearer YOUR_KEY."
                        : "You didn't provide an API key. You need to provide your API key in an "
                          "Authorization header using Bearer auth (i.e. Authorization: Bearer "
                          "YOUR_KEY)."),
          "invalid_api_key");
    }
  }
  // Compare every byte so the time does not depend on where the first difference is.
  bool equal = given.size() == key.size();
  unsigned char diff = 0;
  for (size_t i = 0; i < given.size(); ++i) diff |= given[i] ^ key[i % key.size()];
  if (!equal || diff != 0) {
    return WithErrorCode(absl::UnauthenticatedError("Incorrect API key provided."),
                         "invalid_api_key");
  }
  return absl::OkStatus();
}

absl::Status ApiServer::Impl::CheckModel(const std::string& model) const {
  const std::string& served = s->options_.served_model_name;
  if (model.empty() || served.empty() || model == served) return absl::OkStatus();
  return WithParam(WithErrorCode(absl::NotFoundError(absl::StrCat(
                                     "The model `", model, "` does not exist. This server serves `",
                                     served, "`.")),
                                 "model_not_found"),
                   "model");
}

absl::StatusOr<std::shared_ptr<const structured::CompiledGrammar>> ApiServer::Impl::GrammarFor(
    const protocol::ResponseFormat& format) {
  nlohmann::json f = nlohmann::json::parse(format.format.Dump(), nullptr, false);
  if (f.is_discarded() || !f.is_object()) {
    return absl::InvalidArgumentError("response_format must be an object");
  }
  structured::ConstraintSpec spec;
  const std::string type = f.value("type", "");
  if (type == "json_schema") {
    const nlohmann::json& js = f["json_schema"];
    if (js.is_object() && js.contains("schema")) {
      spec.kind = structured::ConstraintSpec::Kind::kJsonSchema;
      spec.text = js["schema"].dump();
    } else {
      spec.kind = structured::ConstraintSpec::Kind::kJsonObject;
    }
  } else {
    spec.kind = structured::ConstraintSpec::Kind::kJsonObject;
  }
  return Compiler()->Get(spec);
}

structured::GrammarCompiler* ApiServer::Impl::Compiler() {
  std::lock_guard<std::mutex> lock(grammar_mu);
  if (!grammar_compiler) {
    std::vector<int32_t> eos = s->engine_->model_info().eos_token_ids;
    if (s->tokenizer_->eos_id() >= 0) eos.push_back(s->tokenizer_->eos_id());
    auto vocab = std::make_shared<structured::VocabularyIndex>(structured::VocabularyFromTokenizer(
        *s->tokenizer_, s->engine_->model_info().vocab_size, eos));
    grammar_compiler = std::make_unique<structured::GrammarCompiler>(
        std::move(vocab), structured::GrammarCompiler::Options{});
  }
  return grammar_compiler.get();
}

absl::StatusOr<ApiServer::Impl::ConstraintPlan> ApiServer::Impl::PlanConstraint(
    protocol::Conversation* conv, std::optional<bool> thinking_requested, bool parallel_tool_calls,
    protocol::EncodeOptions* options) {
  ConstraintPlan plan;
  const protocol::ToolChoice::Mode mode = conv->tool_choice.mode;
  const bool forced_tools =
      !conv->tools.empty() &&
      (mode == protocol::ToolChoice::Mode::kRequired || mode == protocol::ToolChoice::Mode::kNamed);
  if (conv->response_format) {
    if (forced_tools) {
      return WithParam(absl::InvalidArgumentError(
                           "response_format cannot be combined with tool_choice 'required' or a "
                           "named tool: the output must be a tool call"),
                       "response_format");
    }
    // Constrained answers skip reasoning unless the client asked for it; with reasoning the
    // grammar starts after `</think>` (ApplyConstraint).
    if (!thinking_requested.value_or(false)) options->thinking = false;
    plan.kind = ConstraintPlan::Kind::kResponseFormat;
    return plan;
  }
  if (!forced_tools) return plan;
  plan.kind = ConstraintPlan::Kind::kToolCalls;
  plan.tool_choice = conv->tool_choice;
  plan.parallel = parallel_tool_calls;
  // Thinking mode with a forced tool_choice is the official API's 400 (shared/spec/protocol.md
  // §20(b)); the prompt encoder reports it.
  return plan;
}

absl::Status ApiServer::Impl::ApplyConstraint(const ConstraintPlan& plan,
                                              const protocol::Conversation& conv,
                                              const protocol::EncodedPrompt& encoded,
                                              engine::SamplingParams* params) {
  if (plan.kind == ConstraintPlan::Kind::kNone) return absl::OkStatus();
  bool after_reasoning = encoded.start == protocol::ParserStart::kReasoning;
  if (plan.kind == ConstraintPlan::Kind::kResponseFormat) {
    absl::StatusOr<std::shared_ptr<const structured::CompiledGrammar>> g =
        GrammarFor(*conv.response_format);
    if (!g.ok()) return WithParam(g.status(), "response_format");
    params->grammar = *g;
  } else {
    structured::ToolCallGrammarOptions o;
    for (const protocol::ToolDefinition& t : conv.tools) {
      o.tools.push_back({t.name, t.parameters.Dump()});
    }
    if (plan.tool_choice.mode == protocol::ToolChoice::Mode::kNamed) {
      o.forced_tool = plan.tool_choice.name;
    }
    o.parallel = plan.parallel;
    o.syntax = *s->family_ == protocol::ModelFamily::kDeepSeekV41 ? structured::DsmlSyntax::V41()
                                                                  : structured::DsmlSyntax::V4();
    switch (encoded.start) {
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
    structured::ConstraintSpec spec;
    spec.kind = structured::ConstraintSpec::Kind::kToolCalls;
    spec.text = structured::ToolCallGrammarOptionsToJson(o);
    absl::StatusOr<std::shared_ptr<const structured::CompiledGrammar>> g = Compiler()->Get(spec);
    if (!g.ok()) return WithParam(g.status(), "tools");
    params->grammar = *g;
  }
  if (after_reasoning) {
    // vLLM-style reasoning integration: free reasoning, then the grammar after `</think>`.
    // EOS and the DSML tag would leave the reasoning another way: masked until then.
    params->grammar_after_token_ids = {s->markers_->think_end};
    params->grammar_blocked_before = s->engine_->model_info().eos_token_ids;
    params->grammar_blocked_before.push_back(s->markers_->eos);
    if (s->tokenizer_->eos_id() >= 0)
      params->grammar_blocked_before.push_back(s->tokenizer_->eos_id());
    params->grammar_blocked_before.push_back(s->markers_->dsml);
  }
  return absl::OkStatus();
}

absl::StatusOr<engine::SamplingParams> ApiServer::Impl::BuildParams(
    const SamplingFields& f, int64_t prompt_len, const char* prompt_param,
    int64_t default_max_tokens) const {
  const int64_t max_ctx = s->engine_->model_info().max_context;
  const engine::EngineStats stats = s->engine_->Stats();
  const int64_t kv_tokens = stats.kv_blocks_total * model::kBlockTokens;
  if (prompt_len >= max_ctx) {
    return WithParam(
        WithErrorCode(absl::InvalidArgumentError(absl::StrCat(
                          "This model's maximum context length is ", max_ctx,
                          " tokens. However, your ", prompt_param, " resulted in ", prompt_len,
                          " tokens. Please reduce the length of the ", prompt_param, ".")),
                      "context_length_exceeded"),
        prompt_param);
  }
  if (kv_tokens > 0 && prompt_len >= kv_tokens) {
    return WithParam(WithErrorCode(absl::InvalidArgumentError(absl::StrCat(
                                       "Your ", prompt_param, " resulted in ", prompt_len,
                                       " tokens, more than the KV cache of this server holds (",
                                       kv_tokens, " tokens).")),
                                   "context_length_exceeded"),
                     prompt_param);
  }
  int64_t limit = max_ctx;
  if (kv_tokens > 0) limit = std::min(limit, kv_tokens);
  int64_t max_tokens = 0;
  if (f.max_tokens) {
    if (prompt_len + *f.max_tokens > max_ctx) {
      return WithParam(
          WithErrorCode(absl::InvalidArgumentError(absl::StrCat(
                            "This model's maximum context length is ", max_ctx,
                            " tokens. However, you requested ", prompt_len + *f.max_tokens,
                            " tokens (", prompt_len, " in the ", prompt_param, ", ", *f.max_tokens,
                            " in the completion). Please reduce the length of the ", prompt_param,
                            " or completion.")),
                        "context_length_exceeded"),
          f.max_tokens_param);
    }
    if (prompt_len + *f.max_tokens > limit) {
      return WithParam(
          WithErrorCode(absl::InvalidArgumentError(absl::StrCat(
                            "You requested ", prompt_len + *f.max_tokens, " tokens (", prompt_len,
                            " in the ", prompt_param, ", ", *f.max_tokens,
                            " in the completion), more than the KV cache of this server holds (",
                            kv_tokens, " tokens).")),
                        "context_length_exceeded"),
          f.max_tokens_param);
    }
    max_tokens = *f.max_tokens;
  } else {
    max_tokens = limit - prompt_len;
    if (default_max_tokens > 0) max_tokens = std::min(max_tokens, default_max_tokens);
  }
  engine::SamplingParams p;
  p.temperature = static_cast<float>(f.temperature.value_or(1.0));
  p.top_p = static_cast<float>(f.top_p.value_or(1.0));
  if (f.top_k) p.top_k = *f.top_k;
  if (f.min_p) p.min_p = static_cast<float>(*f.min_p);
  p.presence_penalty = static_cast<float>(f.presence_penalty);
  p.frequency_penalty = static_cast<float>(f.frequency_penalty);
  if (f.repetition_penalty) p.repetition_penalty = static_cast<float>(*f.repetition_penalty);
  // The engine checks this too; here the 400 can name the parameter.
  const int64_t vocab = s->engine_->model_info().vocab_size;
  for (const auto& [id, bias] : f.logit_bias) {
    if (id >= vocab) {
      return WithParam(
          absl::InvalidArgumentError(absl::StrCat("logit_bias token id ", id,
                                                  " is outside the vocabulary [0, ", vocab, ").")),
          "logit_bias");
    }
  }
  p.logit_bias = f.logit_bias;
  p.n = f.n;
  p.seed = f.seed;
  p.max_tokens = static_cast<int>(std::min<int64_t>(max_tokens, INT32_MAX));
  if (f.min_tokens) p.min_tokens = static_cast<int>(std::min<int64_t>(*f.min_tokens, p.max_tokens));
  p.ignore_eos = f.ignore_eos;
  return p;
}

absl::StatusOr<std::shared_ptr<engine::RequestStream>> ApiServer::Impl::Submit(
    engine::GenerateRequest request) {
  absl::StatusOr<std::shared_ptr<engine::RequestStream>> stream =
      s->engine_->Submit(std::move(request));
  if (stream.ok()) return stream;
  const absl::Status& st = stream.status();
  if (st.code() == absl::StatusCode::kFailedPrecondition) {
    return absl::UnavailableError(
        absl::StrCat("the engine is not accepting requests: ", st.message()));
  }
  if (st.code() == absl::StatusCode::kResourceExhausted) {
    return WithErrorCode(absl::ResourceExhaustedError(absl::StrCat(
                             "The server is overloaded: ", st.message(), ". Retry later.")),
                         "overloaded");
  }
  return st;
}

ApiServer::Impl::PumpEnd ApiServer::Impl::Pump(engine::RequestStream& stream,
                                               http::ResponseWriter& w,
                                               const std::function<bool(StepOutput&)>& on_output,
                                               const std::function<bool()>& done) {
  const int poll_ms = std::max(1, s->options_.poll_interval_ms);
  int64_t last_check = MonotonicNanos();
  for (;;) {
    if (done()) {
      if (!stream.finished()) s->engine_->Abort(stream.request_id());
      return PumpEnd::kDone;
    }
    std::optional<StepOutput> out = stream.Next(std::chrono::milliseconds(poll_ms));
    if (out) {
      if (!on_output(*out)) {
        s->engine_->Abort(stream.request_id());
        return PumpEnd::kClientGone;
      }
    } else if (stream.finished()) {
      return PumpEnd::kDone;
    }
    int64_t now = MonotonicNanos();
    if (!out || now - last_check > int64_t{poll_ms} * 1000000) {
      last_check = now;
      if (w.ClientClosed()) {
        s->engine_->Abort(stream.request_id());
        return PumpEnd::kClientGone;
      }
    }
  }
}

void ApiServer::Impl::Finish(const RequestRecord& r, int status) {
  const int64_t now = MonotonicNanos();
  const double total_s = r.arrival_ns > 0 ? (now - r.arrival_ns) * 1e-9 : 0.0;
  const double ttft_s = r.first_token_ns > 0 ? (r.first_token_ns - r.arrival_ns) * 1e-9 : -1;
  const double tpot_s = r.generated_tokens > 1 && r.last_token_ns > r.first_token_ns
                            ? (r.last_token_ns - r.first_token_ns) * 1e-9 /
                                  static_cast<double>(r.generated_tokens - 1)
                            : -1;
  prompt_tokens->Inc(static_cast<double>(r.prompt_tokens));
  generation_tokens->Inc(static_cast<double>(r.generated_tokens));
  if (ttft_s >= 0) ttft->Observe(ttft_s);
  if (tpot_s >= 0) tpot->Observe(tpot_s);
  e2e->Observe(total_s);
  LOG(INFO) << "request " << r.id << " " << r.route << " status=" << status
            << " prompt_tokens=" << r.prompt_tokens << " cached_tokens=" << r.cached_tokens
            << " replayed_tokens=" << r.replayed_tokens
            << " generated_tokens=" << r.generated_tokens
            << " ttft_ms=" << (ttft_s >= 0 ? ttft_s * 1e3 : 0.0)
            << " tpot_ms=" << (tpot_s >= 0 ? tpot_s * 1e3 : 0.0) << " total_ms=" << total_s * 1e3;
}

// --- /v1/chat/completions ---------------------------------------------------------------------

void ApiServer::Impl::HandleChat(const http::HttpRequest& hreq, RecordingWriter& w) {
  absl::StatusOr<ChatCompletionRequest> parsed = ParseChatCompletionRequest(hreq.body);
  if (!parsed.ok()) return SendError(w, parsed.status());
  ChatCompletionRequest& req = *parsed;
  if (absl::Status st = CheckModel(req.model); !st.ok()) return SendError(w, st);
  if (!s->family_) {
    return SendError(w, WithErrorCode(absl::FailedPreconditionError(s->chat_unavailable_),
                                      "chat_template_unavailable"));
  }
  protocol::EncodeOptions options;
  options.family = *s->family_;
  options.thinking = req.thinking.value_or(true);
  if (req.reasoning_effort == "none") options.thinking = false;
  std::optional<bool> thinking_requested = req.thinking;
  if (!req.reasoning_effort.empty()) thinking_requested = req.reasoning_effort != "none";
  absl::StatusOr<ConstraintPlan> plan =
      PlanConstraint(&req.conversation, thinking_requested, req.parallel_tool_calls, &options);
  if (!plan.ok()) return SendError(w, plan.status());
  if (req.reasoning_effort == "none") {
    options.thinking = false;
  } else if (!req.reasoning_effort.empty()) {
    absl::StatusOr<protocol::ReasoningEffort> effort =
        protocol::ReasoningEffort::Parse(req.reasoning_effort);
    if (!effort.ok()) return SendError(w, WithParam(effort.status(), "reasoning_effort"));
    options.effort = *effort;
  }
  absl::StatusOr<protocol::EncodedPrompt> encoded =
      protocol::EncodePrompt(req.conversation, options);
  if (!encoded.ok()) return SendError(w, encoded.status());
  absl::StatusOr<std::vector<int32_t>> ids = protocol::PromptToIds(*encoded, *s->tokenizer_);
  if (!ids.ok()) {
    return SendError(w, absl::InternalError(absl::StrCat("cannot tokenize the chat template: ",
                                                         ids.status().message())));
  }
  absl::StatusOr<engine::SamplingParams> params =
      BuildParams(req.sampling, static_cast<int64_t>(ids->size()), "messages", 0);
  if (!params.ok()) return SendError(w, params.status());
  if (req.logprobs) params->logprobs = req.top_logprobs;
  if (absl::Status st = ApplyConstraint(*plan, req.conversation, *encoded, &*params); !st.ok()) {
    return SendError(w, st);
  }
  if (absl::Status st = params->Validate(); !st.ok()) return SendError(w, st);

  const std::string id = RandomId("chatcmpl-");
  const int64_t created = UnixSeconds();
  const std::string model = ModelName(req.model);
  const int n = params->n;
  const bool stream_mode = req.sampling.stream;
  const bool include_usage = stream_mode && req.sampling.include_usage;
  const bool thinking = options.thinking;
  const size_t prompt_len = ids->size();
  const bool return_ids = req.return_token_ids;
  std::optional<std::vector<int32_t>> prompt_ids_out;
  if (return_ids) prompt_ids_out = *ids;

  absl::StatusOr<std::shared_ptr<engine::RequestStream>> stream =
      Submit({id, *std::move(ids), *params, req.cache_salt});
  if (!stream.ok()) return SendError(w, stream.status());

  protocol::OutputParserOptions parser_options;
  parser_options.start = encoded->start;
  parser_options.forced_tool_name = encoded->forced_tool_name;
  parser_options.stop = req.sampling.stop;
  std::vector<std::string> declared;
  for (const protocol::ToolDefinition& t : req.conversation.tools) declared.push_back(t.name);
  parser_options.declared_tools = declared;

  struct Sample {
    std::unique_ptr<protocol::OutputParser> parser;
    bool done = false;
    bool in_reasoning = false;
    int64_t reasoning_tokens = 0;
    std::vector<protocol::OutputEvent> events;  // non-stream: everything
    OJson logprobs = OJson::array();            // non-stream: every entry; stream: pending
    std::string finish_reason;
    std::vector<int32_t> token_ids;    // return_token_ids, non-stream: every generated id
    std::vector<int32_t> pending_ids;  // return_token_ids, stream: ids not yet in a chunk
    bool sent_prompt_ids = false;      // return_token_ids, stream: prompt_token_ids sent
  };
  std::vector<Sample> samples(n);
  for (Sample& smp : samples) {
    smp.parser =
        std::make_unique<protocol::OutputParser>(s->tokenizer_, *s->markers_, parser_options);
    smp.in_reasoning = encoded->start == protocol::ParserStart::kReasoning;
  }

  RequestRecord record;
  record.id = id;
  record.route = "chat";
  absl::Status engine_error;

  auto write = [&](const OJson& j) { return w.WriteChunk(SseEvent(j)); };
  auto emit = [&](int index, OJson delta, const std::string& finish) {
    Sample& smp = samples[index];
    std::optional<OJson> lp;
    if (req.logprobs && !smp.logprobs.empty()) {
      lp = OJson{{"content", std::move(smp.logprobs)}};
      smp.logprobs = OJson::array();
    }
    OJson chunk =
        ChatChunkJson(id, created, model, index, std::move(delta), finish, lp, include_usage);
    if (return_ids) {
      // vLLM's shape: the ids new in this chunk on the choice, the prompt's on the first chunk.
      chunk["choices"][0]["token_ids"] = std::move(smp.pending_ids);
      smp.pending_ids.clear();
      if (!smp.sent_prompt_ids) {
        smp.sent_prompt_ids = true;
        chunk["prompt_token_ids"] = *prompt_ids_out;
      }
    }
    return write(chunk);
  };

  if (stream_mode) {
    if (!w.BeginStream(200, "text/event-stream")) {
      s->engine_->Abort(id);
      return;
    }
    for (int i = 0; i < n; ++i) {
      if (!emit(i, {{"role", "assistant"}, {"content", ""}}, "")) {
        s->engine_->Abort(id);
        w.set_status(499);
        return Finish(record, 499);
      }
    }
  }

  auto on_output = [&](StepOutput& o) -> bool {
    record.Observe(o);
    if (o.sample_index < 0 || o.sample_index >= n) return true;
    Sample& smp = samples[o.sample_index];
    if (smp.done) return true;
    if (return_ids) {
      smp.token_ids.insert(smp.token_ids.end(), o.token_ids.begin(), o.token_ids.end());
      smp.pending_ids.insert(smp.pending_ids.end(), o.token_ids.begin(), o.token_ids.end());
    }
    if (req.logprobs) {
      for (size_t i = 0; i < o.logprobs.size(); ++i) {
        const engine::TokenLogprob& t = o.logprobs[i];
        smp.logprobs.push_back(ChatLogprobEntry({TokenText(t.token_id), t.logprob, TopText(t.top)},
                                                req.top_logprobs > 0));
      }
    }
    std::vector<protocol::OutputEvent> events = smp.parser->Feed(o.token_ids);
    if (smp.in_reasoning) {
      smp.reasoning_tokens += static_cast<int64_t>(o.token_ids.size());
      for (const auto& e : events) {
        if (e.type != protocol::OutputEvent::Type::kReasoningDelta) smp.in_reasoning = false;
      }
    }
    if (o.finish) {
      if (*o.finish == engine::FinishReason::kError) {
        engine_error = o.error.ok() ? absl::InternalError("generation failed") : o.error;
      } else if (!smp.parser->finished()) {
        std::vector<protocol::OutputEvent> tail = smp.parser->Finish(StreamEndFor(*o.finish));
        events.insert(events.end(), tail.begin(), tail.end());
      }
      smp.done = true;
    }
    if (smp.parser->finished()) smp.done = true;
    for (protocol::OutputEvent& e : protocol::CoalesceEvents(events)) {
      if (e.type == protocol::OutputEvent::Type::kFinish) {
        smp.finish_reason = ChatFinishReason(e.finish_reason);
        if (e.finish_reason == protocol::FinishReason::kToolCallError) {
          LOG(WARNING) << "request " << id << ": malformed tool call dropped: " << e.error;
        }
      }
      if (!stream_mode) {
        smp.events.push_back(std::move(e));
        continue;
      }
      std::optional<OJson> delta = ChatDeltaForEvent(e);
      if (!delta) continue;
      const std::string finish =
          e.type == protocol::OutputEvent::Type::kFinish ? smp.finish_reason : std::string();
      if (!emit(o.sample_index, *std::move(delta), finish)) return false;
    }
    if (!engine_error.ok()) {
      for (Sample& other : samples) other.done = true;
    }
    return true;
  };
  auto all_done = [&] {
    return std::all_of(samples.begin(), samples.end(), [](const Sample& x) { return x.done; });
  };
  PumpEnd end = Pump(**stream, w, on_output, all_done);
  record.prompt_tokens = static_cast<int64_t>(prompt_len);

  if (end == PumpEnd::kClientGone && w.ServerClosing()) {
    EndOpenAiRequestForShutdown(w, stream_mode);
    return Finish(record, w.status());
  }
  if (end == PumpEnd::kClientGone) {
    w.set_status(499);
    return Finish(record, 499);
  }
  Usage usage;
  usage.prompt_tokens = record.prompt_tokens;
  usage.cached_tokens = record.cached_tokens;
  usage.completion_tokens = record.generated_tokens;
  for (const Sample& smp : samples) usage.reasoning_tokens += smp.reasoning_tokens;

  if (stream_mode) {
    if (!engine_error.ok()) {
      write(OJson::parse(OpenAiErrorJson(engine_error)));
    } else if (include_usage) {
      write(ChatUsageChunkJson(id, created, model, usage));
    }
    w.WriteChunk(kSseDone);
    w.EndStream();
    if (!engine_error.ok()) w.set_status(ErrorInfoFor(engine_error.code()).http_status);
    return Finish(record, w.status());
  }
  if (!engine_error.ok()) {
    SendError(w, engine_error);
    return Finish(record, w.status());
  }
  std::vector<ChatChoiceOut> choices;
  for (int i = 0; i < n; ++i) {
    Sample& smp = samples[i];
    // The same events the stream turns into deltas (ChatDeltaForEvent), so both modes agree.
    ChatChoiceOut c = ChatChoiceFromEvents(smp.events, thinking);
    c.index = i;
    if (!smp.finish_reason.empty()) c.finish_reason = smp.finish_reason;
    if (req.logprobs) c.logprobs = OJson{{"content", smp.logprobs}};
    if (return_ids) c.token_ids = smp.token_ids;
    choices.push_back(std::move(c));
  }
  SendJson(w, 200, ChatCompletionJson(id, created, model, choices, usage, prompt_ids_out));
  Finish(record, 200);
}

// --- /v1/completions --------------------------------------------------------------------------

void ApiServer::Impl::HandleCompletion(const http::HttpRequest& hreq, RecordingWriter& w) {
  absl::StatusOr<CompletionRequest> parsed = ParseCompletionRequest(hreq.body);
  if (!parsed.ok()) return SendError(w, parsed.status());
  CompletionRequest& req = *parsed;
  if (absl::Status st = CheckModel(req.model); !st.ok()) return SendError(w, st);
  const Tokenizer& tok = *s->tokenizer_;
  std::vector<int32_t> prompt;
  std::string prompt_text;
  if (req.prompt_is_ids) {
    prompt = req.prompt_ids;
    const int64_t vocab = s->engine_->model_info().vocab_size;
    for (int32_t t : prompt) {
      if (t >= vocab) {
        return SendError(
            w, WithParam(absl::InvalidArgumentError(absl::StrCat("token id ", t,
                                                                 " in 'prompt' is outside the "
                                                                 "vocabulary (size ",
                                                                 vocab, ")")),
                         "prompt"));
      }
    }
    prompt_text = tok.Decode(prompt);
  } else {
    prompt_text = req.prompt_text;
    if (tok.add_bos() && tok.bos_id() >= 0) prompt.push_back(tok.bos_id());
    std::vector<int32_t> text_ids = tok.EncodeText(req.prompt_text);
    prompt.insert(prompt.end(), text_ids.begin(), text_ids.end());
  }
  absl::StatusOr<engine::SamplingParams> params =
      BuildParams(req.sampling, static_cast<int64_t>(prompt.size()), "prompt", 16);
  if (!params.ok()) return SendError(w, params.status());
  if (req.logprobs) {
    params->logprobs = *req.logprobs;
    if (req.echo) params->prompt_logprobs = *req.logprobs;
  }
  if (req.prompt_logprobs) {
    params->prompt_logprobs = std::max(params->prompt_logprobs, *req.prompt_logprobs);
  }
  // vLLM-style prompt_logprobs of the prompt tokens, filled from the first engine message.
  std::optional<OJson> prompt_lp_json;
  auto build_prompt_lp = [&](const std::vector<engine::TokenLogprob>& pl,
                             const std::vector<int32_t>& ids) {
    OJson arr = OJson::array();
    arr.push_back(nullptr);
    for (size_t i = 1; i < ids.size(); ++i) {
      OJson entry = OJson::object();
      if (i - 1 < pl.size()) {
        const engine::TokenLogprob& t = pl[i - 1];
        auto piece = [&](int32_t tid) {
          return s->tokenizer_->Decode(std::span<const int32_t>(&tid, 1));
        };
        entry[std::to_string(t.token_id)] = {
            {"logprob", t.logprob}, {"rank", t.rank}, {"decoded_token", piece(t.token_id)}};
        int rank = 1;
        for (const auto& [tid, lp] : t.top) {
          if (rank > *req.prompt_logprobs) break;
          if (!entry.contains(std::to_string(tid))) {
            entry[std::to_string(tid)] = {
                {"logprob", lp}, {"rank", rank}, {"decoded_token", piece(tid)}};
          }
          ++rank;
        }
      }
      arr.push_back(std::move(entry));
    }
    return arr;
  };
  if (absl::Status st = params->Validate(); !st.ok()) return SendError(w, st);

  const std::string id = RandomId("cmpl-");
  const int64_t created = UnixSeconds();
  const std::string model = ModelName(req.model);
  const int n = params->n;
  const bool stream_mode = req.sampling.stream;
  const bool include_usage = stream_mode && req.sampling.include_usage;
  const std::vector<int32_t> prompt_ids = prompt;

  absl::StatusOr<std::shared_ptr<engine::RequestStream>> stream =
      Submit({id, std::move(prompt), *params, req.cache_salt});
  if (!stream.ok()) return SendError(w, stream.status());

  struct Sample {
    std::unique_ptr<StreamingDetokenizer> detok;
    std::unique_ptr<StopMatcher> stop;
    bool done = false;
    bool echoed = false;
    std::string text;             // non-stream: the whole text (with echo)
    int64_t offset = 0;           // text_offset of the next token
    CompletionLogprobs logprobs;  // non-stream: everything; stream: pending
    std::string finish_reason;
    std::vector<int32_t> token_ids;    // return_token_ids, non-stream: every generated id
    std::vector<int32_t> pending_ids;  // return_token_ids, stream: ids not yet in a chunk
    bool sent_prompt_ids = false;      // return_token_ids, stream: prompt_token_ids sent
  };
  std::vector<Sample> samples(n);
  for (Sample& smp : samples) {
    smp.detok = std::make_unique<StreamingDetokenizer>(&tok, /*skip_special=*/true);
    // Prime with the prompt so sequence-start decoder rules (SentencePiece's leading-space
    // strip) apply to the prompt, not to the completion.
    for (int32_t t : prompt_ids) smp.detok->Push(t);
    smp.stop = std::make_unique<StopMatcher>(req.sampling.stop);
  }

  RequestRecord record;
  record.id = id;
  record.route = "completions";
  absl::Status engine_error;

  auto add_logprob = [&](Sample& smp, int32_t token, std::optional<double> lp,
                         std::optional<std::vector<std::pair<std::string, double>>> top) {
    std::string text = TokenText(token);
    smp.logprobs.tokens.push_back(text);
    smp.logprobs.token_logprobs.push_back(lp);
    smp.logprobs.top_logprobs.push_back(std::move(top));
    smp.logprobs.text_offset.push_back(smp.offset);
    smp.offset += static_cast<int64_t>(text.size());
  };
  auto emit = [&](int index, const std::string& text, const std::string& finish) {
    Sample& smp = samples[index];
    CompletionChoiceOut c;
    c.index = index;
    c.text = text;
    c.finish_reason = finish;
    if (req.logprobs) {
      c.logprobs = CompletionLogprobsJson(smp.logprobs);
      smp.logprobs = CompletionLogprobs();
    }
    if (req.return_token_ids) {
      c.token_ids = std::move(smp.pending_ids);
      smp.pending_ids.clear();
      if (!smp.sent_prompt_ids) {
        smp.sent_prompt_ids = true;
        c.prompt_token_ids = prompt_ids;
      }
    }
    OJson chunk = CompletionJson(id, created, model, {c}, std::nullopt);
    if (include_usage) chunk["usage"] = nullptr;
    return w.WriteChunk(SseEvent(chunk));
  };

  if (stream_mode && !w.BeginStream(200, "text/event-stream")) {
    s->engine_->Abort(id);
    return;
  }

  auto on_output = [&](StepOutput& o) -> bool {
    record.Observe(o);
    if (o.sample_index < 0 || o.sample_index >= n) return true;
    Sample& smp = samples[o.sample_index];
    if (smp.done) return true;
    if (req.return_token_ids) {
      smp.token_ids.insert(smp.token_ids.end(), o.token_ids.begin(), o.token_ids.end());
      smp.pending_ids.insert(smp.pending_ids.end(), o.token_ids.begin(), o.token_ids.end());
    }
    std::string new_text;
    if (req.prompt_logprobs && !prompt_lp_json && !o.prompt_logprobs.empty()) {
      prompt_lp_json = build_prompt_lp(o.prompt_logprobs, prompt_ids);
    }
    if (req.echo && !smp.echoed) {
      smp.echoed = true;
      new_text = prompt_text;
      if (req.logprobs) {
        // Prompt logprobs arrive with sample 0's first message; entry i is token i+1.
        const std::vector<engine::TokenLogprob>& pl = o.prompt_logprobs;
        for (size_t i = 0; i < prompt_ids.size(); ++i) {
          if (i == 0 || i - 1 >= pl.size()) {
            add_logprob(smp, prompt_ids[i], std::nullopt, std::nullopt);
          } else {
            add_logprob(smp, prompt_ids[i], pl[i - 1].logprob, TopText(pl[i - 1].top));
          }
        }
      }
    }
    for (size_t i = 0; i < o.token_ids.size(); ++i) {
      if (req.logprobs && i < o.logprobs.size()) {
        add_logprob(smp, o.token_ids[i], o.logprobs[i].logprob, TopText(o.logprobs[i].top));
      }
      new_text += smp.stop->Push(smp.detok->Push(o.token_ids[i]));
      if (smp.stop->stopped()) break;
    }
    if (smp.stop->stopped()) {
      smp.done = true;
      smp.finish_reason = "stop";
    } else if (o.finish) {
      if (*o.finish == engine::FinishReason::kError) {
        engine_error = o.error.ok() ? absl::InternalError("generation failed") : o.error;
        for (Sample& other : samples) other.done = true;
      }
      new_text += smp.stop->Push(smp.detok->Flush());
      new_text += smp.stop->Flush();
      smp.done = true;
      smp.finish_reason = *o.finish == engine::FinishReason::kLength ? "length" : "stop";
    }
    if (!stream_mode) {
      smp.text += new_text;
      return true;
    }
    if (!new_text.empty() || (req.logprobs && !smp.logprobs.tokens.empty())) {
      if (!emit(o.sample_index, new_text, "")) return false;
    }
    if (smp.done && engine_error.ok()) return emit(o.sample_index, "", smp.finish_reason);
    return true;
  };
  auto all_done = [&] {
    return std::all_of(samples.begin(), samples.end(), [](const Sample& x) { return x.done; });
  };
  PumpEnd end = Pump(**stream, w, on_output, all_done);
  record.prompt_tokens = static_cast<int64_t>(prompt_ids.size());
  if (end == PumpEnd::kClientGone && w.ServerClosing()) {
    EndOpenAiRequestForShutdown(w, stream_mode);
    return Finish(record, w.status());
  }
  if (end == PumpEnd::kClientGone) {
    w.set_status(499);
    return Finish(record, 499);
  }
  Usage usage;
  usage.prompt_tokens = record.prompt_tokens;
  usage.cached_tokens = record.cached_tokens;
  usage.completion_tokens = record.generated_tokens;
  if (stream_mode) {
    if (!engine_error.ok()) {
      w.WriteChunk(SseEvent(OJson::parse(OpenAiErrorJson(engine_error))));
      w.set_status(ErrorInfoFor(engine_error.code()).http_status);
    } else if (include_usage) {
      OJson chunk = CompletionJson(id, created, model, {}, usage);
      w.WriteChunk(SseEvent(chunk));
    }
    w.WriteChunk(kSseDone);
    w.EndStream();
    return Finish(record, w.status());
  }
  if (!engine_error.ok()) {
    SendError(w, engine_error);
    return Finish(record, w.status());
  }
  std::vector<CompletionChoiceOut> choices;
  for (int i = 0; i < n; ++i) {
    CompletionChoiceOut c;
    c.index = i;
    c.text = samples[i].text;
    c.finish_reason = samples[i].finish_reason.empty() ? "stop" : samples[i].finish_reason;
    if (req.logprobs) c.logprobs = CompletionLogprobsJson(samples[i].logprobs);
    if (req.prompt_logprobs) c.prompt_logprobs = prompt_lp_json.value_or(OJson::array({nullptr}));
    if (req.return_token_ids) {
      c.prompt_token_ids = prompt_ids;
      c.token_ids = samples[i].token_ids;
    }
    choices.push_back(std::move(c));
  }
  SendJson(w, 200, CompletionJson(id, created, model, choices, usage));
  Finish(record, 200);
}

// --- /tokenize, /detokenize, /v1/models, /metrics ---------------------------------------------

void ApiServer::Impl::HandleTokenize(const http::HttpRequest& req, RecordingWriter& w) {
  OJson body = OJson::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.is_object()) {
    return SendError(w, absl::InvalidArgumentError("the request body must be a JSON object"));
  }
  const Tokenizer& tok = *s->tokenizer_;
  std::vector<int32_t> ids;
  if (body.contains("messages")) {
    absl::StatusOr<ChatCompletionRequest> chat = ParseChatCompletionRequest(req.body);
    if (!chat.ok()) return SendError(w, chat.status());
    if (!s->family_) {
      return SendError(w, absl::FailedPreconditionError(s->chat_unavailable_));
    }
    protocol::EncodeOptions options;
    options.family = *s->family_;
    options.thinking = chat->thinking.value_or(true);
    absl::StatusOr<protocol::EncodedPrompt> encoded =
        protocol::EncodePrompt(chat->conversation, options);
    if (!encoded.ok()) return SendError(w, encoded.status());
    absl::StatusOr<std::vector<int32_t>> r = protocol::PromptToIds(*encoded, tok);
    if (!r.ok()) return SendError(w, absl::InternalError(std::string(r.status().message())));
    ids = *std::move(r);
  } else {
    auto it = body.find("prompt");
    if (it == body.end() || !it->is_string()) {
      return SendError(
          w, WithParam(absl::InvalidArgumentError("'prompt' must be a string"), "prompt"));
    }
    bool add_special = true;
    if (auto a = body.find("add_special_tokens"); a != body.end() && !a->is_null()) {
      if (!a->is_boolean()) {
        return SendError(
            w, WithParam(absl::InvalidArgumentError("'add_special_tokens' must be a boolean"),
                         "add_special_tokens"));
      }
      add_special = a->get<bool>();
    }
    if (add_special && tok.add_bos() && tok.bos_id() >= 0) ids.push_back(tok.bos_id());
    std::vector<int32_t> text = tok.EncodeText(it->get<std::string>());
    ids.insert(ids.end(), text.begin(), text.end());
  }
  SendJson(w, 200,
           {{"count", ids.size()},
            {"max_model_len", s->engine_->model_info().max_context},
            {"tokens", ids}});
}

void ApiServer::Impl::HandleDetokenize(const http::HttpRequest& req, RecordingWriter& w) {
  OJson body = OJson::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.is_object()) {
    return SendError(w, absl::InvalidArgumentError("the request body must be a JSON object"));
  }
  auto it = body.find("tokens");
  absl::Status bad = WithParam(
      absl::InvalidArgumentError("'tokens' must be an array of token ids in the vocabulary"),
      "tokens");
  if (it == body.end() || !it->is_array()) return SendError(w, bad);
  std::vector<int32_t> ids;
  const int64_t vocab = s->tokenizer_->vocab_size();
  for (const OJson& t : *it) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab) {
      return SendError(w, bad);
    }
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  SendJson(w, 200, {{"prompt", s->tokenizer_->Decode(ids)}});
}

void ApiServer::Impl::HandleModels(const http::HttpRequest& req, RecordingWriter& w) {
  const std::string name =
      s->options_.served_model_name.empty() ? "deepinfer" : s->options_.served_model_name;
  OJson card = {{"id", name},
                {"object", "model"},
                {"created", UnixSeconds()},
                {"owned_by", "deepinfer"},
                {"max_model_len", s->engine_->model_info().max_context}};
  if (req.path == "/v1/models") {
    SendJson(w, 200, {{"object", "list"}, {"data", OJson::array({card})}});
    return;
  }
  std::string wanted = req.path.substr(std::string("/v1/models/").size());
  if (absl::Status st = CheckModel(wanted); !st.ok() || wanted.empty()) {
    return SendError(w, st.ok() ? absl::NotFoundError("model id missing") : st);
  }
  SendJson(w, 200, card);
}

void ApiServer::Impl::HandleMetrics(RecordingWriter& w) {
  engine_metrics->Update(s->engine_->Stats());
  w.Send(200, http::MetricsRegistry::kContentType, s->metrics_.RenderText(), {});
}

void ApiServer::Impl::HandleResetPrefixCache(RecordingWriter& w) {
  const engine::EngineStats before = s->engine_->Stats();
  s->engine_->ResetPrefixCache();
  const engine::EngineStats after = s->engine_->Stats();
  LOG(INFO) << "prefix cache reset: " << before.prefix_cache_blocks << " cached blocks and "
            << before.snapshots << " snapshots before, " << after.prefix_cache_blocks
            << " blocks (held by running requests) and " << after.snapshots << " snapshots after";
  SendJson(w, 200, {{"status", "ok"}});
}

// --- /v1/responses, /v1/messages, /v1/messages/count_tokens -------------------------------------
// Both APIs are codecs (api/responses_codec.h, api/messages_codec.h) over the same conversation
// model, prompt encoder and output parser as /v1/chat/completions; only the wire format differs.

void ApiServer::Impl::HandleCodec(const http::HttpRequest& hreq, RecordingWriter& w, CodecApi api) {
  const bool anthropic = api != CodecApi::kResponses;
  auto fail = [&](const absl::Status& st) {
    if (!anthropic) return SendError(w, st);
    LOG(INFO) << "request rejected: " << st.message();
    w.Send(AnthropicErrorInfoFor(st.code()).http_status, "application/json", AnthropicErrorJson(st),
           {});
  };
  std::optional<ResponsesRequest> rreq;
  std::optional<MessagesRequest> mreq;
  protocol::Conversation* conv = nullptr;
  SamplingFields* sampling = nullptr;
  std::string model_name;
  std::optional<bool> thinking_opt;
  std::string effort_name;
  std::string cache_salt;
  if (!anthropic) {
    absl::StatusOr<ResponsesRequest> p = ParseResponsesRequest(hreq.body);
    if (!p.ok()) return fail(p.status());
    rreq = *std::move(p);
    conv = &rreq->conversation;
    sampling = &rreq->sampling;
    model_name = rreq->model;
    thinking_opt = rreq->thinking;
    effort_name = rreq->reasoning_effort;
    cache_salt = rreq->cache_salt;
  } else {
    absl::StatusOr<MessagesRequest> p =
        ParseMessagesRequest(hreq.body, api == CodecApi::kCountTokens);
    if (!p.ok()) return fail(p.status());
    mreq = *std::move(p);
    conv = &mreq->conversation;
    sampling = &mreq->sampling;
    model_name = mreq->model;
    thinking_opt = mreq->thinking;
    effort_name = mreq->reasoning_effort;
    cache_salt = mreq->cache_salt;
  }
  if (absl::Status st = CheckModel(model_name); !st.ok()) return fail(st);
  if (!s->family_) return fail(absl::FailedPreconditionError(s->chat_unavailable_));
  protocol::EncodeOptions options;
  options.family = *s->family_;
  options.thinking = thinking_opt.value_or(true);
  const bool parallel_tool_calls =
      anthropic ? mreq->parallel_tool_calls : rreq->parallel_tool_calls;
  absl::StatusOr<ConstraintPlan> plan =
      PlanConstraint(conv, thinking_opt, parallel_tool_calls, &options);
  // The Responses API calls response_format `text.format`.
  auto rename = [&](const absl::Status& st) {
    return !anthropic && ErrorParam(st) == "response_format" ? WithParam(st, "text.format") : st;
  };
  if (!plan.ok()) return fail(rename(plan.status()));
  if (!effort_name.empty()) {
    absl::StatusOr<protocol::ReasoningEffort> effort =
        protocol::ReasoningEffort::Parse(effort_name);
    if (!effort.ok()) {
      return fail(
          WithParam(effort.status(), anthropic ? "output_config.effort" : "reasoning.effort"));
    }
    options.effort = *effort;
  }
  absl::StatusOr<protocol::EncodedPrompt> encoded = protocol::EncodePrompt(*conv, options);
  if (!encoded.ok()) return fail(encoded.status());
  absl::StatusOr<std::vector<int32_t>> ids = protocol::PromptToIds(*encoded, *s->tokenizer_);
  if (!ids.ok()) {
    return fail(absl::InternalError(
        absl::StrCat("cannot tokenize the chat template: ", ids.status().message())));
  }
  if (api == CodecApi::kCountTokens) {
    SendJson(w, 200, OJson{{"input_tokens", ids->size()}});
    return;
  }
  absl::StatusOr<engine::SamplingParams> params = BuildParams(
      *sampling, static_cast<int64_t>(ids->size()), anthropic ? "messages" : "input", 0);
  if (!params.ok()) return fail(params.status());
  if (absl::Status st = ApplyConstraint(*plan, *conv, *encoded, &*params); !st.ok()) {
    return fail(rename(st));
  }
  if (absl::Status st = params->Validate(); !st.ok()) return fail(st);

  const std::string id = RandomId(anthropic ? "msg_" : "resp_");
  const std::string model = ModelName(model_name);
  const bool stream_mode = sampling->stream;
  const size_t prompt_len = ids->size();
  absl::StatusOr<std::shared_ptr<engine::RequestStream>> stream =
      Submit({id, *std::move(ids), *params, cache_salt});
  if (!stream.ok()) return fail(stream.status());

  protocol::OutputParserOptions parser_options;
  parser_options.start = encoded->start;
  parser_options.forced_tool_name = encoded->forced_tool_name;
  parser_options.stop = sampling->stop;
  std::vector<std::string> declared;
  for (const protocol::ToolDefinition& t : conv->tools) declared.push_back(t.name);
  parser_options.declared_tools = declared;
  if (anthropic) {
    parser_options.make_tool_call_id = [](int) { return RandomId("toolu_"); };
  }
  protocol::OutputParser parser(s->tokenizer_, *s->markers_, parser_options);

  std::optional<ResponsesEncoder> renc;
  std::optional<MessagesEncoder> menc;
  if (anthropic) {
    menc.emplace(MessageMeta{id, model, static_cast<int64_t>(prompt_len), 0});
  } else {
    renc.emplace(ResponseMeta{id, UnixSeconds(), model, &*rreq});
  }
  auto write_all = [&](const std::vector<OJson>& events) {
    if (!stream_mode) return true;
    for (const OJson& e : events) {
      if (!w.WriteChunk(codec_util::NamedSseEvent(e))) return false;
    }
    return true;
  };

  RequestRecord record;
  record.id = id;
  record.route = anthropic ? "messages" : "responses";
  absl::Status engine_error;
  bool done = false;
  bool in_reasoning = encoded->start == protocol::ParserStart::kReasoning;
  int64_t reasoning_tokens = 0;

  if (stream_mode) {
    if (!w.BeginStream(200, "text/event-stream")) {
      s->engine_->Abort(id);
      return;
    }
  }
  // Anthropic's message_start carries the usage, whose cache_read_input_tokens is known with the
  // engine's first output: it is sent then (the stream's headers went out above). Responses'
  // response.created has no usage and goes out at once.
  bool started = false;
  auto start = [&] {
    if (started) return true;
    started = true;
    if (anthropic) menc->SetCacheReadInputTokens(record.cached_tokens);
    std::vector<OJson> events = anthropic ? menc->Start() : renc->Start();
    if (anthropic) events.push_back(OJson{{"type", "ping"}});
    return write_all(events);
  };
  if (!anthropic && !start()) {
    s->engine_->Abort(id);
    w.set_status(499);
    return Finish(record, 499);
  }

  auto on_output = [&](StepOutput& o) -> bool {
    record.Observe(o);
    if (!start()) return false;
    if (done) return true;
    std::vector<protocol::OutputEvent> events = parser.Feed(o.token_ids);
    if (in_reasoning) {
      reasoning_tokens += static_cast<int64_t>(o.token_ids.size());
      for (const auto& e : events) {
        if (e.type != protocol::OutputEvent::Type::kReasoningDelta) in_reasoning = false;
      }
    }
    if (o.finish) {
      if (*o.finish == engine::FinishReason::kError) {
        engine_error = o.error.ok() ? absl::InternalError("generation failed") : o.error;
      } else if (!parser.finished()) {
        std::vector<protocol::OutputEvent> tail = parser.Finish(StreamEndFor(*o.finish));
        events.insert(events.end(), tail.begin(), tail.end());
      }
      done = true;
    }
    if (parser.finished()) done = true;
    for (const protocol::OutputEvent& e : protocol::CoalesceEvents(events)) {
      if (!write_all(anthropic ? menc->OnEvent(e) : renc->OnEvent(e))) return false;
    }
    return true;
  };
  PumpEnd end = Pump(**stream, w, on_output, [&] { return done; });
  record.prompt_tokens = static_cast<int64_t>(prompt_len);
  auto usage_so_far = [&] {
    Usage usage;
    usage.prompt_tokens = record.prompt_tokens;
    usage.cached_tokens = record.cached_tokens;
    usage.completion_tokens = record.generated_tokens;
    usage.reasoning_tokens = reasoning_tokens;
    return usage;
  };
  // A failure after the response began: the API family's terminal error. Responses streams end
  // with `response.failed` (the open item closed "incomplete", the output so far); Anthropic
  // streams with an `error` event; non-streaming requests get the error body.
  auto fail_started = [&](const absl::Status& st) {
    if (!stream_mode) {
      fail(st);
    } else if (anthropic) {
      start();
      w.WriteChunk(absl::StrCat("event: error\ndata: ", AnthropicErrorJson(st), "\n\n"));
      w.EndStream();
      w.set_status(AnthropicErrorInfoFor(st.code()).http_status);
    } else {
      write_all(renc->Fail(usage_so_far(), StdView(st.message())));
      w.EndStream();
      w.set_status(ErrorInfoFor(st.code()).http_status);
    }
    Finish(record, w.status());
  };
  if (end == PumpEnd::kClientGone && w.ServerClosing()) return fail_started(ServerClosingError());
  if (end == PumpEnd::kClientGone) {
    w.set_status(499);
    return Finish(record, 499);
  }
  if (!engine_error.ok()) return fail_started(engine_error);
  start();
  if (anthropic) menc->SetCacheReadInputTokens(record.cached_tokens);
  const Usage usage = usage_so_far();
  std::vector<OJson> tail =
      anthropic ? menc->Complete(usage.completion_tokens) : renc->Complete(usage);
  if (stream_mode) {
    write_all(tail);
    w.EndStream();
    return Finish(record, w.status());
  }
  if (anthropic) {
    absl::StatusOr<OJson> message = menc->Message();
    if (!message.ok()) {
      fail(message.status());
      return Finish(record, w.status());
    }
    SendJson(w, 200, *message);
  } else {
    SendJson(w, 200, renc->Response());
  }
  Finish(record, 200);
}

}  // namespace deepinfer::api
