#include "python/offline_llm.h"

#include <filesystem>
#include <span>

#include "absl/strings/str_cat.h"
#include "api/openai_codec.h"
#include "common/status.h"
#include "model/model.h"

namespace deepinfer::python {
namespace {

protocol::StreamEnd StreamEndFor(engine::FinishReason r) {
  switch (r) {
    case engine::FinishReason::kLength:
      return protocol::StreamEnd::kLength;
    case engine::FinishReason::kAbort:
    case engine::FinishReason::kError:
      return protocol::StreamEnd::kCancelled;
    case engine::FinishReason::kStop:
      break;
  }
  return protocol::StreamEnd::kEndOfSequence;
}

// The chat view of a sample's events: content, reasoning, tool calls; finish reason as the
// server's Chat Completions reports it (stop / length / tool_calls), "" while unfinished.
void ApplyEvents(const std::vector<protocol::OutputEvent>& events, CompletionState* c) {
  protocol::ParsedOutput p = protocol::Aggregate(events);
  c->text = std::move(p.content);
  c->reasoning = std::move(p.reasoning);
  c->tool_calls = std::move(p.tool_calls);
  c->error = std::move(p.error);
  if (!events.empty() && events.back().type == protocol::OutputEvent::Type::kFinish) {
    c->finish_reason = api::ChatFinishReason(p.finish_reason);
    c->stop_reason = p.stop_sequence;
  }
}

}  // namespace

// ---- OfflineLLM ----

absl::StatusOr<std::shared_ptr<OfflineLLM>> OfflineLLM::Create(const OfflineLLMOptions& options) {
  if (options.model.empty()) {
    return absl::InvalidArgumentError(
        "model: no model directory given (pass model=DIR or set DEEPINFER_HF_MODEL_DIR)");
  }
  if (!std::filesystem::is_directory(options.model)) {
    return absl::NotFoundError(absl::StrCat("model: ", options.model, " is not a directory"));
  }
  struct Positive {
    const char* name;
    int64_t value;
  };
  for (const Positive& p : {Positive{"kv_memory_bytes", options.kv_memory_bytes},
                            Positive{"max_num_seqs", options.max_num_seqs},
                            Positive{"max_num_batched_tokens", options.max_num_batched_tokens},
                            Positive{"compile_threads", options.compile_threads}}) {
    if (p.value <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(p.name, " must be positive, got ", p.value));
    }
  }
  std::shared_ptr<OfflineLLM> llm(new OfflineLLM());
  ASSIGN_OR_RETURN(llm->tokenizer_, Tokenizer::FromDirectory(options.model));
  ASSIGN_OR_RETURN(llm->defaults_, ReadGenerationDefaults(options.model));
  model::LoadOptions load;
  load.fp32_activations = options.fp32_activations;
  ASSIGN_OR_RETURN(std::unique_ptr<model::CausalLM> model, model::LoadModel(options.model, load));
  const std::string model_type = model->info().model_type;
  engine::EngineConfig config;
  config.kv_memory_bytes = options.kv_memory_bytes;
  config.max_num_seqs = options.max_num_seqs;
  config.max_num_batched_tokens = options.max_num_batched_tokens;
  config.enable_prefix_caching = options.enable_prefix_caching;
  config.async_scheduling = options.async_scheduling;
  engine::LLMOptions llm_options;
  llm_options.compiler.num_threads = options.compile_threads;
  ASSIGN_OR_RETURN(llm->llm_,
                   engine::LLM::Create(std::move(model), config, *llm->tokenizer_, llm_options));
  // Models without the DeepSeek template (stories260K) still generate; chat() says why not.
  absl::StatusOr<std::unique_ptr<RequestEncoder>> enc =
      RequestEncoder::Create(llm->tokenizer_.get(), model_type);
  if (enc.ok()) llm->encoder_ = *std::move(enc);
  return llm;
}

OfflineLLM::~OfflineLLM() = default;

const model::ModelInfo& OfflineLLM::model_info() const { return llm_->engine().model_info(); }

engine::EngineStats OfflineLLM::Stats() const { return llm_->engine().Stats(); }

