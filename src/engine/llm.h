// LLM: offline batch generation over an Engine (vLLM's `LLM.generate` shape). Submits every
// prompt at once, lets continuous batching run them together and collects complete outputs.
#ifndef DEEPINFER_ENGINE_LLM_H_
#define DEEPINFER_ENGINE_LLM_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/engine.h"

namespace deepinfer::engine {

// One sample's complete result.
struct SampleOutput {
  std::vector<int32_t> token_ids;
  std::vector<TokenLogprob> logprobs;  // parallel to token_ids when params.logprobs >= 0
  FinishReason finish = FinishReason::kLength;
  int64_t first_token_ns = 0;  // MonotonicNanos
  int64_t finish_ns = 0;
};

// One prompt's result: `samples` has params.n entries, by sample index.
struct GenerateOutput {
  std::vector<int32_t> prompt;
  std::vector<TokenLogprob> prompt_logprobs;
  std::vector<SampleOutput> samples;
  int64_t arrival_ns = 0;
};

class LLM {
 public:
  explicit LLM(std::unique_ptr<Engine> engine) : engine_(std::move(engine)) {}
  static absl::StatusOr<std::unique_ptr<LLM>> Create(std::unique_ptr<model::CausalLM> model,
                                                     const EngineConfig& config);

  // Generates for every prompt (token ids) with the same parameters; outputs in prompt order.
  // Errors: the first Submit error (nothing else is left running), or the error of a sample that
  // finished with FinishReason::kError.
  absl::StatusOr<std::vector<GenerateOutput>> Generate(
      const std::vector<std::vector<int32_t>>& prompts, const SamplingParams& params);
  // Same with per-prompt parameters (params.size() == prompts.size()).
  absl::StatusOr<std::vector<GenerateOutput>> Generate(
      const std::vector<std::vector<int32_t>>& prompts, const std::vector<SamplingParams>& params);

  Engine& engine() { return *engine_; }

 private:
  std::unique_ptr<Engine> engine_;
};

}  // namespace deepinfer::engine

#endif  // DEEPINFER_ENGINE_LLM_H_
