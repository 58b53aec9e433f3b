#include "engine/speculative/rejection_sampler.h"

#include <algorithm>

#include "common/check.h"

namespace deepinfer::engine {

std::vector<double> ResidualDistribution(std::span<const double> p, std::span<const double> q) {
  CHECK(p.size() == q.size());
  std::vector<double> r(p.size());
  double mass = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    r[i] = std::max(0.0, p[i] - q[i]);
    mass += r[i];
  }
  if (mass <= 0) return std::vector<double>(p.begin(), p.end());
  for (double& x : r) x /= mass;
  return r;
}

RejectionOutcome RejectionSample(std::span<const double> p, std::span<const double> q,
                                 int32_t draft, double u_accept, double u_residual) {
  CHECK(draft >= 0 && static_cast<size_t>(draft) < p.size() && q[draft] > 0);
  RejectionOutcome out;
  const double ratio = p[draft] / q[draft];
  if (u_accept < std::min(1.0, ratio)) {
    out.accepted = true;
    out.token = draft;
    return out;
  }
  const std::vector<double> r = ResidualDistribution(p, q);
  double cdf = 0;
  int32_t last = -1;
  for (size_t i = 0; i < r.size(); ++i) {
    if (r[i] <= 0) continue;
    last = static_cast<int32_t>(i);
    cdf += r[i];
    if (u_residual < cdf) {
      out.token = last;
      return out;
    }
  }
  out.token = last;  // rounding: u above the accumulated mass
  return out;
}

}  // namespace deepinfer::engine
