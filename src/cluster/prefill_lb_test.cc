#include "cluster/prefill_lb.h"

#include <gtest/gtest.h>

namespace deepinfer::cluster {
namespace {

TEST(BucketOfTest, BoundariesAreHalfOpen) {  // PLB-1
  EXPECT_EQ(BucketOf(0), 0);
  EXPECT_EQ(BucketOf(16383), 0);
  EXPECT_EQ(BucketOf(16384), 1);
  EXPECT_EQ(BucketOf(65535), 1);
  EXPECT_EQ(BucketOf(65536), 2);
  EXPECT_EQ(BucketOf(262143), 2);
  EXPECT_EQ(BucketOf(262144), 3);
  EXPECT_EQ(BucketOf(1 << 20), 3);
}

TEST(AllocateInstancesTest, SpecWorkedExample) {  // §2.3: r = 5, 3.5, 2, 1.5 over 16 -> 6,5,3,2
  const std::array<double, 4> r = {5.0, 3.5, 2.0, 1.5};
  BucketAllocation a = AllocateInstances(r, 16);
  EXPECT_EQ(a.instances, (std::array<int, 4>{6, 5, 3, 2}));
  EXPECT_NEAR(MaxLoad(r, a), 5.0 / 6.0, 1e-12);
}

// PLB-6 test: brute force over all allocations returns the same min-max load.
TEST(AllocateInstancesTest, GreedyMatchesBruteForce) {
  PrefillLbConfig cfg;
  cfg.max_share = {1, 1, 1, 1};
  const std::array<std::array<double, 4>, 5> cases = {{{5, 3.5, 2, 1.5},
                                                       {0.1, 7, 0.3, 2},
                                                       {1, 1, 1, 1},
                                                       {9, 0.5, 0.5, 0.25},
                                                       {0.3, 0.2, 4, 6}}};
  for (const auto& r : cases) {
    for (int n = 4; n <= 12; ++n) {
      double best = 1e300;
      for (int a = 1; a <= n; ++a)
        for (int b = 1; a + b <= n; ++b)
          for (int c = 1; a + b + c <= n - 1; ++c) {
            const int d = n - a - b - c;
            double m = std::max({r[0] / a, r[1] / b, r[2] / c, r[3] / d});
            best = std::min(best, m);
          }
      EXPECT_NEAR(MaxLoad(r, AllocateInstances(r, n, cfg)), best, 1e-12) << "n=" << n;
    }
  }
}

TEST(AllocateInstancesTest, MaxShareCapsLongBucket) {  // PLB-2/7: b4 <= 50%
  const std::array<double, 4> r = {0.1, 0.1, 0.1, 100};
  BucketAllocation a = AllocateInstances(r, 8);
  EXPECT_EQ(a.instances[3], 4);
  EXPECT_EQ(a.instances[0] + a.instances[1] + a.instances[2], 4);
}

TEST(AllocateInstancesTest, FewerInstancesThanBucketsMergesAdjacent) {  // PLB-3
  const std::array<double, 4> r = {5, 1, 0.5, 0.4};
  BucketAllocation a = AllocateInstances(r, 2);
  // Smallest adjacent pair (b3+b4 = 0.9) merges first, then (b2 + b34 = 1.9).
  EXPECT_EQ(a.instances, (std::array<int, 4>{1, 1, 0, 0}));
  EXPECT_EQ(a.served_by, (std::array<int, 4>{0, 1, 1, 1}));
}

TEST(ApplyHysteresisTest, SpecWorkedExampleMovesOne) {  // §2.3: 5,5,4,2 -> one b3 -> b1 move
  const std::array<double, 4> r = {5.0, 3.5, 2.0, 1.5};
  BucketAllocation cur;
  cur.instances = {5, 5, 4, 2};
  int moved = 0;
  BucketAllocation next = ApplyHysteresis(r, cur, AllocateInstances(r, 16), {}, &moved);
  EXPECT_EQ(moved, 1);
  EXPECT_EQ(next.instances, (std::array<int, 4>{6, 5, 3, 2}));
}

TEST(ApplyHysteresisTest, SmallGainKeepsCurrent) {
  // Current 6,5,3,2 is optimal for r; a target that differs with gain < 0.05 is not applied.
  const std::array<double, 4> r = {5.0, 3.5, 2.0, 1.5};
  BucketAllocation cur, tgt;
  cur.instances = {5, 5, 3, 3};  // max load 1.0 -> utilization > 1.0? no: 5/5 = 1.0 exactly
  tgt.instances = {6, 5, 3, 2};  // 0.833: gain 0.167 -> applied
  int moved = 0;
  ApplyHysteresis(r, cur, tgt, {}, &moved);
  EXPECT_EQ(moved, 1);
  // Gain 0.84 -> 0.80 = 0.04 < 0.05 and no bucket above 1.0: keep the current allocation.
  const std::array<double, 4> r1 = {4.2, 4.0, 2.0, 1.5};
  cur.instances = {5, 5, 4, 2};
  tgt.instances = {6, 5, 3, 2};
  BucketAllocation kept = ApplyHysteresis(r1, cur, tgt, {}, &moved);
  EXPECT_EQ(moved, 0);
  EXPECT_EQ(kept.instances, cur.instances);
  const std::array<double, 4> r2 = {4.9, 3.5, 2.0, 1.5};
  cur.instances = {6, 5, 3, 2};   // max(0.8167, 0.7, 0.667, 0.75) = 0.8167
  tgt.instances = {6, 4, 3, 3};   // max(0.8167, 0.875, ...) worse -> never applied
  ApplyHysteresis(r2, cur, tgt, {}, &moved);
  EXPECT_EQ(moved, 0);
}

TEST(ApplyHysteresisTest, AtMostTwoMovesPerRound) {  // PLB-8
  const std::array<double, 4> r = {10, 0.1, 0.1, 0.1};
  BucketAllocation cur;
  cur.instances = {1, 5, 5, 5};
  int moved = 0;
  BucketAllocation next = ApplyHysteresis(r, cur, AllocateInstances(r, 16), {}, &moved);
  EXPECT_EQ(moved, 2);
  EXPECT_EQ(next.instances[0], 3);
}

TEST(BucketDemandTrackerTest, DemandAndSmoothing) {  // PLB-5
  PrefillLbConfig cfg;
  BucketDemandTracker t(cfg);
  // Round 1: b0 admitted 240 rank-s, 60 rank-s still queued -> D = 240 + 30 = 270 rank-s.
  t.Admit(0, 240'000'000'000);
  auto r = t.EndRound({60'000'000'000, 0, 0, 0}, 8);
  EXPECT_NEAR(r[0], 270.0 / (30.0 * 8), 1e-12);
  // Round 2: nothing admitted, nothing queued -> D̂ = 0.5 * 0 + 0.5 * 270.
  r = t.EndRound({0, 0, 0, 0}, 8);
  EXPECT_NEAR(r[0], 135.0 / 240.0, 1e-12);
}

TEST(BucketQueueTest, PullByRemainingQuotaAtLeastOne) {  // PLB-12, quota exhaustion
  BucketQueue q;
  q.Push({1, 10, 300});
  q.Push({2, 20, 300});
  q.Push({3, 30, 500});
  auto got = q.Pull(700);  // 300 + 300 = 600 <= 700; + 500 > 700
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].id, 1u);
  EXPECT_EQ(got[1].id, 2u);
  EXPECT_EQ(q.queued_cost_ns(), 500);
  // A request far larger than the quota is still pulled (never starved by its size).
  auto big = q.Pull(1);
  ASSERT_EQ(big.size(), 1u);
  EXPECT_EQ(big[0].id, 3u);
  EXPECT_TRUE(q.empty());
  EXPECT_TRUE(q.Pull(1000).empty());
}

TEST(BucketQueueTest, HugeRequestPulledWhenRankReachesHalfHorizon) {  // PLB-12 test clause
  const int64_t h = QuotaHorizonNs(3);
  EXPECT_EQ(h, 6'000'000'000);
  BucketQueue q;
  q.Push({7, 0, 100 * h});
  const int64_t backlog = h / 2;  // exactly half left
  const int64_t rem = RemainingQuota(h, backlog);
  ASSERT_TRUE(ShouldPull(rem, h));
  EXPECT_FALSE(ShouldPull(RemainingQuota(h, backlog + 1), h));
  EXPECT_EQ(q.Pull(rem).size(), 1u);
}

TEST(PullOrderTest, LargerQuotaFirstThenLowerRank) {
  auto o = OrderPulls({{3, 100}, {1, 500}, {2, 500}, {0, 50}});
  ASSERT_EQ(o.size(), 4u);
  EXPECT_EQ(o[0].rank, 1);
  EXPECT_EQ(o[1].rank, 2);
  EXPECT_EQ(o[2].rank, 3);
  EXPECT_EQ(o[3].rank, 0);
  EXPECT_EQ(PickEntrypoint({-1, 50, 20, 20}), 2);
  EXPECT_EQ(PickEntrypoint({-1, -1}), -1);
}

TEST(BucketOverloadedTest, ChatAndAgentLimits) {  // PLB-15
  // 8 ranks, 480 rank-s queued -> 60 s per rank: at the chat limit, not above.
  EXPECT_FALSE(BucketOverloaded(480'000'000'000, 8, false));
  EXPECT_TRUE(BucketOverloaded(480'000'000'008, 8, false));
  EXPECT_FALSE(BucketOverloaded(480'000'000'008, 8, true));
}

}  // namespace
}  // namespace deepinfer::cluster
