// Sampled (probabilistic) drafts and their lossless verification, one block at a time
// (../shared/spec/speculative.md §3.5, §4.2-4.3): a draft head that samples d_j from its own
// distribution q_j (DSpark with a temperature) keeps q_j (§4.3), and the verifier accepts d_j with
// probability min(1, p_{j-1}(d_j) / q_j(d_j)), emits a residual sample at the first rejection and
// the target's own sample after an accepted block. Unlike sample-and-compare (model_runner.cc),
// which is exact per position for any drafter and acceptance-optimal for greedy drafts, this
// accepts more of a sampled drafter's tokens but only preserves the distribution (seeded output
// differs from a non-speculative run), and variable-length admission must then follow the
// non-anticipation rule of §4.4.
//
// Not wired into the engine yet: the building block and its statistical check
// (sampled_drafts_test.cc) for the runner's DSpark path.
//
// Thread-safety: pure functions.
#ifndef DEEPINFER_ENGINE_SPECULATIVE_SAMPLED_DRAFTS_H_
#define DEEPINFER_ENGINE_SPECULATIVE_SAMPLED_DRAFTS_H_

#include <cstdint>
#include <span>
#include <vector>

namespace deepinfer::engine {

// The draft distribution of one slot: q = softmax(logits / temperature) over the vocabulary,
// computed in double and normalised (temperature > 0). q.size() == logits.size().
std::vector<double> DraftDistribution(std::span<const float> logits, float temperature);

// Inverse-CDF sample of a dense distribution at u in [0, 1): the first id (ascending) whose
// cumulative probability exceeds u (the last id with mass when rounding leaves u above it).
int32_t SampleDense(std::span<const double> probs, double u);

// Uniforms of one verified block, all in [0, 1) (e.g. Philox keyed by position and purpose).
struct BlockUniforms {
  std::vector<double> accept;    // [L]: acceptance test of draft j + 1
  std::vector<double> residual;  // [L]: the residual sample at a rejection of draft j + 1
  double bonus = 0;              // the target's sample after L accepted drafts
};

struct BlockOutcome {
  std::vector<int32_t> tokens;  // emitted: the accepted drafts, then one residual or bonus token
  int num_accepted = 0;
};

// Verifies drafts d_1..d_L (drawn from q rows q[0..L-1]) against the target's sampling
// distributions p[0..L] (row j: the distribution of the token after d_1..d_j, as the sampler
// would draw it — SamplingProbabilities). Every step emits num_accepted + 1 tokens whose joint
// law is the target's (spec §4.2). p: L + 1 dense rows, q: L dense rows of equal size, each
// summing to 1, q[j][d_{j+1}] > 0.
BlockOutcome VerifySampledBlock(std::span<const std::vector<double>> p,
                                std::span<const std::vector<double>> q,
                                std::span<const int32_t> drafts, const BlockUniforms& u);

}  // namespace deepinfer::engine

#endif  // DEEPINFER_ENGINE_SPECULATIVE_SAMPLED_DRAFTS_H_
