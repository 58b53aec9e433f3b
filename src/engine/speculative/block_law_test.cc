// E5 and E6 of ../shared/spec/speculative.md §7.3: the law of the tokens one speculative step
// commits, enumerated exactly in double precision (no Monte Carlo).
//
// Set-up: vocabulary 3; a prefix-dependent target (a lookup table keyed by the whole prefix, a
// tiny "model") and a Markov draft q(· | previous token) with a Markov confidence c(previous
// token) (the shape of DSpark's Markov head and confidence head, spec §3.5-3.6). One step drafts
// d_1..d_k from q, an admission rule picks ℓ per request, and each verified draft goes through
// RejectionSample (its branch measures found by bisection on the function itself, as in E4).
// Losslessness: extending the committed tokens with target samples to a fixed horizon k + 1
// gives exactly the target's joint law of k + 1 tokens.
//
// E5 repeats this with R = 2 requests under confidence-scheduled admission (a fixed budget K,
// the global top-K of current survivals, position-first tie-break: AllocateVerifyLengths) and the
// synchronous Algorithm 1; the product joint law stays exact. E6 shows the retrospective planner
// (budget from the current block's confidences) is biased: the paper's counterexample.
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <vector>

#include "engine/speculative/rejection_sampler.h"
#include "engine/speculative/verify_planner.h"
#include "gtest/gtest.h"

