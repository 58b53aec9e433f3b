#include "engine/speculative/verify_planner.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/status.h"
#include "nlohmann/json.hpp"

namespace deepinfer::engine {
namespace {

using json = nlohmann::json;

absl::Status SortAndCheck(std::vector<CostTable::Point>& pts, const char* what, bool positive) {
  std::sort(pts.begin(), pts.end(),
            [](const CostTable::Point& a, const CostTable::Point& b) { return a.x < b.x; });
  for (size_t i = 0; i < pts.size(); ++i) {
    if (pts[i].x < 1) {
      return absl::InvalidArgumentError(absl::StrCat(what, " point x=", pts[i].x, " is < 1"));
    }
    if (i > 0 && pts[i].x == pts[i - 1].x) {
      return absl::InvalidArgumentError(absl::StrCat(what, " point x=", pts[i].x, " repeated"));
    }
    if (!std::isfinite(pts[i].ms) || pts[i].ms < 0 || (positive && pts[i].ms == 0)) {
      return absl::InvalidArgumentError(absl::StrCat(what, " point x=", pts[i].x, " has time ",
                                                     pts[i].ms, positive ? " (must be > 0)" : ""));
    }
  }
  // Running max: more tokens never look cheaper (timing noise would otherwise reward them).
  for (size_t i = 1; i < pts.size(); ++i) pts[i].ms = std::max(pts[i].ms, pts[i - 1].ms);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<CostTable::Point>> ParsePoints(const json& arr, const char* field,
                                                          const char* key) {
  if (!arr.is_array()) {
    return absl::InvalidArgumentError(absl::StrCat("cost table: \"", field, "\" is not an array"));
  }
  std::vector<CostTable::Point> pts;
  for (const json& e : arr) {
    auto x = e.is_object() ? e.find(key) : e.end();
    auto ms = e.is_object() ? e.find("ms") : e.end();
    if (!e.is_object() || x == e.end() || ms == e.end() || !x->is_number_integer() ||
        !ms->is_number()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cost table: every \"", field, "\" entry needs integer \"", key, "\" and number \"ms\""));
    }
    pts.push_back({x->get<int>(), ms->get<double>()});
  }
  return pts;
}

// A candidate slot (r, j) with its survival; ordered by (−a, j, r) (spec §5.2 step 9).
struct Candidate {
  double a;
  int j;
  int r;
};

bool Before(const Candidate& x, const Candidate& y) {
  return std::make_tuple(-x.a, x.j, x.r) < std::make_tuple(-y.a, y.j, y.r);
}

std::vector<Candidate> SortedCandidates(std::span<const PlannerRequest> requests) {
  std::vector<Candidate> c;
  for (int r = 0; r < static_cast<int>(requests.size()); ++r) {
    const PlannerRequest& q = requests[r];
    double a = 1.0;
    for (int j = 1; j <= q.cap; ++j) {
      const double cj = j <= static_cast<int>(q.confidence.size()) ? q.confidence[j - 1] : 1.0;
      a *= std::clamp(std::isnan(cj) ? 0.0 : cj, 0.0, 1.0);
      c.push_back({a, j, r});
    }
  }
  std::sort(c.begin(), c.end(), Before);
  return c;
}

struct StepTotals {
  double bias_ms = 0;
  int non_draft = 0;
  int samples = 0;
  int requests = 0;
  int cap = 0;
};

StepTotals Totals(std::span<const PlannerRequest> requests, const BudgetOptions& o) {
  StepTotals t;
  t.non_draft = o.extra_non_draft_tokens;
  t.samples = o.extra_samples;
  t.requests = o.extra_requests;
  t.bias_ms = std::max(0.0, o.bias_ms);
  for (const PlannerRequest& q : requests) {
    t.non_draft += q.non_draft_tokens;
    t.samples += q.samples ? 1 : 0;
    t.requests += 1;
    t.cap += std::max(q.cap, 0);
  }
  return t;
}

}  // namespace

