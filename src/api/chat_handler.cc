// POST /v1/chat/completions (stream and non-stream; DeepSeek models).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "api/codec_util.h"
#include "api/errors.h"
#include "api/server_internal.h"
#include "common/clock.h"
#include "common/logging.h"

namespace deepinfer::api {

using OJson = nlohmann::ordered_json;
using engine::StepOutput;

void ApiServer::Impl::HandleChat(const http::HttpRequest& hreq, RecordingWriter& w) {
  const int64_t arrival_ns = MonotonicNanos();
  absl::StatusOr<ChatCompletionRequest> parsed = ParseChatCompletionRequest(hreq.body);
  if (!parsed.ok()) return SendError(w, parsed.status());
  ChatCompletionRequest& req = *parsed;
  if (absl::Status st = CheckModel(req.model); !st.ok()) return SendError(w, st);
  absl::StatusOr<kv::TrafficClass> traffic =
      codec_util::ResolveTrafficClass(req.traffic_class, hreq.Header("x-traffic-class"));
  if (!traffic.ok()) return SendError(w, traffic.status());
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
  plan->reasoning_budget = req.thinking_token_budget;
  if (absl::Status st = codec_util::RejectImageParts(req.conversation); !st.ok()) {
    return SendError(w, st);
  }
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
  absl::StatusOr<std::vector<int32_t>> ids = PromptIds(*encoded, "messages");
  if (!ids.ok()) return SendError(w, ids.status());
  absl::StatusOr<engine::SamplingParams> params =
      BuildParams(req.sampling, static_cast<int64_t>(ids->size()), "messages",
                  DefaultChatMaxTokens(options.thinking));
  if (!params.ok()) return SendError(w, params.status());
  if (req.logprobs) params->logprobs = req.top_logprobs;
  if (absl::Status st = ApplyConstraint(*plan, req.conversation, *encoded, &*params); !st.ok()) {
    return SendError(w, st);
  }
  if (absl::Status st = params->Validate(); !st.ok()) return SendError(w, st);

  const std::string id = RequestIdFor(hreq, "chatcmpl-");
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
      Submit({id, *std::move(ids), *params, req.cache_salt, *traffic});
  if (!stream.ok()) return SendError(w, stream.status());

  protocol::OutputParserOptions parser_options;
  parser_options.start = encoded->start;
  parser_options.forced_tool_name = encoded->forced_tool_name;
  parser_options.stop = req.sampling.stop;
  parser_options.min_tokens = params->min_tokens;
  parser_options.max_tool_calls = req.parallel_tool_calls ? 0 : 1;
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
    bool sent_role = false;            // stream: the role chunk went out
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
  record.arrival_ns = arrival_ns;
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
      s->backend_->Abort(id);
      return;
    }
  }
  // A choice's first chunk (the `role` delta) goes out with its first token, as in vLLM, so a
  // client timing the first chunk measures prefill too.

  auto on_output = [&](StepOutput& o) -> bool {
    record.Observe(o);
    if (o.sample_index < 0 || o.sample_index >= n) return true;
    Sample& smp = samples[o.sample_index];
    if (smp.done) return true;
    if (stream_mode && !smp.sent_role) {
      smp.sent_role = true;
      if (!emit(o.sample_index, {{"role", "assistant"}, {"content", ""}}, "")) return false;
    }
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
      smp.reasoning_tokens += CountReasoningTokens(o.token_ids, &smp.in_reasoning);
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

}  // namespace deepinfer::api
