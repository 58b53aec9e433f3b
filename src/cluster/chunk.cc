#include "cluster/chunk.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace deepinfer::cluster {

double CostModel::PrefillCost(int64_t tokens, int64_t c, int64_t chunk) const {
  CHECK_GT(chunk, 0);
  double total = 0;
  while (tokens > 0) {
    const int64_t q = std::min(tokens, chunk);
    total += Cost(q, c);
    c += q;
    tokens -= q;
  }
  return total;
}

namespace {

constexpr int kParams = 5;  // k2, k1, k0, d, D
using Row = std::array<double, kParams>;

Row Features(const MeasuredStep& s) {
  Row f{};
  for (const auto& q : s.seqs) {
    const double qd = static_cast<double>(q.q), cd = static_cast<double>(q.c);
    f[0] += qd * qd;
    f[1] += qd * cd;
    f[2] += qd;
    f[3] += 1.0;
  }
  f[4] = 1.0;
  return f;
}

// Least squares on the columns in `mask`, by the normal equations with column scaling and
// Gaussian elimination with partial pivoting. Returns false if singular.
bool SolveSubset(const std::vector<Row>& x, const std::vector<double>& y, unsigned mask,
                 Row& beta) {
  std::vector<int> cols;
  for (int j = 0; j < kParams; ++j) {
    if (mask & (1u << j)) cols.push_back(j);
  }
  const int m = static_cast<int>(cols.size());
  Row scale{};
  for (int j : cols) {
    double s = 0;
    for (const Row& r : x) s = std::max(s, std::fabs(r[j]));
    scale[j] = s > 0 ? s : 1.0;
  }
  std::vector<std::vector<double>> a(m, std::vector<double>(m + 1, 0.0));
  for (size_t i = 0; i < x.size(); ++i) {
    for (int p = 0; p < m; ++p) {
      const double xp = x[i][cols[p]] / scale[cols[p]];
      for (int q = 0; q < m; ++q) a[p][q] += xp * x[i][cols[q]] / scale[cols[q]];
      a[p][m] += xp * y[i];
    }
  }
  for (int p = 0; p < m; ++p) {
    int piv = p;
    for (int r = p + 1; r < m; ++r) {
      if (std::fabs(a[r][p]) > std::fabs(a[piv][p])) piv = r;
    }
    if (std::fabs(a[piv][p]) < 1e-12) return false;
    std::swap(a[p], a[piv]);
    for (int r = 0; r < m; ++r) {
      if (r == p) continue;
      const double f = a[r][p] / a[p][p];
      for (int q = p; q <= m; ++q) a[r][q] -= f * a[p][q];
    }
  }
  beta.fill(0.0);
  for (int p = 0; p < m; ++p) beta[cols[p]] = a[p][m] / a[p][p] / scale[cols[p]];
  return true;
}

}  // namespace

absl::StatusOr<CostModel> FitCostModel(const std::vector<MeasuredStep>& steps) {
  if (steps.size() < 2) {
    return absl::InvalidArgumentError("cost model fit: need at least 2 measured steps");
  }
  std::vector<Row> x;
  std::vector<double> y;
  for (size_t i = 0; i < steps.size(); ++i) {
    if (steps[i].seqs.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("cost model fit: step ", i, " has no sequence"));
    }
    if (!(steps[i].time_ns > 0) || !std::isfinite(steps[i].time_ns)) {
      return absl::InvalidArgumentError(
          absl::StrCat("cost model fit: step ", i, " time_ns must be positive and finite"));
    }
    x.push_back(Features(steps[i]));
    y.push_back(steps[i].time_ns);
  }
  Row best{};
  double best_rss = std::numeric_limits<double>::infinity();
  for (unsigned mask = 1; mask < (1u << kParams); ++mask) {
    Row beta;
    if (!SolveSubset(x, y, mask, beta)) continue;
    bool feasible = true;
    for (double b : beta) feasible = feasible && b >= 0;
    if (!feasible) continue;
    double rss = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      double pred = 0;
      for (int j = 0; j < kParams; ++j) pred += x[i][j] * beta[j];
      rss += (pred - y[i]) * (pred - y[i]);
    }
    // Prefer fewer parameters on (near-)ties so that unidentifiable terms stay 0.
    if (rss < best_rss * (1 - 1e-12)) best_rss = rss, best = beta;
  }
  if (!std::isfinite(best_rss)) {
    return absl::InvalidArgumentError("cost model fit: no non-negative solution (degenerate grid)");
  }
  return CostModel{best[0], best[1], best[2], best[3], best[4]};
}