absl::StatusOr<std::vector<int32_t>> OfflineLLM::PromptIds(const PromptInput& prompt) const {
  if (!prompt.text.has_value()) {
    if (prompt.token_ids.empty()) {
      return absl::InvalidArgumentError("prompt_token_ids: empty token id list");
    }
    return prompt.token_ids;
  }
  // As the server's /v1/completions: BOS when the tokenizer adds one, then the text's ids.
  std::vector<int32_t> ids;
  if (tokenizer_->add_bos() && tokenizer_->bos_id() >= 0) ids.push_back(tokenizer_->bos_id());
  const std::vector<int32_t> text = tokenizer_->EncodeText(*prompt.text);
  ids.insert(ids.end(), text.begin(), text.end());
  if (ids.empty()) {
    return absl::InvalidArgumentError(
        "prompts: an empty prompt has no token (the model's tokenizer adds no BOS)");
  }
  return ids;
}

absl::StatusOr<std::unique_ptr<OfflineBatch>> OfflineLLM::Start(
    const std::vector<PromptInput>& prompts, const std::vector<ResolvedParams>& params) {
  if (params.size() != 1 && params.size() != prompts.size()) {
    return absl::InvalidArgumentError(absl::StrCat("sampling_params: ", params.size(),
                                                   " entries for ", prompts.size(), " prompts"));
  }
  std::vector<std::vector<int32_t>> ids;
  std::vector<std::optional<std::string>> texts;
  for (size_t i = 0; i < prompts.size(); ++i) {
    absl::StatusOr<std::vector<int32_t>> p = PromptIds(prompts[i]);
    if (!p.ok()) return Annotate(p.status(), absl::StrCat("prompt ", i));
    ids.push_back(*std::move(p));
    texts.push_back(prompts[i].text);
  }
  std::vector<ResolvedParams> per(prompts.size(), params.empty() ? ResolvedParams{} : params[0]);
  if (params.size() == prompts.size()) per = params;
  return Submit(std::move(ids), std::move(per), std::move(texts), {});
}

absl::StatusOr<std::unique_ptr<OfflineBatch>> OfflineLLM::StartChat(
    const std::vector<std::string>& bodies, const std::vector<ResolvedParams>& params) {
  if (encoder_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("chat: this model (model_type '", model_info().model_type,
                     "') has no DeepSeek chat template; use generate() with a text prompt"));
  }
  if (params.size() != 1 && params.size() != bodies.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sampling_params: ", params.size(), " entries for ", bodies.size(), " conversations"));
  }
  std::vector<ResolvedParams> per(bodies.size(), params.empty() ? ResolvedParams{} : params[0]);
  if (params.size() == bodies.size()) per = params;
  std::vector<std::vector<int32_t>> ids;
  std::vector<EncodedRequest> encoded;
  for (size_t i = 0; i < bodies.size(); ++i) {
    absl::StatusOr<EncodedRequest> e = encoder_->Encode(RequestApi::kChatCompletions, bodies[i]);
    if (!e.ok()) return Annotate(e.status(), absl::StrCat("conversation ", i));
    if (per[i].engine.so_args.has_value() && e->constraint.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "conversation ", i,
          ": so_args cannot be combined with response_format or a forced tool_choice"));
    }
    // SamplingParams.stop wins over the body's (chat() builds the body without one).
    if (!per[i].stop.empty()) e->parser_options.stop = per[i].stop;
    e->parser_options.min_tokens = per[i].engine.min_tokens;  // stop strings wait for it
    RETURN_IF_ERROR(Annotate(encoder_->ApplyConstraint(*e, *llm_->grammar_compiler(),
                                                       model_info().eos_token_ids, &per[i].engine),
                             absl::StrCat("conversation ", i)));
    ids.push_back(e->prompt_token_ids);
    encoded.push_back(*std::move(e));
  }
  return Submit(std::move(ids), std::move(per),
                std::vector<std::optional<std::string>>(bodies.size()), std::move(encoded));
}

