#include "engine/llm.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace deepinfer::engine {

absl::StatusOr<std::unique_ptr<LLM>> LLM::Create(std::unique_ptr<model::CausalLM> model,
                                                 const EngineConfig& config) {
  ASSIGN_OR_RETURN(auto engine, Engine::Create(std::move(model), config));
  return std::make_unique<LLM>(std::move(engine));
}

absl::StatusOr<std::vector<GenerateOutput>> LLM::Generate(
    const std::vector<std::vector<int32_t>>& prompts, const SamplingParams& params) {
  return Generate(prompts, std::vector<SamplingParams>(prompts.size(), params));
}

absl::StatusOr<std::vector<GenerateOutput>> LLM::Generate(
    const std::vector<std::vector<int32_t>>& prompts, const std::vector<SamplingParams>& params) {
  if (params.size() != prompts.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("LLM::Generate: ", prompts.size(), " prompts but ", params.size(), " params"));
  }
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<GenerateOutput> outputs(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerateRequest req;
    req.prompt = prompts[i];
    req.params = params[i];
    absl::StatusOr<std::shared_ptr<RequestStream>> stream = engine_->Submit(std::move(req));
    if (!stream.ok()) {
      for (const auto& s : streams) engine_->Abort(s->request_id());
      for (const auto& s : streams) {
        while (s->Next().has_value()) {
        }
      }
      return Annotate(stream.status(), absl::StrCat("prompt ", i));
    }
    streams.push_back(*stream);
    outputs[i].prompt = prompts[i];
    outputs[i].samples.resize(params[i].n);
  }
  absl::Status first_error;
  for (size_t i = 0; i < streams.size(); ++i) {
    while (std::optional<StepOutput> out = streams[i]->Next()) {
      GenerateOutput& g = outputs[i];
      g.arrival_ns = out->arrival_ns;
      if (!out->prompt_logprobs.empty()) g.prompt_logprobs = std::move(out->prompt_logprobs);
      SampleOutput& s = g.samples[out->sample_index];
      s.token_ids.insert(s.token_ids.end(), out->token_ids.begin(), out->token_ids.end());
      s.logprobs.insert(s.logprobs.end(), out->logprobs.begin(), out->logprobs.end());
      if (out->first_token_ns != 0) s.first_token_ns = out->first_token_ns;
      if (out->finish.has_value()) {
        s.finish = *out->finish;
        s.finish_ns = out->now_ns;
        if (*out->finish == FinishReason::kError && first_error.ok()) {
          first_error = Annotate(out->error, absl::StrCat("prompt ", i));
        }
      }
    }
  }
  if (!first_error.ok()) return first_error;
  return outputs;
}

}  // namespace deepinfer::engine
