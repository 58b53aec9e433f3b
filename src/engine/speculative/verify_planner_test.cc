// E7 of ../shared/spec/speculative.md §7.3: the verification planner and allocator. Expected
// numbers are the spec's §5.7 worked example (computed there independently and brute-force
// checked), and brute force over every allocation here.
#include "engine/speculative/verify_planner.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace deepinfer::engine {
namespace {

// Spec §5.7: R = 4 decoding requests, k = 5, no prefill (N_nd = N_s = 4).
std::vector<PlannerRequest> Requests(const std::vector<std::vector<double>>& c) {
  std::vector<PlannerRequest> r;
  for (const auto& row : c) r.push_back({row, /*cap=*/5, /*samples=*/true, /*non_draft=*/1});
  return r;
}
const std::vector<std::vector<double>> kStale = {{.93, .90, .88, .85, .80},
                                                 {.80, .60, .50, .50, .50},
                                                 {.88, .85, .85, .80, .70},
                                                 {.80, .70, .60, .50, .50}};
const std::vector<std::vector<double>> kCurrent = {{.95, .92, .90, .85, .80},
                                                   {.60, .30, .50, .50, .50},
                                                   {.90, .90, .85, .80, .70},
                                                   {.75, .70, .60, .60, .50}};

// T(M) = 10.0 + 0.4·M ms ("busy" regime), as two points of a linear table.
CostTable Linear() { return CostTable::Create({{1, 10.4}, {100, 50.0}}).value(); }

// τ̄(B) of the spec's table: N_s + the top-B survivals.
double TauAt(const std::vector<PlannerRequest>& req, int b) {
  const std::vector<int> len = AllocateVerifyLengths(req, b);
  return ExpectedTokens(req, len);
}

TEST(VerifyPlannerTest, WorkedExampleBudgetFromStaleConfidences) {
  const CostTable t = Linear();
  const std::vector<PlannerRequest> stale = Requests(kStale);
  // The spec's Θ̄ table (rounded to 4 decimals there).
  struct Row {
    int b;
    int m;
    double tau, ms, theta;
  };
  for (const Row& row : {Row{0, 4, 4.0000, 11.6, 0.3448}, Row{8, 12, 10.3674, 14.8, 0.7005},
                         Row{12, 16, 12.5629, 16.4, 0.7660}, Row{14, 18, 13.3990, 17.2, 0.7790},
                         Row{15, 19, 13.7350, 17.6, 0.7804}, Row{16, 20, 13.9750, 18.0, 0.7764},
                         Row{20, 24, 14.4070, 19.6, 0.7351}}) {
    const double tau = TauAt(stale, row.b);
    EXPECT_NEAR(tau, row.tau, 6e-5) << "B=" << row.b;
    EXPECT_NEAR(t.StepMs(row.m), row.ms, 1e-9) << "B=" << row.b;
    EXPECT_NEAR(tau / t.StepMs(row.m), row.theta, 6e-5) << "B=" << row.b;
  }
  const BudgetPlan plan = PlanVerifyBudget(stale, &t);
  EXPECT_EQ(plan.budget, 15);
  EXPECT_EQ(plan.target_tokens, 19);
  EXPECT_EQ(plan.candidates, 20);
  EXPECT_NEAR(plan.expected_tokens, 13.7350, 6e-5);
  EXPECT_NEAR(plan.step_ms, 17.6, 1e-9);
  EXPECT_NEAR(plan.theta, 0.7804, 6e-5);
  EXPECT_FALSE(plan.no_table);
  EXPECT_EQ(plan.neutral_rows, 0);
  // Placeholder split keeps the total (step 7).
  EXPECT_EQ(std::accumulate(plan.placeholder.begin(), plan.placeholder.end(), 0), 15);
}

TEST(VerifyPlannerTest, WorkedExampleSplitWithCurrentConfidences) {
  const CostTable t = Linear();
  const std::vector<PlannerRequest> current = Requests(kCurrent);
  const std::vector<int> len = AllocateVerifyLengths(current, 15);
  EXPECT_EQ(len, (std::vector<int>{5, 1, 5, 4}));
  EXPECT_NEAR(ExpectedTokens(current, len), 13.528, 1e-3);
  EXPECT_NEAR(ExpectedTokens(current, len) / t.StepMs(19), 0.7686, 6e-5);
  // Had the split used the stale survivals: [5, 2, 5, 3], τ = 13.519 under current confidences.
  const std::vector<int> stale_len = AllocateVerifyLengths(Requests(kStale), 15);
  EXPECT_EQ(stale_len, (std::vector<int>{5, 2, 5, 3}));
  EXPECT_NEAR(ExpectedTokens(current, stale_len), 13.519, 1e-3);
  // Comparisons under the same cost model.
  const std::vector<int> all(4, 5), four(4, 4), three(4, 3);
  EXPECT_NEAR(ExpectedTokens(current, all), 13.960, 1e-3);
  EXPECT_NEAR(ExpectedTokens(current, all) / t.StepMs(24), 0.7122, 6e-5);
  EXPECT_NEAR(ExpectedTokens(current, four), 12.9225, 6e-5);
  EXPECT_NEAR(ExpectedTokens(current, three), 11.4691, 6e-5);
}

TEST(VerifyPlannerTest, FlatTableVerifiesEverythingAndStaircaseNeedsTheGlobalArgmax) {
  const std::vector<PlannerRequest> stale = Requests(kStale);
  // Idle regime: flat shelf T = 12 ms for M <= 32.
  const CostTable flat = CostTable::Create({{32, 12.0}}, {}, 32).value();
  EXPECT_TRUE(flat.flat());
  EXPECT_EQ(PlanVerifyBudget(stale, &flat).budget, 20);
  // Staircase: 10.0 ms for M <= 8, 11.5 ms for 9 <= M <= 24.
  const CostTable stairs = CostTable::Create({{8, 10.0}, {24, 11.5}}, {}, 24).value();
  EXPECT_FALSE(stairs.flat());
  EXPECT_NEAR(TauAt(stale, 4) / stairs.StepMs(8), 0.7447, 6e-5);
  EXPECT_NEAR(TauAt(stale, 5), 8.2470, 6e-5);
  EXPECT_NEAR(stairs.StepMs(9), 11.5, 1e-12);
  const BudgetPlan plan = PlanVerifyBudget(stale, &stairs);
  EXPECT_EQ(plan.budget, 20);
  EXPECT_NEAR(plan.expected_tokens, 14.4070, 6e-5);
  EXPECT_NEAR(plan.theta, 1.2528, 6e-5);
  // The synchronous first-descent search (Algorithm 1) stops at B = 4.
  const std::vector<int> sync = PlanSyncGreedyStop(stale, &stairs);
  EXPECT_EQ(std::accumulate(sync.begin(), sync.end(), 0), 4);
  // No table at all: verify-all, flagged.
  const BudgetPlan none = PlanVerifyBudget(stale, nullptr);
  EXPECT_TRUE(none.no_table);
  EXPECT_EQ(none.budget, 20);
  EXPECT_EQ(PlanSyncGreedyStop(stale, nullptr), (std::vector<int>{5, 5, 5, 5}));
}

TEST(VerifyPlannerTest, TiesGoByPositionThenRequestAndNeutralRowsForNewRequests) {
  // Spec §5.7's stale order: .9300 (r0), .8800 (r2), .8370 (r0), .8000 (r1, tie with r3 broken by
  // request): the top 4 are r0 ×2, r2, r1.
  EXPECT_EQ(AllocateVerifyLengths(Requests(kStale), 4), (std::vector<int>{2, 1, 1, 0}));
  // Equal survivals everywhere (c = 1.0): earlier slots first, then lower request.
  std::vector<PlannerRequest> ones = Requests({{1, 1, 1}, {1, 1, 1}, {1, 1, 1}});
  for (auto& r : ones) r.cap = 3;
  EXPECT_EQ(AllocateVerifyLengths(ones, 4), (std::vector<int>{2, 1, 1}));
  EXPECT_EQ(AllocateVerifyLengths(ones, 7), (std::vector<int>{3, 2, 2}));
  // A request without a row (new, just prefilled): neutral confidences 1.0, so its whole block is
  // a candidate and ranks first.
  std::vector<PlannerRequest> mixed = Requests({{.5, .5, .5, .5, .5}, {}});
  const CostTable t = Linear();
  const BudgetPlan plan = PlanVerifyBudget(mixed, &t);
  EXPECT_EQ(plan.neutral_rows, 1);
  EXPECT_EQ(AllocateVerifyLengths(mixed, 5), (std::vector<int>{0, 5}));
  // Under T = 10 + 0.4 M each neutral draft (+1 token for +0.4 ms) pays: τ/T rises while the
  // marginal survival exceeds Θ·0.4; with 2 anchors the 5 neutral drafts and the first .5 pay.
  EXPECT_GE(plan.budget, 5);
}

TEST(VerifyPlannerTest, CapsAndBudgetLimits) {
  std::vector<PlannerRequest> req = Requests(kCurrent);
  req[0].cap = 2;
  req[1].cap = 0;
  req[2].cap = 5;
  req[3].cap = 1;
  EXPECT_EQ(AllocateVerifyLengths(req, 100), (std::vector<int>{2, 0, 5, 1}));
  EXPECT_EQ(AllocateVerifyLengths(req, 0), (std::vector<int>{0, 0, 0, 0}));
  const CostTable flat = CostTable::Create({{64, 1.0}}).value();
  BudgetOptions o;
  o.max_total_drafts = 3;
  const BudgetPlan plan = PlanVerifyBudget(req, &flat, o);
  EXPECT_EQ(plan.candidates, 3);
  EXPECT_EQ(plan.budget, 3);
  for (size_t r = 0; r < req.size(); ++r) EXPECT_LE(plan.placeholder[r], req[r].cap);
}

// All length vectors with ℓ_r <= cap_r.
void ForEachLengths(const std::vector<PlannerRequest>& req,
                    const std::function<void(const std::vector<int>&)>& fn) {
  std::vector<int> len(req.size(), 0);
  while (true) {
    fn(len);
    size_t i = 0;
    while (i < len.size() && len[i] == req[i].cap) len[i++] = 0;
    if (i == len.size()) return;
    ++len[i];
  }
}

TEST(VerifyPlannerTest, BruteForceOptimality) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0, 1);
  for (int trial = 0; trial < 400; ++trial) {
    const int r_count = 1 + trial % 4;
    const int k = 1 + (trial / 4) % 5;
    std::vector<PlannerRequest> req(r_count);
    int cap_sum = 0;
    for (auto& q : req) {
      q.cap = static_cast<int>(rng() % (k + 1));
      cap_sum += q.cap;
      for (int j = 0; j < k; ++j) {
        // Some exact ties and certainties to exercise the tie-break.
        const double x = u(rng);
        q.confidence.push_back(x < 0.15 ? 1.0 : x < 0.25 ? 0.5 : x);
      }
      if (rng() % 7 == 0) q.confidence.clear();  // a neutral row
    }
    // Allocator: for every budget, the best Σa among all allocations of that size, caps kept.
    for (int b = 0; b <= cap_sum + 1; ++b) {
      const std::vector<int> len = AllocateVerifyLengths(req, b);
      int total = 0;
      for (int r = 0; r < r_count; ++r) {
        EXPECT_GE(len[r], 0);
        EXPECT_LE(len[r], req[r].cap);
        total += len[r];
      }
      ASSERT_EQ(total, std::min(b, cap_sum));
      const double got = ExpectedTokens(req, len);
      double best = -1;
      ForEachLengths(req, [&](const std::vector<int>& l) {
        if (std::accumulate(l.begin(), l.end(), 0) == total) {
          best = std::max(best, ExpectedTokens(req, l));
        }
      });
      EXPECT_NEAR(got, best, 1e-12) << "trial " << trial << " b=" << b;
    }
    // Planner: Θ̄(B*) is the best τ/T over every allocation, under a random monotone table.
    std::vector<CostTable::Point> pts;
    double ms = 1 + 5 * u(rng);
    for (int m = 1; m <= 32; m += 1 + static_cast<int>(rng() % 4)) {
      pts.push_back({m, ms});
      ms += (u(rng) < 0.3 ? 0.0 : u(rng));
    }
    const CostTable t =
        CostTable::Create(pts, {{1, u(rng)}, {4, 1 + u(rng)}}, static_cast<int>(rng() % 20))
            .value();
    const BudgetPlan plan = PlanVerifyBudget(req, &t);
    double best = -1;
    int best_b = 0;
    ForEachLengths(req, [&](const std::vector<int>& l) {
      const int b = std::accumulate(l.begin(), l.end(), 0);
      const double theta = ExpectedTokens(req, l) / t.StepMs(r_count + b, r_count);
      if (theta > best + 1e-12 || (theta > best - 1e-12 && b < best_b)) {
        best = theta;
        best_b = b;
      }
    });
    EXPECT_NEAR(plan.theta, best, 1e-12) << "trial " << trial;
    EXPECT_EQ(plan.budget, best_b) << "trial " << trial << " (ties go to the smaller B)";
    // The sync mode never beats the global argmax and never exceeds the caps.
    const std::vector<int> sync = PlanSyncGreedyStop(req, &t);
    const int sb = std::accumulate(sync.begin(), sync.end(), 0);
    EXPECT_LE(ExpectedTokens(req, sync) / t.StepMs(r_count + sb, r_count), best + 1e-12);
    for (int r = 0; r < r_count; ++r) EXPECT_LE(sync[r], req[r].cap);
  }
}