absl::StatusOr<std::unique_ptr<OfflineBatch>> OfflineLLM::Submit(
    std::vector<std::vector<int32_t>> ids, std::vector<ResolvedParams> params,
    std::vector<std::optional<std::string>> texts, std::vector<EncodedRequest> chat) {
  std::vector<engine::SamplingParams> engine_params;
  for (const ResolvedParams& p : params) engine_params.push_back(p.engine);
  ASSIGN_OR_RETURN(std::vector<std::shared_ptr<engine::RequestStream>> streams,
                   llm_->Submit(ids, engine_params));
  std::unique_ptr<OfflineBatch> batch(new OfflineBatch(shared_from_this()));
  batch->params_ = std::move(params);
  batch->requests_.resize(ids.size());
  batch->live_.resize(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    RequestState& r = batch->requests_[i];
    OfflineBatch::Live& live = batch->live_[i];
    const ResolvedParams& p = batch->params_[i];
    live.stream = streams[i];
    r.request_id = streams[i]->request_id();
    r.prompt = texts[i];
    r.prompt_token_ids = ids[i];
    r.outputs.resize(p.engine.n);
    live.samples.resize(p.engine.n);
    for (int s = 0; s < p.engine.n; ++s) {
      r.outputs[s].index = s;
      OfflineBatch::Sample& smp = live.samples[s];
      if (!chat.empty()) {
        smp.parser = std::make_unique<protocol::OutputParser>(tokenizer_.get(), encoder_->markers(),
                                                              chat[i].parser_options);
        continue;
      }
      smp.detok = std::make_unique<StreamingDetokenizer>(tokenizer_.get(), p.skip_special_tokens);
      // Primed with the prompt so the decoder's sequence-start rule (SentencePiece's leading
      // space strip) applies to the prompt and the completion keeps its leading space.
      for (int32_t t : ids[i]) smp.detok->Push(t);
      if (!p.stop.empty()) smp.stop = std::make_unique<api::StopMatcher>(p.stop);
    }
  }
  return batch;
}

// ---- OfflineBatch ----

OfflineBatch::~OfflineBatch() { Abort(); }

bool OfflineBatch::finished() const {
  for (const Live& l : live_) {
    if (!l.closed) return false;
  }
  return true;
}

void OfflineBatch::FinishSample(int i, int s, std::string reason) {
  Sample& smp = live_[i].samples[s];
  smp.done = true;
  CompletionState& c = requests_[i].outputs[s];
  if (c.finish_reason.empty()) c.finish_reason = std::move(reason);
  bool all = true;
  for (const Sample& x : live_[i].samples) all = all && x.done;
  if (all) {
    requests_[i].finished = true;
    // Done early (a stop string): the engine would go on to max_tokens otherwise.
    if (!live_[i].closed && !live_[i].stream->finished() && !live_[i].aborted) {
      live_[i].aborted = true;
      llm_->llm_->engine().Abort(live_[i].stream->request_id());
    }
  }
}

