// POST /v1/completions (prompt text or ids, echo, logprobs, stop strings).
#include <algorithm>
#include <span>

#include "absl/strings/str_cat.h"
#include "api/codec_util.h"
#include "api/errors.h"
#include "api/server_internal.h"
#include "api/stop_matcher.h"
#include "common/clock.h"

namespace deepinfer::api {

using OJson = nlohmann::ordered_json;
using engine::StepOutput;

namespace {

// Unicode characters (code points) in UTF-8 text: continuation bytes are not counted.
int64_t CharCount(std::string_view utf8) {
  int64_t n = 0;
  for (unsigned char c : utf8) n += (c & 0xC0) != 0x80;
  return n;
}

}  // namespace

void ApiServer::Impl::HandleCompletion(const http::HttpRequest& hreq, RecordingWriter& w) {
  const int64_t arrival_ns = MonotonicNanos();
  absl::StatusOr<CompletionRequest> parsed = ParseCompletionRequest(hreq.body);
  if (!parsed.ok()) return SendError(w, parsed.status());
  CompletionRequest& req = *parsed;
  if (absl::Status st = CheckModel(req.model); !st.ok()) return SendError(w, st);
  absl::StatusOr<kv::TrafficClass> traffic =
      codec_util::ResolveTrafficClass(req.traffic_class, hreq.Header("x-traffic-class"));
  if (!traffic.ok()) return SendError(w, traffic.status());
  const Tokenizer& tok = *s->tokenizer_;
  std::vector<int32_t> prompt;
  std::string prompt_text;
  if (req.prompt_is_ids) {
    prompt = req.prompt_ids;
    const int64_t vocab = s->backend_->model_info().vocab_size;
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
    absl::StatusOr<std::vector<int32_t>> ids = PromptTextIds(req.prompt_text, "prompt");
    if (!ids.ok()) return SendError(w, ids.status());
    prompt = *std::move(ids);
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

  const std::string id = RequestIdFor(hreq, "cmpl-");
  const int64_t created = UnixSeconds();
  const std::string model = ModelName(req.model);
  const int n = params->n;
  const bool stream_mode = req.sampling.stream;
  const bool include_usage = stream_mode && req.sampling.include_usage;
  const std::vector<int32_t> prompt_ids = prompt;

  absl::StatusOr<std::shared_ptr<engine::RequestStream>> stream =
      Submit({id, std::move(prompt), *params, req.cache_salt, *traffic, req.speculative});
  if (!stream.ok()) return SendError(w, stream.status());

  struct Sample {
    std::unique_ptr<StreamingDetokenizer> detok;
    std::unique_ptr<StopMatcher> stop;
    bool done = false;
    bool echoed = false;
    std::string text;             // non-stream: the whole text (with echo)
    int64_t decoded_chars = 0;    // characters the completion's tokens decoded to so far
    int64_t generated = 0;        // tokens generated so far (min_tokens arms the stop strings)
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
  record.arrival_ns = arrival_ns;
  absl::Status engine_error;

  // text_offset (OpenAI's legacy API): the character offset in the returned text (the echoed
  // prompt, then the completion) where the token's text starts; a token that adds no text (BOS)
  // or whose leading space the decoder strips starts where the next character is.
  auto add_logprob = [&](Sample& smp, int32_t token, std::optional<double> lp,
                         std::optional<std::vector<std::pair<std::string, double>>> top,
                         int64_t text_offset) {
    smp.logprobs.tokens.push_back(TokenText(token));
    smp.logprobs.token_logprobs.push_back(lp);
    smp.logprobs.top_logprobs.push_back(std::move(top));
    smp.logprobs.text_offset.push_back(text_offset);
  };
  // Character offsets of the prompt's tokens in the echoed prompt text.
  std::vector<int64_t> prompt_offsets;
  int64_t prompt_chars = CharCount(prompt_text);
  if (req.echo && req.logprobs) {
    StreamingDetokenizer d(&tok, /*skip_special=*/true);
    int64_t chars = 0;
    for (int32_t t : prompt_ids) {
      prompt_offsets.push_back(std::min(chars, prompt_chars));
      chars += CharCount(d.Push(t));
    }
  }
  // Prompt logprobs arrive once, with the request's first message (sample 0's); every echoing
  // choice reports them.
  std::vector<engine::TokenLogprob> shared_prompt_lp;
  const int64_t min_tokens = params->min_tokens;
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
    s->backend_->Abort(id);
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
    if (shared_prompt_lp.empty() && !o.prompt_logprobs.empty()) {
      shared_prompt_lp = o.prompt_logprobs;
    }
    if (req.echo && !smp.echoed) {
      smp.echoed = true;
      new_text = prompt_text;
      if (req.logprobs) {
        // Entry i of the prompt logprobs is token i+1's.
        const std::vector<engine::TokenLogprob>& pl = shared_prompt_lp;
        for (size_t i = 0; i < prompt_ids.size(); ++i) {
          if (i == 0 || i - 1 >= pl.size()) {
            add_logprob(smp, prompt_ids[i], std::nullopt, std::nullopt, prompt_offsets[i]);
          } else {
            add_logprob(smp, prompt_ids[i], pl[i - 1].logprob, TopText(pl[i - 1].top),
                        prompt_offsets[i]);
          }
        }
      }
    }
    const int64_t base = req.echo ? prompt_chars : 0;
    for (size_t i = 0; i < o.token_ids.size(); ++i) {
      if (req.logprobs && i < o.logprobs.size()) {
        add_logprob(smp, o.token_ids[i], o.logprobs[i].logprob, TopText(o.logprobs[i].top),
                    base + smp.decoded_chars);
      }
      const std::string piece = smp.detok->Push(o.token_ids[i]);
      smp.decoded_chars += CharCount(piece);
      // vLLM's min_tokens: stop strings count only once min_tokens tokens exist.
      smp.stop->set_armed(++smp.generated >= min_tokens);
      new_text += smp.stop->Push(piece);
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
      // A complete stop string that waited on an earlier partial one ends the text at the end.
      smp.finish_reason = smp.stop->stopped()                          ? "stop"
                          : *o.finish == engine::FinishReason::kLength ? "length"
                                                                       : "stop";
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

}  // namespace deepinfer::api
