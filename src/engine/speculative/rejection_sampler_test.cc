// E4 of ../shared/spec/speculative.md §7.3: the rejection sampler's output law, enumerated from
// the algorithm's own branches in double precision (no Monte Carlo), equals the target p.
// RejectionSample is piecewise constant in each uniform, so the measure of each branch is found
// by bisection on the branch boundaries of the function itself (not from the textbook formula).
#include "engine/speculative/rejection_sampler.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace deepinfer::engine {
namespace {

// sup{u in [0,1) : pred(u)} for a predicate true on an initial interval [0, b).
template <typename Pred>
double Boundary(Pred pred) {
  double lo = 0, hi = 1;
  if (!pred(0.0)) return 0;
  for (int it = 0; it < 200; ++it) {
    const double mid = 0.5 * (lo + hi);
    (pred(mid) ? lo : hi) = mid;
  }
  return hi;
}

// P(emitted token = x) for every x: draft d ~ q, then the algorithm's branches.
std::vector<double> EmittedLaw(const std::vector<double>& p, const std::vector<double>& q) {
  const size_t v = p.size();
  std::vector<double> law(v, 0.0);
  for (size_t d = 0; d < v; ++d) {
    if (q[d] <= 0) continue;  // never drafted
    const int32_t dd = static_cast<int32_t>(d);
    const double accept =
        Boundary([&](double u) { return RejectionSample(p, q, dd, u, 0.0).accepted; });
    law[d] += q[d] * accept;
    // Rejection branch (u_accept = 1 - tiny is always a rejection when accept < 1): the measure
    // of u_residual giving each token, from the boundaries of "token <= k".
    if (accept >= 1) continue;
    double prev = 0;
    for (size_t k = 0; k < v; ++k) {
      const double b = Boundary([&](double u) {
        return RejectionSample(p, q, dd, 0.999999999999, u).token <= static_cast<int32_t>(k);
      });
      law[k] += q[d] * (1 - accept) * (b - prev);
      prev = b;
    }
  }
  return law;
}

std::vector<double> Random(std::mt19937& rng, size_t v, double zero_prob = 0) {
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<double> x(v);
  double s = 0;
  for (double& y : x) {
    y = u(rng) < zero_prob ? 0.0 : u(rng);
    s += y;
  }
  if (s == 0) x[0] = s = 1;
  for (double& y : x) y /= s;
  return x;
}

void ExpectLawIsP(const std::vector<double>& p, const std::vector<double>& q, const char* what) {
  const std::vector<double> law = EmittedLaw(p, q);
  for (size_t x = 0; x < p.size(); ++x) EXPECT_NEAR(law[x], p[x], 1e-12) << what << " x=" << x;
}

TEST(RejectionSamplerTest, EmittedLawEqualsTargetForRandomPairs) {
  std::mt19937 rng(2026);
  for (int trial = 0; trial < 60; ++trial) {
    const size_t v = 3 + trial % 6;  // vocabularies of 3..8
    ExpectLawIsP(Random(rng, v, trial % 3 == 0 ? 0.3 : 0), Random(rng, v, trial % 2 ? 0.3 : 0),
                 "random");
  }
}

TEST(RejectionSamplerTest, AdversarialPairs) {
  const std::vector<double> p = {0.5, 0.3, 0.2, 0.0};
  ExpectLawIsP(p, p, "p == q");
  ExpectLawIsP(p, {0.0, 0.0, 0.0, 1.0}, "disjoint supports");
  ExpectLawIsP(p, {0.0, 1.0, 0.0, 0.0}, "one-hot q");
  ExpectLawIsP(p, {0.6, 0.4, 0.0, 0.0}, "q = 0 where p > 0");
  ExpectLawIsP({1.0, 0.0, 0.0}, {0.2, 0.3, 0.5}, "one-hot p");
  // p == q: every draft accepted.
  for (int32_t d = 0; d < 3; ++d) EXPECT_TRUE(RejectionSample(p, p, d, 0.999, 0.5).accepted);
  // Residual of p == q is p itself (no division by zero).
  EXPECT_EQ(ResidualDistribution(p, p), p);
}

}  // namespace
}  // namespace deepinfer::engine
