// Scoring: per-position log-probabilities and perplexity of a token sequence (issue #13;
// llama.cpp's perplexity tool, vLLM's prompt_logprobs).
//
// Position p >= 1 is scored with the model's distribution after tokens [0, p): logprob[p] =
// log_softmax(logits(p-1))[tokens[p]]; position 0 has no score. Long sequences use the usual
// sliding-window protocol: windows of `context` tokens start every `stride` tokens, each window
// is a fresh forward from its first token, and only positions not scored by an earlier window are
// scored in it (so every position after the first is scored exactly once).
// nll = mean over scored positions of -logprob; ppl = exp(nll).
#ifndef DEEPINFER_ENGINE_SCORING_H_
#define DEEPINFER_ENGINE_SCORING_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "model/model.h"

namespace deepinfer::engine {

struct ScoreOptions {
  // Alternatives reported per position (0 = none), most likely first.
  int top_logprobs = 0;
  // Window length in tokens; 0 = the whole sequence (must fit the model's context).
  int64_t context = 0;
  // Window start advance in tokens; 0 = context (non-overlapping windows). 1 <= stride <= context.
  int64_t stride = 0;
  // Tokens per forward call inside a window (bounds the logits buffer: rows x vocab floats).
  int64_t chunk_tokens = 256;
  // Called after each window with (windows done, windows total).
  std::function<void(int64_t, int64_t)> progress;
};

struct ScoreResult {
  std::vector<int32_t> tokens;
  // [tokens.size()]: nullopt for position 0, else the log-probability of tokens[p].
  std::vector<std::optional<double>> token_logprobs;
  // [tokens.size()]: top alternatives (id, logprob), empty for position 0.
  std::vector<std::vector<std::pair<int32_t, double>>> top_logprobs;
  int64_t scored_tokens = 0;
  double nll = 0;  // mean negative log-likelihood (nats per token)
  double ppl = 0;  // exp(nll)
};

// Scores `tokens` with `model` (which must not be used concurrently). KV memory for one window
// is allocated here. Errors: InvalidArgument (fewer than 2 tokens, token out of vocabulary, bad
// context/stride), OutOfRange (window longer than the model's context), model errors.
absl::StatusOr<ScoreResult> ScoreTokens(model::CausalLM& model, std::span<const int32_t> tokens,
                                        const ScoreOptions& options);

// log_softmax of one row in double precision: out[i] = x[i] - log(sum_j exp(x[j])).
void LogSoftmax(std::span<const float> logits, std::vector<double>* out);

}  // namespace deepinfer::engine

#endif  // DEEPINFER_ENGINE_SCORING_H_