absl::Status OfflineBatch::Apply(int i, engine::StepOutput out) {
  RequestState& r = requests_[i];
  Live& live = live_[i];
  if (!out.prompt_logprobs.empty()) r.prompt_logprobs = std::move(out.prompt_logprobs);
  r.num_cached_tokens = std::max(r.num_cached_tokens, out.cached_tokens);
  if (out.sample_index < 0 || out.sample_index >= static_cast<int>(live.samples.size())) {
    return absl::InternalError(absl::StrCat("engine sent sample ", out.sample_index));
  }
  const int s = out.sample_index;
  Sample& smp = live.samples[s];
  CompletionState& c = r.outputs[s];
  if (smp.done) return absl::OkStatus();  // after a stop string: the rest is discarded
  const ResolvedParams& p = params_[i];
  const bool want_logprobs = p.engine.logprobs >= 0;
  for (size_t k = 0; k < out.token_ids.size() && !smp.done; ++k) {
    const int32_t id = out.token_ids[k];
    c.token_ids.push_back(id);
    if (want_logprobs && k < out.logprobs.size()) {
      c.logprobs.push_back(out.logprobs[k]);
      c.cumulative_logprob += out.logprobs[k].logprob;
    }
    if (smp.parser != nullptr) {
      std::vector<protocol::OutputEvent> ev = smp.parser->Feed(std::span<const int32_t>(&id, 1));
      smp.events.insert(smp.events.end(), ev.begin(), ev.end());
      if (smp.parser->finished()) {  // a stop string in the answer
        ApplyEvents(smp.events, &c);
        FinishSample(i, s, "stop");
      }
      continue;
    }
    std::string piece = smp.detok->Push(id);
    if (smp.stop != nullptr) {
      smp.stop->set_armed(static_cast<int64_t>(c.token_ids.size()) >= p.engine.min_tokens);
      piece = smp.stop->Push(piece);
    }
    c.text += piece;
    if (smp.stop != nullptr && smp.stop->stopped()) {
      c.stop_reason = smp.stop->matched();
      FinishSample(i, s, "stop");
    }
  }
  if (smp.parser != nullptr && !smp.done) ApplyEvents(smp.events, &c);
  if (!out.finish.has_value() || smp.done) return absl::OkStatus();
  const engine::FinishReason why = *out.finish;
  if (smp.parser != nullptr) {
    std::vector<protocol::OutputEvent> ev = smp.parser->Finish(StreamEndFor(why));
    smp.events.insert(smp.events.end(), ev.begin(), ev.end());
    ApplyEvents(smp.events, &c);
    if (why == engine::FinishReason::kAbort || why == engine::FinishReason::kError) {
      c.finish_reason = std::string(engine::FinishReasonName(why));
    }
  } else {
    std::string tail = smp.detok->Flush();
    if (smp.stop != nullptr) {
      tail = smp.stop->Push(tail);
      tail += smp.stop->Flush();
      if (smp.stop->stopped()) c.stop_reason = smp.stop->matched();
    }
    c.text += tail;
    if (!c.stop_reason.empty()) c.finish_reason = "stop";
  }
  FinishSample(i, s, std::string(engine::FinishReasonName(why)));
  if (why == engine::FinishReason::kError) {
    return Annotate(out.error, absl::StrCat("prompt ", i));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int>> OfflineBatch::Poll(std::chrono::nanoseconds timeout) {
  std::vector<int> changed;
  absl::Status error;
  auto sweep = [&]() {
    for (size_t i = 0; i < live_.size(); ++i) {
      Live& l = live_[i];
      if (l.closed) continue;
      // finished() before Drain(): once it is true every message is queued, so this Drain
      // empties the stream for good.
      const bool fin = l.stream->finished();
      std::vector<engine::StepOutput> outs = l.stream->Drain();
      for (engine::StepOutput& o : outs) {
        absl::Status st = Apply(static_cast<int>(i), std::move(o));
        if (!st.ok() && error.ok()) error = st;
      }
      if (fin) l.closed = true;
      if ((!outs.empty() || fin) && (changed.empty() || changed.back() != static_cast<int>(i))) {
        changed.push_back(static_cast<int>(i));
      }
    }
  };
  sweep();
  if (changed.empty()) {
    for (size_t i = 0; i < live_.size(); ++i) {
      if (live_[i].closed) continue;
      if (std::optional<engine::StepOutput> o = live_[i].stream->Next(timeout)) {
        absl::Status st = Apply(static_cast<int>(i), *std::move(o));
        if (!st.ok() && error.ok()) error = st;
        sweep();
        if (std::find(changed.begin(), changed.end(), static_cast<int>(i)) == changed.end()) {
          changed.push_back(static_cast<int>(i));
        }
      }
      break;  // waited on the first live stream only
    }
  }
  if (!error.ok()) {
    Abort();
    return error;
  }
  std::sort(changed.begin(), changed.end());
  return changed;
}

void OfflineBatch::Abort() {
  for (Live& l : live_) {
    if (!l.closed && !l.aborted) {
      l.aborted = true;
      llm_->llm_->engine().Abort(l.stream->request_id());
    }
  }
  for (size_t i = 0; i < live_.size(); ++i) {
    Live& l = live_[i];
    if (l.closed) continue;
    // Abort makes the engine finish every sample: Next() returns nullopt once all are out.
    while (std::optional<engine::StepOutput> o = l.stream->Next()) {
      (void)Apply(static_cast<int>(i), *std::move(o));
    }
    l.closed = true;
  }
}

}  // namespace deepinfer::python