absl::StatusOr<CostTable> CostTable::Create(std::vector<Point> verify, std::vector<Point> batch,
                                            int max_captured) {
  if (verify.empty()) return absl::InvalidArgumentError("cost table: no verify points");
  RETURN_IF_ERROR(SortAndCheck(verify, "cost table verify", /*positive=*/true));
  RETURN_IF_ERROR(SortAndCheck(batch, "cost table batch", /*positive=*/false));
  if (max_captured < 0) {
    return absl::InvalidArgumentError("cost table: max_captured_tokens < 0");
  }
  CostTable t;
  t.verify_ = std::move(verify);
  t.batch_ = std::move(batch);
  t.max_captured_ = max_captured;
  return t;
}

absl::StatusOr<CostTable> CostTable::FromJson(std::string_view text) {
  const json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("cost table: not a JSON object");
  }
  auto v = j.find("verify");
  if (v == j.end()) return absl::InvalidArgumentError("cost table: missing \"verify\"");
  ASSIGN_OR_RETURN(std::vector<Point> verify, ParsePoints(*v, "verify", "tokens"));
  std::vector<Point> batch;
  if (auto b = j.find("batch"); b != j.end()) {
    ASSIGN_OR_RETURN(batch, ParsePoints(*b, "batch", "requests"));
  }
  int max_captured = 0;
  if (auto m = j.find("max_captured_tokens"); m != j.end()) {
    if (!m->is_number_integer()) {
      return absl::InvalidArgumentError("cost table: \"max_captured_tokens\" is not an integer");
    }
    max_captured = m->get<int>();
  }
  return Create(std::move(verify), std::move(batch), max_captured);
}

std::string CostTable::ToJson() const {
  json j = json::object();
  j["verify"] = json::array();
  for (const Point& p : verify_) j["verify"].push_back({{"tokens", p.x}, {"ms", p.ms}});
  j["batch"] = json::array();
  for (const Point& p : batch_) j["batch"].push_back({{"requests", p.x}, {"ms", p.ms}});
  j["max_captured_tokens"] = max_captured_;
  return j.dump(1);
}

absl::StatusOr<CostTable> CostTable::Load(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  absl::StatusOr<CostTable> t = FromJson(text);
  if (!t.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", t.status().message()));
  return t;
}

absl::Status CostTable::Save(const std::string& path) const {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::NotFoundError(absl::StrCat("cannot open ", path, " for writing"));
  out << ToJson() << "\n";
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat("error writing ", path));
  return absl::OkStatus();
}

double CostTable::Lookup(const std::vector<Point>& pts, int x, int max_captured) {
  if (pts.empty()) return 0.0;
  if (x <= pts.front().x) return pts.front().ms;
  // First point at or above x.
  auto hi =
      std::lower_bound(pts.begin(), pts.end(), x, [](const Point& p, int v) { return p.x < v; });
  if (hi == pts.end()) {
    if (pts.size() < 2) return pts.back().ms;
    const Point& a = pts[pts.size() - 2];
    const Point& b = pts.back();
    return b.ms + (b.ms - a.ms) / (b.x - a.x) * (x - b.x);
  }
  // Inside the captured range execution pads x up to the next size: a step, not a ramp.
  if (x <= max_captured || hi->x == x) return hi->ms;
  const Point& a = *(hi - 1);
  const Point& b = *hi;
  return a.ms + (b.ms - a.ms) * (x - a.x) / (b.x - a.x);
}

double CostTable::StepMs(int m, int r) const {
  return Lookup(verify_, m, max_captured_) + (r > 0 ? Lookup(batch_, r, 0) : 0.0);
}

bool CostTable::flat() const { return verify_.front().ms == verify_.back().ms; }

std::vector<double> Survivals(std::span<const double> confidence) {
  std::vector<double> a;
  a.reserve(confidence.size());
  double s = 1.0;
  for (double c : confidence) {
    s *= std::clamp(std::isnan(c) ? 0.0 : c, 0.0, 1.0);
    a.push_back(s);
  }
  return a;
}

