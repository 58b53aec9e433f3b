#include "cluster/eplb.h"

#include <gtest/gtest.h>

namespace deepinfer::cluster {
namespace {

// Golden G1 (expert-parallel.md §2.2): the DeepSeek EPLB README example, hierarchical policy.
TEST(EplbTest, GoldenG1Hierarchical) {
  const std::vector<std::vector<int64_t>> weight = {
      {90, 132, 40, 61, 104, 165, 39, 4, 73, 56, 183, 86},
      {20, 107, 104, 64, 19, 197, 187, 157, 172, 86, 16, 27}};
  const std::vector<std::vector<int>> expected = {
      {5, 6, 5, 7, 8, 4, 3, 4, 10, 9, 10, 2, 0, 1, 11, 1},
      {7, 10, 6, 8, 6, 11, 8, 9, 2, 4, 5, 1, 5, 0, 3, 1}};
  for (int l = 0; l < 2; ++l) {
    auto p = RebalanceExperts(weight[l], 16, 4, 2, 8);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->phy2log, expected[l]) << "layer " << l;
    // Every expert has >= 1 slot and log2phy inverts phy2log.
    for (int e = 0; e < 12; ++e) {
      ASSERT_GE(p->logcnt[e], 1);
      for (int j = 0; j < p->logcnt[e]; ++j) EXPECT_EQ(p->phy2log[p->log2phy[e][j]], e);
    }
  }
}

// Golden G2 (expert-parallel.md §2.3): 16 experts, 4 ranks, 1 redundant per rank, global policy.
TEST(EplbTest, GoldenG2Global) {
  const std::vector<int64_t> w = {60, 35, 120, 400, 25, 85, 15, 190,
                                  50, 30, 260, 70,  40, 150, 20, 100};
  const int s = SlotsPerRank(16, 4, 1);
  EXPECT_EQ(s, 5);
  // Without EPLB: contiguous 4 per rank -> 615 / 315 / 410 / 310, moe_lb 1.491.
  const EplbPlacement flat = ContiguousPlacement(16, 4, 4);
  const auto flat_loads = PredictedRankLoads(flat, w, 4);
  EXPECT_EQ(flat_loads, (std::vector<double>{615, 315, 410, 310}));
  MoeLbAccumulator no_eplb;
  no_eplb.Add(flat_loads);
  EXPECT_NEAR(no_eplb.Value(), 1.491, 0.0005);

  auto p = RebalanceExperts(w, 20, 1, 1, 4);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->phy2log, (std::vector<int>{13, 15, 7, 8, 6, 3, 10, 5, 12, 4, 3, 10, 11, 0, 14, 3,
                                          2, 7, 1, 9}));
  EXPECT_EQ(p->phy_replica,
            (std::vector<int>{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 2, 0, 1, 0, 0}));
  EXPECT_EQ(p->log2phy[3], (std::vector<int>{5, 10, 15}));
  EXPECT_EQ(p->log2phy[10], (std::vector<int>{6, 11}));
  EXPECT_EQ(p->log2phy[7], (std::vector<int>{2, 17}));
  for (int e = 0; e < 16; ++e) {
    if (e != 3 && e != 10 && e != 7) EXPECT_EQ(p->logcnt[e], 1) << e;
  }
  const auto loads = PredictedRankLoads(*p, w, 4);
  EXPECT_NEAR(loads[0], 410.0, 1e-9);
  EXPECT_NEAR(loads[1], 413.0 + 1.0 / 3, 1e-9);
  MoeLbAccumulator acc;
  acc.Add(loads);
  EXPECT_NEAR(acc.Value(), 1.002, 0.0005);
  // §2.3 runtime example: token 0 on rank 2 picks {10, 3}.
  EXPECT_EQ(ChooseReplicaSlot(*p, 3, 0, 2), 15);
  EXPECT_EQ(ChooseReplicaSlot(*p, 10, 0, 2), 6);
}

TEST(EplbTest, SlotsPerRankRoundingRule) {  // EPR-2 worked values, E = 384
  EXPECT_EQ(SlotsPerRank(384, 64, 1), 7);
  EXPECT_EQ(SlotsPerRank(384, 63, 1), 8);
  EXPECT_EQ(SlotsPerRank(384, 4, 4), 100);
  EXPECT_EQ(SlotsPerRank(384, 3, 4), 132);
}

TEST(EplbTest, BadParametersNameTheField) {
  const std::vector<int64_t> w(16, 1);
  auto s = RebalanceExperts(w, 18, 1, 1, 4);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("num_gpus"), std::string::npos);
  EXPECT_EQ(RebalanceExperts(w, 12, 1, 1, 4).status().code(), absl::StatusCode::kInvalidArgument);
  const std::vector<int64_t> neg = {1, -1, 1, 1};
  EXPECT_EQ(RebalanceExperts(neg, 4, 1, 1, 2).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(EplbTest, ControllerUsesWindowAndPeriod) {
  EplbConfig cfg{1, /*window=*/2, /*period=*/3, 1, 1};
  EplbController c(cfg, 1, 4, 2);
  EXPECT_EQ(c.slots_per_rank(), 3);
  EXPECT_FALSE(c.RecordStep(std::vector<int64_t>{100, 0, 0, 0}));
  EXPECT_FALSE(c.RecordStep(std::vector<int64_t>{0, 0, 0, 8}));
  // Start-up placement: [0, 1, 2, 3, 0, 1].
  EXPECT_EQ(c.placement(0).phy2log, (std::vector<int>{0, 1, 2, 3, 0, 1}));
  EXPECT_TRUE(c.RecordStep(std::vector<int64_t>{0, 0, 0, 8}));
  // Window = last 2 steps only: expert 3 takes both extra slots, expert 0 none.
  EXPECT_EQ(c.placement(0).logcnt, (std::vector<int>{1, 1, 1, 3}));
  EXPECT_EQ(c.replacements(), 1);
  EXPECT_EQ(EplbConfig::Prefill().window_steps, 100);
  EXPECT_EQ(EplbConfig::Decode().period_steps, 10000);
}

}  // namespace
}  // namespace deepinfer::cluster
