#include "cluster/chunk.h"

#include <gtest/gtest.h>

#include "cluster/rng.h"

namespace deepinfer::cluster {
namespace {

// The illustrative coefficients of cluster.md §2.5 "Worked numbers", converted from µs to ns.
CostModel SpecModel() { return CostModel{0.1, 0.2, 30'000, 200'000, 3'000'000}; }

TEST(ChunkTest, WorkedExampleShortBucket) {  // §2.5 example 1
  const CostModel m = SpecModel();
  // Rank budgets: seven at 400 ms, one at 340 ms (overrun debt 60 ms) -> group B = 340 ms.
  std::vector<double> proposals(7, ProposeBudget(400e6, -1, 0));
  proposals.push_back(ProposeBudget(400e6, -1, 60e6));
  const double b = GroupBudget(proposals);
  EXPECT_DOUBLE_EQ(b, 340e6);
  // R1: L = 12,000, hit 8,192 -> c = 8,192, 3,808 left; R2: L = 15,000, no hit.
  StepPlan p = PackStep(m, {{1, 8192, 3808}, {2, 0, 15000}}, b);
  ASSERT_EQ(p.chunks.size(), 2u);
  EXPECT_EQ(p.chunks[0].q, 3808);
  EXPECT_NEAR(p.chunks[0].cost_ns / 1e3, 122'129, 1.0);
  EXPECT_EQ(p.chunks[1].q, 6912);  // q* = 6,992 rounded down to a multiple of 128
  EXPECT_NEAR(p.chunks[1].cost_ns / 1e3, 212'338, 1.0);
  EXPECT_EQ(p.tokens, 10720);
  EXPECT_LE(p.predicted_ns, 340e6);
  EXPECT_NEAR(p.predicted_ns / 1e6, 337.5, 0.05);
}

TEST(ChunkTest, WorkedExampleLongBucket) {  // §2.5 example 2: c = 393,216, cap 3.0 s
  const CostModel m = SpecModel();
  const int64_t q = SolveChunk(m, 393216, 3e9 - m.step_ns, {1 << 30, 32768, 128});
  EXPECT_EQ(q, 26880);
  EXPECT_NEAR(m.Cost(q, 393216) / 1e9, 2.993, 0.0005);
}

TEST(ChunkTest, TokenCapBinds) {  // §2.5 example 3: b3, cap 1.5 s, 100K prompt, no hit
  const CostModel m = SpecModel();
  // The time budget alone allows 43,566 tokens (no rounding: remaining 43,566 ends the "prompt").
  EXPECT_EQ(SolveChunk(m, 0, 1.5e9 - m.step_ns, {43566, 1 << 20, 1}), 43566);
  StepPlan p = PackStep(m, {{1, 0, 100000}}, 1.5e9);
  ASSERT_EQ(p.chunks.size(), 1u);
  EXPECT_EQ(p.chunks[0].q, 32768);
  EXPECT_NEAR(p.chunks[0].cost_ns / 1e9, 1.091, 0.0005);
}

TEST(ChunkTest, TinyRemainingBudget) {
  const CostModel m = SpecModel();
  // cost(128, 0) = 1,638.4 + 3,840,000 + 200,000 ns = 4.042 ms. A 4 ms budget fits nothing.
  EXPECT_EQ(SolveChunk(m, 0, 4.0e6, {15000, 32768, 128}), 0);
  EXPECT_EQ(SolveChunk(m, 0, 4.05e6, {15000, 32768, 128}), 128);
  // Budget below d: nothing, even for a 1-token remainder.
  EXPECT_EQ(SolveChunk(m, 0, 100e3, {1, 32768, 128}), 0);
  // Head-of-line progress: a budget smaller than D still schedules min(128, remaining).
  StepPlan p = PackStep(m, {{1, 0, 5000}, {2, 0, 100}}, 1e6);
  ASSERT_EQ(p.chunks.size(), 1u);
  EXPECT_EQ(p.chunks[0].q, 128);
  EXPECT_GT(p.predicted_ns, 1e6);  // overrun, charged next step (CHUNK-6)
  EXPECT_DOUBLE_EQ(ProposeBudget(400e6, -1, p.predicted_ns - 1e6), 400e6 - (p.predicted_ns - 1e6));
}

TEST(ChunkTest, FinishingChunkIsNotRounded) {
  const CostModel m = SpecModel();
  EXPECT_EQ(SolveChunk(m, 0, 1e9, {1000, 32768, 128}), 1000);
  EXPECT_EQ(SolveChunk(m, 0, 1e9, {40000, 1000, 128}), 896);  // token room 1,000 -> 896
}

// CHUNK-5 property: cost(q*, c) <= B < cost(q* + 128, c) unless a clamp is active.
TEST(ChunkTest, SolverPropertyRandom) {
  Rng rng(42);
  for (int i = 0; i < 2000; ++i) {
    CostModel m{rng.Uniform() * 0.3, rng.Uniform() * 0.5, 1e3 + rng.Uniform() * 5e4,
                rng.Uniform() * 5e5, 0};
    const int64_t c = static_cast<int64_t>(rng.Below(1 << 20));
    const double b = rng.Uniform() * 4e9;
    const int64_t rem = 1 + static_cast<int64_t>(rng.Below(200000));
    const int64_t q = SolveChunk(m, c, b, {rem, 32768, 128});
    if (q > 0) EXPECT_LE(m.Cost(q, c), b);
    const bool clamped = q + 128 > std::min<int64_t>(rem, 32768);
    if (!clamped) EXPECT_GT(m.Cost(q + 128, c), b) << "i=" << i;
  }
}

TEST(ChunkTest, FitRecoversCoefficients) {  // CHUNK-2 grid, noiseless and with 2% noise
  const CostModel truth = SpecModel();
  std::vector<MeasuredStep> steps;
  Rng rng(7);
  for (int64_t q : {256, 512, 1024, 2048, 4096, 8192, 16384, 32768}) {
    for (int64_t c : {0, 8192, 32768, 131072, 524288}) {
      for (int n : {1, 2, 4}) {
        MeasuredStep s;
        double t = truth.step_ns;
        for (int k = 0; k < n; ++k) {
          s.seqs.push_back({q / n, c});
          t += truth.Cost(q / n, c);
        }
        s.time_ns = t;
        steps.push_back(s);
      }
    }
  }
  auto fit = FitCostModel(steps);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_NEAR(fit->k2, truth.k2, 1e-6);
  EXPECT_NEAR(fit->k1, truth.k1, 1e-6);
  EXPECT_NEAR(fit->k0, truth.k0, 1e-2);
  EXPECT_NEAR(fit->d, truth.d, 10);
  EXPECT_NEAR(fit->step_ns, truth.step_ns, 10);
  for (MeasuredStep& s : steps) s.time_ns *= 1.0 + 0.02 * (2 * rng.Uniform() - 1);
  fit = FitCostModel(steps);
  ASSERT_TRUE(fit.ok());
  EXPECT_LE(MeanAbsPercentError(*fit, steps), 0.02);
  EXPECT_GE(fit->k2, 0);
  EXPECT_GE(fit->d, 0);
}

TEST(ChunkTest, FitIsNonNegative) {
  // Times that an unconstrained fit would explain with a negative quadratic term.
  std::vector<MeasuredStep> steps;
  for (int64_t q : {1000, 2000, 3000, 4000}) {
    steps.push_back({{{q, 0}}, 1e6 + 100.0 * q - 0.001 * q * q});
  }
  auto fit = FitCostModel(steps);
  ASSERT_TRUE(fit.ok());
  EXPECT_GE(fit->k2, 0);
  EXPECT_GE(fit->k1, 0);
  EXPECT_GE(fit->k0, 0);
}

TEST(ChunkTest, FitRejectsBadInput) {
  EXPECT_EQ(FitCostModel({}).status().code(), absl::StatusCode::kInvalidArgument);
  std::vector<MeasuredStep> steps = {{{{100, 0}}, 1e6}, {{}, 2e6}};
  EXPECT_EQ(FitCostModel(steps).status().code(), absl::StatusCode::kInvalidArgument);
  steps = {{{{100, 0}}, 1e6}, {{{200, 0}}, -1}};
  EXPECT_EQ(FitCostModel(steps).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace deepinfer::cluster