TEST(CostTableTest, StepFunctionInsideCapturedSizesInterpolationAboveMonotone) {
  const CostTable t =
      CostTable::Create({{16, 12}, {8, 10}, {32, 20}, {64, 30}}, {{1, 0.5}, {9, 4.5}}, 32).value();
  EXPECT_DOUBLE_EQ(t.StepMs(1), 10);  // below the first point
  EXPECT_DOUBLE_EQ(t.StepMs(8), 10);
  EXPECT_DOUBLE_EQ(t.StepMs(9), 12);  // padded up to 16: no interpolation inside the bucket
  EXPECT_DOUBLE_EQ(t.StepMs(17), 20);
  EXPECT_DOUBLE_EQ(t.StepMs(48), 25);           // above the captured sizes: linear
  EXPECT_DOUBLE_EQ(t.StepMs(96), 40);           // past the last point: the last slope
  EXPECT_DOUBLE_EQ(t.StepMs(48, 5), 25 + 2.5);  // + batch curve at R = 5 (linear there)
  EXPECT_DOUBLE_EQ(t.StepMs(48, 20), 25 + 10);
  // Running max: a noisy dip does not make more tokens look cheaper.
  const CostTable noisy = CostTable::Create({{1, 5}, {2, 4}, {3, 6}}).value();
  EXPECT_DOUBLE_EQ(noisy.StepMs(2), 5);
  EXPECT_DOUBLE_EQ(noisy.StepMs(3), 6);
}

