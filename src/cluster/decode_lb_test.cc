#include "cluster/decode_lb.h"

#include <gtest/gtest.h>

namespace deepinfer::cluster {
namespace {

// cluster.md §3.2 worked example: A (60, 1.2M), B (40, 2.4M), C (50, 1.5M), D (55, 0.9M).
std::vector<RankLoad> SpecRanks() {
  return {{60, 1'200'000}, {40, 2'400'000}, {50, 1'500'000}, {55, 900'000}};
}

TEST(DecodeLbTest, WeightsFromStepModel) {  // DLB-4: a = 0.15 ms, b = 5e-6 ms -> w_n ≈ 0.51
  const double w = RequestWeight(51.25, 1.5e6);
  EXPECT_NEAR(w, 7.6875 / (7.6875 + 7.5), 1e-12);
  EXPECT_NEAR(w, 0.51, 0.01);
}

TEST(DecodeLbTest, ShortRequestGoesToFewestRequests) {
  const auto ranks = SpecRanks();
  const auto s = DecodeScores(ranks, 2000, RequestWeight(51.25, 1.5e6));
  EXPECT_NEAR(s[0], 0.620, 0.002);
  EXPECT_NEAR(s[1], 0.449, 0.002);
  EXPECT_NEAR(s[2], 0.528, 0.002);
  EXPECT_NEAR(s[3], 0.563, 0.002);
  EXPECT_EQ(PickDecodeRank(ranks, 2000), 1);  // B
}

TEST(DecodeLbTest, LongRequestGoesToLeastKv) {
  const auto ranks = SpecRanks();
  const auto s = DecodeScores(ranks, 100000, RequestWeight(51.25, 1.5e6));
  EXPECT_NEAR(s[0], 1.942, 0.003);
  EXPECT_NEAR(s[1], 3.095, 0.003);
  EXPECT_NEAR(s[2], 2.181, 0.003);
  EXPECT_NEAR(s[3], 1.556, 0.003);
  EXPECT_EQ(PickDecodeRank(ranks, 100000), 3);  // D
}

TEST(DecodeLbTest, TiesGoToLowestIndex) {
  std::vector<RankLoad> ranks = {{10, 5000}, {5, 1000}, {5, 1000}, {5, 1000}};
  EXPECT_EQ(PickDecodeRank(ranks, 100), 1);
  // All idle: means floored at 1, all scores 0 -> rank 0.
  EXPECT_EQ(PickDecodeRank({{0, 0}, {0, 0}}, 100), 0);
}

TEST(DecodeLbTest, HardFilters) {  // DLB-6
  std::vector<RankLoad> ranks = {{1, 0, 0, true},              // draining
                                 {120, 0, 0, false},           // at max running
                                 {1, 9'000, 10'000, false},    // 1,000 free < 600 + 500 reserve
                                 {50, 100'000, 1'000'000, false}};
  EXPECT_EQ(PickDecodeRank(ranks, 600), 3);
  ranks[3].draining = true;
  EXPECT_EQ(PickDecodeRank(ranks, 600), -1);
  EXPECT_EQ(DecodeRequestSize(1000, 100, 600), 1100);
  EXPECT_EQ(DecodeRequestSize(1000, 0, 600), 1600);
}

TEST(DecodeLbTest, InstanceLevel) {  // DLB-7
  std::vector<InstanceLoad> xs = {{50, 100, 10, 100}, {20, 100, 60, 100}, {30, 100, 30, 100}};
  EXPECT_EQ(PickDecodeInstance(xs, 0, 0), 2);  // max(0.3, 0.3) < 0.5 < 0.6
  xs[2].draining = true;
  EXPECT_EQ(PickDecodeInstance(xs, 0, 0), 0);
  // > 4 candidates: power of two choices among two distinct draws.
  std::vector<InstanceLoad> many(6, {90, 100, 0, 100});
  many[4] = {10, 100, 0, 100};
  EXPECT_EQ(PickDecodeInstance(many, 4, 0), 4);  // draws 4 and 0
  EXPECT_EQ(PickDecodeInstance(many, 1, 1), 1);  // draws 1 and 2 (4 not drawn)
}

}  // namespace
}  // namespace deepinfer::cluster
