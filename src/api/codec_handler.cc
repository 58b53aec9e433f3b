// POST /v1/responses, /v1/messages, /v1/messages/count_tokens.
#include "absl/strings/str_cat.h"
#include "api/codec_util.h"
#include "api/errors.h"
#include "api/messages_codec.h"
#include "api/responses_codec.h"
#include "api/server_internal.h"
#include "common/clock.h"
#include "common/logging.h"
#include "common/strings.h"

namespace deepinfer::api {

using OJson = nlohmann::ordered_json;
using engine::StepOutput;

// Both APIs are codecs (api/responses_codec.h, api/messages_codec.h) over the same conversation
// model, prompt encoder and output parser as /v1/chat/completions; only the wire format differs.

void ApiServer::Impl::HandleCodec(const http::HttpRequest& hreq, RecordingWriter& w, CodecApi api) {
  const int64_t arrival_ns = MonotonicNanos();
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
  std::optional<kv::TrafficClass> traffic_field;
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
    traffic_field = rreq->traffic_class;
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
    traffic_field = mreq->traffic_class;
  }
  if (absl::Status st = CheckModel(model_name); !st.ok()) return fail(st);
  absl::StatusOr<kv::TrafficClass> traffic =
      codec_util::ResolveTrafficClass(traffic_field, hreq.Header("x-traffic-class"));
  if (!traffic.ok()) return fail(traffic.status());
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
  plan->reasoning_budget = anthropic ? mreq->thinking_budget : rreq->thinking_token_budget;
  if (api != CodecApi::kCountTokens) {
    if (absl::Status st = codec_util::RejectImageParts(*conv); !st.ok()) return fail(st);
  }
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
  absl::StatusOr<std::vector<int32_t>> ids = PromptIds(
      *encoded, anthropic ? "messages" : "input", /*bounded=*/api != CodecApi::kCountTokens);
  if (!ids.ok()) return fail(ids.status());
  if (api == CodecApi::kCountTokens) {
    SendJson(w, 200, OJson{{"input_tokens", ids->size()}});
    return;
  }
  // Messages requires max_tokens; Responses gets the chat default when max_output_tokens is
  // omitted.
  absl::StatusOr<engine::SamplingParams> params =
      BuildParams(*sampling, static_cast<int64_t>(ids->size()), anthropic ? "messages" : "input",
                  DefaultChatMaxTokens(options.thinking));
  if (!params.ok()) return fail(params.status());
  if (absl::Status st = ApplyConstraint(*plan, *conv, *encoded, &*params); !st.ok()) {
    return fail(rename(st));
  }
  if (absl::Status st = params->Validate(); !st.ok()) return fail(st);

  const std::string id = RequestIdFor(hreq, anthropic ? "msg_" : "resp_");
  const std::string model = ModelName(model_name);
  const bool stream_mode = sampling->stream;
  const size_t prompt_len = ids->size();
  absl::StatusOr<std::shared_ptr<engine::RequestStream>> stream =
      Submit({id, *std::move(ids), *params, cache_salt, *traffic});
  if (!stream.ok()) return fail(stream.status());

  protocol::OutputParserOptions parser_options;
  parser_options.start = encoded->start;
  parser_options.forced_tool_name = encoded->forced_tool_name;
  parser_options.stop = sampling->stop;
  parser_options.min_tokens = params->min_tokens;
  parser_options.max_tool_calls = parallel_tool_calls ? 0 : 1;
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
  record.arrival_ns = arrival_ns;
  absl::Status engine_error;
  bool done = false;
  bool in_reasoning = encoded->start == protocol::ParserStart::kReasoning;
  int64_t reasoning_tokens = 0;

  if (stream_mode) {
    if (!w.BeginStream(200, "text/event-stream")) {
      s->backend_->Abort(id);
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
    s->backend_->Abort(id);
    w.set_status(499);
    return Finish(record, 499);
  }

  auto on_output = [&](StepOutput& o) -> bool {
    record.Observe(o);
    if (!start()) return false;
    if (done) return true;
    std::vector<protocol::OutputEvent> events = parser.Feed(o.token_ids);
    if (in_reasoning) reasoning_tokens += CountReasoningTokens(o.token_ids, &in_reasoning);
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
