#include "engine/speculative/sampled_drafts.h"

#include <algorithm>
#include <cmath>

#include "common/check.h"
#include "engine/speculative/rejection_sampler.h"

namespace deepinfer::engine {

std::vector<double> DraftDistribution(std::span<const float> logits, float temperature) {
  CHECK(temperature > 0 && !logits.empty());
  const double mx = *std::max_element(logits.begin(), logits.end());
  std::vector<double> q(logits.size());
  double z = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    q[i] = std::exp((static_cast<double>(logits[i]) - mx) / temperature);
    z += q[i];
  }
  for (double& x : q) x /= z;
  return q;
}

int32_t SampleDense(std::span<const double> probs, double u) {
  double cdf = 0;
  int32_t last = -1;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] <= 0) continue;
    last = static_cast<int32_t>(i);
    cdf += probs[i];
    if (u < cdf) return last;
  }
  CHECK(last >= 0) << "a distribution without mass";
  return last;
}

BlockOutcome VerifySampledBlock(std::span<const std::vector<double>> p,
                                std::span<const std::vector<double>> q,
                                std::span<const int32_t> drafts, const BlockUniforms& u) {
  const size_t L = drafts.size();
  CHECK(p.size() == L + 1 && q.size() == L && u.accept.size() >= L && u.residual.size() >= L);
  BlockOutcome out;
  for (size_t j = 0; j < L; ++j) {
    const RejectionOutcome r = RejectionSample(p[j], q[j], drafts[j], u.accept[j], u.residual[j]);
    out.tokens.push_back(r.token);
    if (!r.accepted) return out;
    ++out.num_accepted;
  }
  out.tokens.push_back(SampleDense(p[L], u.bonus));
  return out;
}

}  // namespace deepinfer::engine