double MeanAbsPercentError(const CostModel& model, const std::vector<MeasuredStep>& steps) {
  if (steps.empty()) return 0;
  double sum = 0;
  for (const MeasuredStep& s : steps) {
    double pred = model.step_ns;
    for (const auto& q : s.seqs) pred += model.Cost(q.q, q.c);
    sum += std::fabs(pred - s.time_ns) / s.time_ns;
  }
  return sum / static_cast<double>(steps.size());
}

int64_t SolveChunk(const CostModel& model, int64_t c, double budget_ns, const ChunkLimits& limits) {
  const int64_t cap = std::min(limits.remaining_tokens, limits.token_room);
  if (cap <= 0 || budget_ns < model.Cost(1, c)) return 0;
  const double beta = model.k1 * static_cast<double>(c) + model.k0;
  double qf;
  if (model.k2 > 0) {
    const double disc = beta * beta - 4.0 * model.k2 * (model.d - budget_ns);
    qf = (-beta + std::sqrt(std::max(0.0, disc))) / (2.0 * model.k2);
  } else if (beta > 0) {
    qf = (budget_ns - model.d) / beta;
  } else {
    qf = static_cast<double>(cap);  // free tokens: only the caps bind
  }
  int64_t q = static_cast<int64_t>(std::floor(std::min(qf, static_cast<double>(cap) + 1.0)));
  // Fix floating error (CHUNK-5).
  while (q > 0 && model.Cost(q, c) > budget_ns) --q;
  while (q < cap && model.Cost(q + 1, c) <= budget_ns) ++q;
  q = std::min(q, cap);
  if (q < limits.remaining_tokens && limits.align > 1) q -= q % limits.align;
  return q;
}

StepPlan PackStep(const CostModel& model, const std::vector<PrefillSeq>& fifo,
                  double group_budget_ns, int64_t token_budget, double fixed_ns) {
  StepPlan plan;
  double left = group_budget_ns - model.step_ns - fixed_ns;
  for (size_t i = 0; i < fifo.size(); ++i) {
    const PrefillSeq& s = fifo[i];
    if (s.remaining <= 0) continue;
    const int64_t room = token_budget - plan.tokens;
    if (room <= 0) break;
    const int64_t min_q = std::min<int64_t>({128, s.remaining, room});
    int64_t q = 0;
    if (model.Cost(min_q, s.computed) <= left) {
      q = SolveChunk(model, s.computed, left, {s.remaining, room, 128});
      if (q == 0) break;  // token room < 128 and not the prompt's end: keep chunks aligned
    } else if (plan.chunks.empty()) {
      q = min_q;  // head-of-line progress guarantee: overrun, charged next step (CHUNK-6)
    } else {
      break;
    }
    const double cost = model.Cost(q, s.computed);
    plan.chunks.push_back({s.id, q, s.computed, cost});
    plan.tokens += q;
    left -= cost;
  }
  plan.predicted_ns = model.step_ns + fixed_ns;
  for (const PlannedChunk& ch : plan.chunks) plan.predicted_ns += ch.cost_ns;
  return plan;
}

double ProposeBudget(double cap_ns, double head_deadline_ns, double overrun_debt_ns) {
  double b = std::min(cap_ns, cap_ns - std::max(0.0, overrun_debt_ns));
  if (head_deadline_ns >= 0) b = std::min(b, head_deadline_ns);
  return std::max(0.0, b);
}

double GroupBudget(const std::vector<double>& proposals) {
  CHECK(!proposals.empty());
  return *std::min_element(proposals.begin(), proposals.end());
}

}  // namespace deepinfer::cluster