namespace deepinfer::engine {
namespace {

using Seq = std::vector<int32_t>;
using Dist = std::vector<double>;

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

// The problem: target p(· | prefix), draft q(· | previous token), confidence c(previous token).
struct Problem {
  int vocab = 3;
  std::function<Dist(const Seq&)> target;
  std::vector<Dist> q;       // [vocab]: draft law after token t
  std::vector<double> conf;  // [vocab]: confidence of the draft that follows token t
};

// A target whose rows are a deterministic function of the whole prefix, with some zero entries.
std::function<Dist(const Seq&)> TableTarget(int vocab, uint32_t salt) {
  auto table = std::make_shared<std::map<Seq, Dist>>();
  return [table, vocab, salt](const Seq& prefix) {
    auto it = table->find(prefix);
    if (it != table->end()) return it->second;
    uint32_t h = salt;
    for (int32_t t : prefix) h = h * 1000003u + static_cast<uint32_t>(t) + 7u;
    std::mt19937 rng(h);
    std::uniform_real_distribution<double> u(0, 1);
    Dist p(vocab);
    double s = 0;
    for (double& x : p) {
      x = u(rng) < 0.2 ? 0.0 : u(rng);
      s += x;
    }
    if (s == 0) p[0] = s = 1;
    for (double& x : p) x /= s;
    return table->emplace(prefix, p).first->second;
  };
}

Problem RandomProblem(uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  Problem pr;
  pr.target = TableTarget(pr.vocab, seed * 31u + 1u);
  pr.q.assign(pr.vocab, Dist(pr.vocab));
  for (Dist& row : pr.q) {
    double s = 0;
    for (double& x : row) {
      x = u(rng) < 0.25 ? 0.0 : u(rng);
      s += x;
    }
    if (s == 0) row[1] = s = 1;
    for (double& x : row) x /= s;
  }
  for (int t = 0; t < pr.vocab; ++t) pr.conf.push_back(u(rng) < 0.2 ? 1.0 : u(rng));
  return pr;
}

int Pow(int b, int e) {
  int r = 1;
  while (e-- > 0) r *= b;
  return r;
}

// Index of a length-h sequence in base vocab.
int Index(const Seq& s, int vocab) {
  int i = 0;
  for (int32_t t : s) i = i * vocab + t;
  return i;
}

// Adds `mass` × the target's law of the remaining tokens after `done` (committed past ctx) up to
// horizon h, into law[V^h].
void Extend(const Problem& pr, const Seq& ctx, Seq done, int h, double mass, Dist& law) {
  if (mass == 0) return;
  if (static_cast<int>(done.size()) == h) {
    law[Index(done, pr.vocab)] += mass;
    return;
  }
  Seq full = ctx;
  full.insert(full.end(), done.begin(), done.end());
  const Dist p = pr.target(full);
  for (int x = 0; x < pr.vocab; ++x) {
    Seq next = done;
    next.push_back(x);
    Extend(pr, ctx, next, h, mass * p[x], law);
  }
}

// Law over V^h of (committed tokens of one step, then target samples) for drafts d with ℓ of
// them verified, through RejectionSample's branches.
Dist StepLaw(const Problem& pr, const Seq& ctx, const Seq& d, int ell, int h) {
  Dist law(Pow(pr.vocab, h), 0.0);
  double mass = 1.0;  // probability that d_1..d_{j-1} were accepted
  Seq done;
  for (int j = 0; j < ell && mass > 0; ++j) {
    Seq full = ctx;
    full.insert(full.end(), done.begin(), done.end());
    const Dist p = pr.target(full);
    const Dist& q = pr.q[j == 0 ? ctx.back() : d[j - 1]];
    const int32_t dj = d[j];
    const double accept =
        Boundary([&](double u) { return RejectionSample(p, q, dj, u, 0.0).accepted; });
    if (accept < 1) {
      double prev = 0;
      for (int k = 0; k < pr.vocab; ++k) {
        const double b = Boundary(
            [&](double u) { return RejectionSample(p, q, dj, 0.999999999999, u).token <= k; });
        Seq out = done;
        out.push_back(k);
        Extend(pr, ctx, out, h, mass * (1 - accept) * (b - prev), law);
        prev = b;
      }
    }
    mass *= accept;
    done.push_back(dj);
  }
  // All ℓ accepted: the bonus token and the rest are target samples.
  Extend(pr, ctx, done, h, mass, law);
  return law;
}

// Every draft block of length k after ctx with its probability under q.
void ForEachDraft(const Problem& pr, const Seq& ctx, int k,
                  const std::function<void(const Seq&, double)>& fn, Seq d = {}, double m = 1) {
  if (static_cast<int>(d.size()) == k) {
    fn(d, m);
    return;
  }
  const Dist& q = pr.q[d.empty() ? ctx.back() : d.back()];
  for (int x = 0; x < pr.vocab; ++x) {
    if (q[x] == 0) continue;
    Seq next = d;
    next.push_back(x);
    ForEachDraft(pr, ctx, k, fn, next, m * q[x]);
  }
}

// Current confidences of a drafted block: c_j = conf(previous token) — known before d_j.
std::vector<double> Confidences(const Problem& pr, const Seq& ctx, const Seq& d) {
  std::vector<double> c;
  for (size_t j = 0; j < d.size(); ++j) c.push_back(pr.conf[j == 0 ? ctx.back() : d[j - 1]]);
  return c;
}

// An admission rule: ℓ per request from every request's drafted block.
using Admission =
    std::function<std::vector<int>(const std::vector<Seq>& ctx, const std::vector<Seq>& drafts)>;

// Joint law over (V^h)^R of R requests' committed tokens (each extended to horizon h = k + 1).
Dist JointLaw(const Problem& pr, const std::vector<Seq>& ctx, int k, const Admission& admit) {
  const int h = k + 1;
  const int n = Pow(pr.vocab, h);
  const int r_count = static_cast<int>(ctx.size());
  Dist joint(Pow(n, r_count), 0.0);
  std::map<std::pair<Seq, int>, Dist> memo[2];
  std::vector<Seq> drafts(r_count);
  std::function<void(int, double)> rec = [&](int r, double m) {
    if (r == r_count) {
      const std::vector<int> ell = admit(ctx, drafts);
      std::vector<const Dist*> laws;
      for (int i = 0; i < r_count; ++i) {
        auto key = std::make_pair(drafts[i], ell[i]);
        auto it = memo[i].find(key);
        if (it == memo[i].end()) {
          it = memo[i].emplace(key, StepLaw(pr, ctx[i], drafts[i], ell[i], h)).first;
        }
        laws.push_back(&it->second);
      }
      if (r_count == 1) {
        for (int a = 0; a < n; ++a) joint[a] += m * (*laws[0])[a];
      } else {
        for (int a = 0; a < n; ++a) {
          for (int b = 0; b < n; ++b) joint[a * n + b] += m * (*laws[0])[a] * (*laws[1])[b];
        }
      }
      return;
    }
    ForEachDraft(pr, ctx[r], k, [&](const Seq& d, double q) {
      drafts[r] = d;
      rec(r + 1, m * q);
    });
  };
  rec(0, 1.0);
  return joint;
}

// The target's joint law of the same horizon, product over requests.
Dist TargetJoint(const Problem& pr, const std::vector<Seq>& ctx, int k) {
  const int h = k + 1;
  const int n = Pow(pr.vocab, h);
  std::vector<Dist> each;
  for (const Seq& c : ctx) {
    Dist law(n, 0.0);
    Extend(pr, c, {}, h, 1.0, law);
    each.push_back(law);
  }
  if (each.size() == 1) return each[0];
  Dist joint(n * n);
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) joint[a * n + b] = each[0][a] * each[1][b];
  }
  return joint;
}