TEST(CostTableTest, JsonRoundTripAndErrors) {
  const CostTable t = CostTable::Create({{1, 10.4}, {24, 19.6}}, {{4, 1.5}}, 8).value();
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("cost_table_" + std::to_string(getpid()) + ".json"))
                               .string();
  ASSERT_TRUE(t.Save(path).ok());
  const absl::StatusOr<CostTable> back = CostTable::Load(path);
  std::filesystem::remove(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->max_captured(), 8);
  ASSERT_EQ(back->verify_points().size(), 2u);
  EXPECT_DOUBLE_EQ(back->StepMs(12, 4), t.StepMs(12, 4));
  const absl::StatusOr<CostTable> parsed =
      CostTable::FromJson(R"({"verify": [{"tokens": 4, "ms": 2.5}]})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_DOUBLE_EQ(parsed->StepMs(100), 2.5);
  for (const char* bad :
       {"[1, 2]", "{}", R"({"verify": []})", R"({"verify": [{"tokens": 4}]})",
        R"({"verify": [{"tokens": 0, "ms": 1}]})", R"({"verify": [{"tokens": 2, "ms": -1}]})",
        R"({"verify": [{"tokens": 2, "ms": 1}, {"tokens": 2, "ms": 3}]})", "not json"}) {
    EXPECT_EQ(CostTable::FromJson(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(CostTable::Load("/nonexistent/cost.json").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace deepinfer::engine
