// Lossless rejection sampling of a draft token (../shared/spec/speculative.md §4.2; Leviathan et
// al. 2023, arXiv 2211.17192), for drafters that sample from a distribution q of their own
// (probabilistic DSpark drafts). The engine's greedy drafters (n-gram, MTP argmax) use
// sample-and-compare instead (model_runner.cc), which is exact and acceptance-optimal for them;
// this is the building block for the others, tested by exact enumeration (E4).
//
// Thread-safety: pure functions.
#ifndef DEEPINFER_ENGINE_SPECULATIVE_REJECTION_SAMPLER_H_
#define DEEPINFER_ENGINE_SPECULATIVE_REJECTION_SAMPLER_H_

#include <cstdint>
#include <span>
#include <vector>

namespace deepinfer::engine {

struct RejectionOutcome {
  bool accepted = false;
  int32_t token = -1;  // the draft when accepted, else the residual sample
};

// normalize(max(p - q, 0)) over the vocabulary; p itself when that mass is 0 (only when p == q).
// p, q: dense distributions of equal size (each sums to 1).
std::vector<double> ResidualDistribution(std::span<const double> p, std::span<const double> q);

// One position: the draft `draft` was sampled from q (so q[draft] > 0). Accepts it iff
// u_accept < min(1, p[draft] / q[draft]); otherwise returns the inverse-CDF sample (ids in
// increasing order) of ResidualDistribution(p, q) at u_residual. u_* in [0, 1) (e.g. the
// sampler's Philox uniforms keyed by position and purpose). The emitted token is distributed
// exactly as p.
RejectionOutcome RejectionSample(std::span<const double> p, std::span<const double> q,
                                 int32_t draft, double u_accept, double u_residual);

}  // namespace deepinfer::engine

#endif  // DEEPINFER_ENGINE_SPECULATIVE_REJECTION_SAMPLER_H_