double MaxDiff(const Dist& a, const Dist& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

std::vector<PlannerRequest> Current(const Problem& pr, const std::vector<Seq>& ctx,
                                    const std::vector<Seq>& drafts) {
  std::vector<PlannerRequest> req;
  for (size_t r = 0; r < ctx.size(); ++r) {
    req.push_back(
        {Confidences(pr, ctx[r], drafts[r]), static_cast<int>(drafts[r].size()), true, 1});
  }
  return req;
}

TEST(BlockLawTest, OneRequestEveryVerifyLengthIsLossless) {
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    const Problem pr = RandomProblem(seed);
    for (int k = 2; k <= 3; ++k) {
      const std::vector<Seq> ctx = {{static_cast<int32_t>(seed % 3), 2}};
      const Dist target = TargetJoint(pr, ctx, k);
      // Fixed lengths 0..k, and a prefix-dependent length (stop after the first draft 0): any
      // rule that decides "verify d_j" from d_{<j} only.
      for (int ell = 0; ell <= k; ++ell) {
        const Dist law =
            JointLaw(pr, ctx, k, [ell](auto&, auto&) { return std::vector<int>{ell}; });
        EXPECT_LT(MaxDiff(law, target), 1e-12) << "seed " << seed << " k " << k << " ell " << ell;
      }
      const Dist law = JointLaw(pr, ctx, k, [k](auto&, const std::vector<Seq>& d) {
        int ell = 1;
        while (ell < k && d[0][ell - 1] != 0) ++ell;
        return std::vector<int>{ell};
      });
      EXPECT_LT(MaxDiff(law, target), 1e-12) << "seed " << seed << " k " << k << " prefix rule";
      // Control: a rule that looks at d_j itself ("verify d_1 only when it is token x", x with
      // 0 < q(x) < 1 and 0 < p(x) < 1, which moves P(first = x) to min(p, q) + (1 - q) p) is
      // biased, so the enumeration does see a leak.
      const Dist& q1 = pr.q[ctx[0].back()];
      const Dist p1 = pr.target(ctx[0]);
      for (int x = 0; x < pr.vocab; ++x) {
        if (!(q1[x] > 0 && q1[x] < 1 && p1[x] > 0 && p1[x] < 1)) continue;
        const Dist leak = JointLaw(pr, ctx, k, [x](auto&, const std::vector<Seq>& d) {
          return std::vector<int>{d[0][0] == x ? 1 : 0};
        });
        EXPECT_GT(MaxDiff(leak, target), 1e-6) << "seed " << seed << " k " << k << " leak " << x;
        break;
      }
    }
  }
}

TEST(BlockLawTest, TwoRequestsUnderConfidenceScheduledAdmissionAreLossless) {
  for (uint32_t seed = 11; seed <= 14; ++seed) {
    const Problem pr = RandomProblem(seed);
    for (int k = 2; k <= 3; ++k) {
      const std::vector<Seq> ctx = {{0, 1}, {2}};
      const Dist target = TargetJoint(pr, ctx, k);
      // Fixed budget K (from stale data, so independent of these drafts), split as the global
      // top-K of the current survivals (spec §5.2 steps 8-10).
      for (int budget = 0; budget <= 2 * k; ++budget) {
        const Dist law =
            JointLaw(pr, ctx, k, [&](const std::vector<Seq>& c, const std::vector<Seq>& d) {
              return AllocateVerifyLengths(Current(pr, c, d), budget);
            });
        EXPECT_LT(MaxDiff(law, target), 1e-12) << "seed " << seed << " k " << k << " K " << budget;
      }
      // The synchronous Algorithm 1 (early stop) on current confidences, under a busy linear
      // cost table where it trims.
      const CostTable t = CostTable::Create({{1, 1.0}, {16, 2.5}}).value();
      const Dist law =
          JointLaw(pr, ctx, k, [&](const std::vector<Seq>& c, const std::vector<Seq>& d) {
            return PlanSyncGreedyStop(Current(pr, c, d), &t);
          });
      EXPECT_LT(MaxDiff(law, target), 1e-12) << "seed " << seed << " k " << k << " sync";
    }
  }
}