BudgetPlan PlanVerifyBudget(std::span<const PlannerRequest> requests, const CostTable* table,
                            const BudgetOptions& options) {
  const StepTotals t = Totals(requests, options);
  BudgetPlan plan;
  for (const PlannerRequest& q : requests) {
    if (static_cast<int>(q.confidence.size()) < q.cap) ++plan.neutral_rows;
  }
  const std::vector<Candidate> cands = SortedCandidates(requests);
  plan.candidates = static_cast<int>(cands.size());
  if (options.max_total_drafts >= 0) {
    plan.candidates = std::min(plan.candidates, options.max_total_drafts);
  }
  // τ̄(B) prefix sums over the sorted candidates.
  std::vector<double> tau(plan.candidates + 1, static_cast<double>(t.samples));
  for (int b = 1; b <= plan.candidates; ++b) tau[b] = tau[b - 1] + cands[b - 1].a;
  if (table == nullptr) {
    plan.no_table = true;
    plan.budget = plan.candidates;
  } else {
    double best = -1;
    for (int b = 0; b <= plan.candidates; ++b) {
      const double theta = tau[b] / (table->StepMs(t.non_draft + b, t.requests) + t.bias_ms);
      if (theta > best) {  // strict: ties stay with the smaller B
        best = theta;
        plan.budget = b;
      }
    }
  }
  plan.target_tokens = t.non_draft + plan.budget;
  plan.expected_tokens = tau[plan.budget];
  plan.step_ms = table != nullptr ? table->StepMs(plan.target_tokens, t.requests) + t.bias_ms : 0.0;
  plan.theta = plan.step_ms > 0 ? plan.expected_tokens / plan.step_ms : 0.0;
  // Placeholder split: round-robin over requests with room, in request order.
  plan.placeholder.assign(requests.size(), 0);
  int left = plan.budget;
  while (left > 0) {
    bool any = false;
    for (size_t r = 0; r < requests.size() && left > 0; ++r) {
      if (plan.placeholder[r] < requests[r].cap) {
        ++plan.placeholder[r];
        --left;
        any = true;
      }
    }
    if (!any) break;
  }
  return plan;
}

std::vector<int> AllocateVerifyLengths(std::span<const PlannerRequest> requests, int budget) {
  const std::vector<Candidate> cands = SortedCandidates(requests);
  std::vector<int> len(requests.size(), 0);
  const int n = std::min(std::max(budget, 0), static_cast<int>(cands.size()));
  for (int i = 0; i < n; ++i) ++len[cands[i].r];
  return len;
}

std::vector<int> PlanSyncGreedyStop(std::span<const PlannerRequest> requests,
                                    const CostTable* table, const BudgetOptions& options) {
  std::vector<int> len(requests.size(), 0);
  const std::vector<Candidate> cands = SortedCandidates(requests);
  int limit = static_cast<int>(cands.size());
  if (options.max_total_drafts >= 0) limit = std::min(limit, options.max_total_drafts);
  if (table == nullptr) {
    for (int i = 0; i < limit; ++i) ++len[cands[i].r];
    return len;
  }
  const StepTotals t = Totals(requests, options);
  double tau = t.samples;
  double best = tau / (table->StepMs(t.non_draft, t.requests) + t.bias_ms);
  for (int i = 0; i < limit; ++i) {
    const double next =
        (tau + cands[i].a) / (table->StepMs(t.non_draft + i + 1, t.requests) + t.bias_ms);
    if (!(next > best)) break;  // first non-improving candidate: stop (Algorithm 1)
    best = next;
    tau += cands[i].a;
    ++len[cands[i].r];
  }
  return len;
}

double ExpectedTokens(std::span<const PlannerRequest> requests, std::span<const int> lengths,
                      const BudgetOptions& options) {
  double tau = options.extra_samples;
  for (size_t r = 0; r < requests.size(); ++r) {
    tau += requests[r].samples ? 1 : 0;
    std::vector<double> c(requests[r].confidence);
    c.resize(std::max<size_t>(c.size(), static_cast<size_t>(lengths[r])), 1.0);
    const std::vector<double> a = Survivals(c);
    for (int j = 0; j < lengths[r]; ++j) tau += a[j];
  }
  return tau;
}

}  // namespace deepinfer::engine
