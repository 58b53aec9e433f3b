// Sampler: turns one row of logits into a token (SamplingParams semantics, sampling_params.h).
//
// Randomness comes from Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as
// 1, 2, 3", SC'11) keyed by the request seed with counter (step, sample index): each sampled
// position draws one uniform number that depends only on (seed, sample_index, step), never on
// the batch, so a seeded request reproduces whatever else runs with it.
//
// Thread-safety: free functions, no shared state.
#ifndef DEEPINFER_ENGINE_SAMPLER_H_
#define DEEPINFER_ENGINE_SAMPLER_H_

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "engine/request.h"
#include "engine/sampling_params.h"

namespace deepinfer::engine {

// Philox4x32 with 10 rounds: the Random123 reference (counter of 4 words, key of 2 words).
std::array<uint32_t, 4> Philox4x32_10(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

// Uniform double in [0, 1) with 53 random bits for (seed, sample_index, step): Philox with
// key = (seed low, seed high), counter = (step low, step high, sample_index, 0).
double PhiloxUniform(uint64_t seed, uint32_t sample_index, uint64_t step);

// Everything about one sequence the sampler needs besides the logits.
struct SampleContext {
  const SamplingParams* params = nullptr;
  std::span<const int32_t> prompt;  // prompt token ids (repetition penalty)
  std::span<const int32_t> output;  // tokens generated so far by this sample; step = output.size()
  std::span<const int32_t> eos_token_ids;  // the model's EOS ids (masked before min_tokens)
  uint64_t seed = 0;
  int sample_index = 0;
};

// Raw log-probability of `token` under log_softmax(logits), its rank (1 = most likely; ties
// rank by lower id first) and the `top_n` most likely tokens (descending logprob, ties by id).
// logits: [vocab].
TokenLogprob ComputeLogprob(std::span<const float> logits, int32_t token, int top_n);

// Applies logit_bias, the min_tokens mask (EOS unless ignore_eos, and stop_token_ids, to -inf),
// repetition, presence and frequency penalties to `logits` in place. logits: [vocab].
void ApplyLogitProcessors(const SampleContext& ctx, std::span<float> logits);

// Chooses a token from processed logits: argmax (ties -> lowest id) when temperature == 0,
// else temperature -> top-k -> top-p -> min-p and inverse-CDF sampling with uniform `u` over the
// surviving tokens in descending probability order (ties by id). logits: [vocab].
// Cost O(vocab) without sorting the vocabulary: tokens are bucketed by distance below the best
// logit and only the buckets a cut lands in are sorted (sampler.cc, OrderedVocab). The
// probabilities are FP32 softmax values (kernels::Softmax), summed in double.
int32_t ChooseToken(const SamplingParams& params, std::span<const float> logits, double u);

// One surviving token of a sampling distribution.
struct TokenProb {
  int32_t token = -1;
  float prob = 0.0f;  // normalised over the surviving tokens
};

// The exact distribution ChooseToken samples from for processed `logits` [vocab]: the surviving
// tokens of temperature -> top-k -> top-p -> min-p with probabilities normalised over them, in
// sampling order (descending probability, ties by lower id); ChooseToken(params, logits, u) is
// the inverse CDF of this list at u. Temperature 0 (or top_k == 1) gives the argmax with
// probability 1. Cost O(vocab + kept·log(bucket size)): with top-p 1 and no top-k the list is
// the whole vocabulary. For speculative verification (rejection sampling).
void SamplingDistribution(const SamplingParams& params, std::span<const float> logits,
                          std::vector<TokenProb>* out);

// The same distribution as a dense row: probs [vocab] = the probability ChooseToken picks each
// token (0 for dropped tokens). O(vocab); probs.size() must equal logits.size().
void SamplingProbabilities(const SamplingParams& params, std::span<const float> logits,
                           std::span<float> probs);

struct SampleResult {
  int32_t token = -1;
  TokenLogprob logprob;  // filled when params.logprobs >= 0
};

// The full pipeline for one row: logprobs of the raw row (if asked), processors, choice with
// u = PhiloxUniform(seed, sample_index, output.size()). `scratch` is reused between calls.
SampleResult Sample(const SampleContext& ctx, std::span<const float> logits,
                    std::vector<float>* scratch);

}  // namespace deepinfer::engine

#endif  // DEEPINFER_ENGINE_SAMPLER_H_