// E6: R = 1, γ = 2, target (0.7, 0.3) and draft (0.5, 0.5) at every position, SPS(1, 2, 3) =
// (1.0, 0.5, 0.45), i.e. T(M) = 1 / SPS(M). Token A (0) makes c_2 = 0.9, token B (1) makes c_2 = 0
// (spec §4.4, paper App. A). c_1 = 0.9 (our choice; any c_1 in (0.644, 1] gives the paper's
// lengths ℓ = 2 after A and ℓ = 0 after B).
Problem Counterexample() {
  Problem pr;
  pr.vocab = 2;
  pr.target = [](const Seq&) { return Dist{0.7, 0.3}; };
  pr.q = {{0.5, 0.5}, {0.5, 0.5}};
  pr.conf = {0.9, 0.0};
  return pr;
}

std::vector<double> FirstTokenLaw(const Dist& joint_h3) {
  std::vector<double> first(2, 0.0);
  for (int i = 0; i < 8; ++i) first[i / 4] += joint_h3[i];
  return first;
}

TEST(BlockLawTest, RetrospectivePlannerIsBiasedTheSafeSplitIsNot) {
  const Problem pr = Counterexample();
  const CostTable sps = CostTable::Create({{1, 1.0}, {2, 1 / 0.5}, {3, 1 / 0.45}}).value();
  // The anchor is token A's predecessor context: c_1 = conf(A) = 0.9.
  const std::vector<Seq> ctx = {{0}};
  // Retrospective: the budget B* from the confidences of the block being verified (global
  // argmax), then the split.
  const Dist biased =
      JointLaw(pr, ctx, 2, [&](const std::vector<Seq>& c, const std::vector<Seq>& d) {
        const std::vector<PlannerRequest> cur = Current(pr, c, d);
        return AllocateVerifyLengths(cur, PlanVerifyBudget(cur, &sps).budget);
      });
  const std::vector<double> first = FirstTokenLaw(biased);
  EXPECT_NEAR(first[0], 0.85, 1e-12);
  EXPECT_NEAR(first[1], 0.15, 1e-12);
  // The lengths behind it: A -> 2, B -> 0.
  EXPECT_EQ(PlanVerifyBudget(Current(pr, ctx, {{0, 0}}), &sps).budget, 2);
  EXPECT_EQ(PlanVerifyBudget(Current(pr, ctx, {{1, 0}}), &sps).budget, 0);

  // Safe rule: the budget from the stale row (none yet: neutral 1.0, so independent of the
  // drafts), the split from the current confidences.
  const std::vector<PlannerRequest> stale = {{{}, 2, true, 1}};
  const int budget = PlanVerifyBudget(stale, &sps).budget;
  const Dist safe = JointLaw(pr, ctx, 2, [&](const std::vector<Seq>& c, const std::vector<Seq>& d) {
    return AllocateVerifyLengths(Current(pr, c, d), budget);
  });
  const std::vector<double> safe_first = FirstTokenLaw(safe);
  EXPECT_NEAR(safe_first[0], 0.7, 1e-12);
  EXPECT_NEAR(safe_first[1], 0.3, 1e-12);
  EXPECT_LT(MaxDiff(safe, TargetJoint(pr, ctx, 2)), 1e-12);
  // And the synchronous Algorithm 1 on the current confidences.
  const Dist sync = JointLaw(pr, ctx, 2, [&](const std::vector<Seq>& c, const std::vector<Seq>& d) {
    return PlanSyncGreedyStop(Current(pr, c, d), &sps);
  });
  EXPECT_LT(MaxDiff(sync, TargetJoint(pr, ctx, 2)), 1e-12);
}

}  // namespace
}  // namespace deepinfer::engine
