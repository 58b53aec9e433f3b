// ApiServer: routing by path and method, authentication, the model check and route metrics.
#include <algorithm>
#include <iterator>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "api/errors.h"
#include "api/messages_codec.h"
#include "api/server_internal.h"
#include "common/logging.h"
#include "common/strings.h"

namespace deepinfer::api {

using OJson = nlohmann::ordered_json;
using engine::StepOutput;

namespace {

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

}  // namespace

ApiServer::Impl::Impl(ApiServer* server) : s(server) {
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
  const std::string model_label =
      s->options_.served_model_name.empty() ? "deepinfer" : s->options_.served_model_name;
  engine_metrics = std::make_unique<EngineMetrics>(&m, model_label);
  request_metrics = std::make_unique<RequestMetrics>(&m, model_label, MaxModelLen());
  in_flight = m.GetGauge("deepinfer_http_requests_in_flight", "HTTP requests being handled.");
}

ApiServer::ApiServer(engine::Engine* engine, const Tokenizer* tokenizer, ApiServerOptions options)
    : ApiServer(static_cast<EngineBackend*>(nullptr), tokenizer, std::move(options)) {
  owned_backend_ = std::make_unique<LocalEngineBackend>(engine);
  backend_ = owned_backend_.get();
  Init();
}

ApiServer::ApiServer(EngineBackend* backend, const Tokenizer* tokenizer, ApiServerOptions options)
    : backend_(backend), tokenizer_(tokenizer), options_(std::move(options)) {
  if (backend_ != nullptr) Init();
}

void ApiServer::Init() {
  const model::ModelInfo& info = backend_->model_info();
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
  for (int32_t id = 0; id < tokenizer_->vocab_size(); ++id) {
    impl_->max_token_bytes =
        std::max<int64_t>(impl_->max_token_bytes, tokenizer_->TokenBytes(id).size());
  }
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
    LOG(INFO) << "request rejected: id=" << req.request_id << " status=" << http_status << " "
              << st.message();
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
  const std::vector<std::string>& aliases = s->options_.served_model_aliases;
  if (model.empty() || served.empty() || model == served ||
      std::find(aliases.begin(), aliases.end(), model) != aliases.end()) {
    return absl::OkStatus();
  }
  std::string names = absl::StrCat("`", served, "`");
  for (const std::string& a : aliases) absl::StrAppend(&names, ", `", a, "`");
  return WithParam(
      WithErrorCode(absl::NotFoundError(absl::StrCat("The model `", model,
                                                     "` does not exist. This server serves ",
                                                     names, ".")),
                    "model_not_found"),
      "model");
}

}  // namespace deepinfer::api
