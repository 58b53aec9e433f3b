#include "cluster/autoscaler.h"

#include <gtest/gtest.h>

namespace deepinfer::cluster {
namespace {

constexpr int64_t kSec = 1'000'000'000;

TEST(AutoscalerTest, SpecWorkedExampleDesired) {  // §5.1 worked example
  // Prefill: 401,920 uncached tok/s, 226,664 tok/s per PE -> need 1.77 -> ceil(2.53) = 3, but
  // PE min is 4 (one per bucket).
  EXPECT_EQ(DesiredInstances(401920, 226664, AutoscalerConfig::Prefill()), 4);
  AutoscalerConfig p = AutoscalerConfig::Prefill();
  p.min_instances = 1;
  EXPECT_EQ(DesiredInstances(401920, 226664, p), 3);
  // Decode: R = 9,000, CE = 3,840 -> 4; R = 8,000 -> 3.
  EXPECT_EQ(DesiredInstances(9000, 3840, AutoscalerConfig::Decode()), 4);
  EXPECT_EQ(DesiredInstances(8000, 3840, AutoscalerConfig::Decode()), 3);
}

TEST(AutoscalerTest, Bounds) {
  AutoscalerConfig c = AutoscalerConfig::Decode();
  c.max_instances = 5;
  EXPECT_EQ(DesiredInstances(0, 3840, c), 1);
  EXPECT_EQ(DesiredInstances(1e9, 3840, c), 5);
  // Exactly at u_target: 2.1 / 0.7 = 3 must not round up to 4.
  EXPECT_EQ(DesiredInstances(2.1 * 3840, 3840, c), 3);
}

TEST(AutoscalerTest, NoScaleInAboveEightyPercent) {  // AS-5 with the §5.1 numbers
  AutoscalerConfig c = AutoscalerConfig::Prefill();
  c.min_instances = 1;
  Autoscaler as(c);
  // Two PEs after losing one: u = 401,920 / (2 x 226,664) = 0.887 > 0.8. Desired 3 -> out.
  ScaleDecision d = as.Decide(0, {401920, 226664, 2, 1, false});
  EXPECT_NEAR(d.u, 0.887, 0.001);
  // u = 0.85 > 0.8 with desired (9) < serving (10) when u_target is 0.95: scale-in forbidden.
  AutoscalerConfig hi = c;
  hi.u_target = 0.95;
  Autoscaler hold(hi);
  d = hold.Decide(0, {8.5 * 226664, 226664, 10, 0, false});
  EXPECT_EQ(d.desired, 9);
  EXPECT_EQ(d.reason, "hold_u_above_0.8");
  EXPECT_EQ(hold.Decide(3600 * kSec, {8.5 * 226664, 226664, 10, 0, false}).delta, 0);
  // Projected-u rule: u = 0.7 but removing one gives 0.933 > 0.8 -> hold even if desired < N.
  AutoscalerConfig lo = c;
  lo.u_target = 0.95;  // desired = ceil(2.8 / 0.95) = 3 < 4
  Autoscaler h2(lo);
  d = h2.Decide(0, {0.7 * 4 * 226664, 226664, 4, 0, false});
  EXPECT_EQ(d.desired, 3);
  EXPECT_EQ(d.reason, "hold_u_above_0.8");
  d = h2.Decide(3600 * kSec, {0.7 * 4 * 226664, 226664, 4, 0, false});
  EXPECT_EQ(d.delta, 0);
}

TEST(AutoscalerTest, ScaleInAfterTenMinutes) {  // §5.1: R = 8,000 with 4 CEs
  Autoscaler as(AutoscalerConfig::Decode());
  const AutoscalerInput in{8000, 3840, 4, 0, false};
  ScaleDecision d = as.Decide(0, in);
  EXPECT_NEAR(d.u, 0.52, 0.005);
  EXPECT_EQ(d.desired, 3);
  EXPECT_EQ(d.delta, 0);
  EXPECT_EQ(d.reason, "sustain_in");
  EXPECT_EQ(as.Decide(599 * kSec, in).delta, 0);
  d = as.Decide(600 * kSec, in);
  EXPECT_EQ(d.delta, -1);
  EXPECT_FALSE(d.n_minus_one_violated);  // 8,000 <= 3 x 3,840
  // FT-5 reported after the scale-in: 8,000 > (3 - 1) x 3,840.
  EXPECT_TRUE(as.Decide(601 * kSec, {8000, 3840, 3, 0, false}).n_minus_one_violated);
  // A further scale-in needs its own 10-min window (and is rate-limited to one per 300 s).
  const AutoscalerInput low{100, 3840, 3, 0, false};
  EXPECT_EQ(as.Decide(602 * kSec, low).reason, "sustain_in");
  EXPECT_EQ(as.Decide(1201 * kSec, low).delta, 0);
  EXPECT_EQ(as.Decide(1202 * kSec, low).delta, -1);
}

TEST(AutoscalerTest, ScaleOutRateLimitAndSustain) {  // AS-6
  Autoscaler as(AutoscalerConfig::Prefill());
  // Needs 10 PEs, has 4: wanted continuously 30 s first.
  const AutoscalerInput in{10 * 0.7 * 100, 100, 4, 1, false};
  EXPECT_EQ(as.Decide(0, in).reason, "sustain_out");
  EXPECT_EQ(as.Decide(29 * kSec, in).delta, 0);
  ScaleDecision d = as.Decide(30 * kSec, in);
  EXPECT_EQ(d.delta, 2);        // at most +2 PE
  EXPECT_EQ(d.from_spares, 1);  // spares first (AS-7)
  // Next step not before 60 s after the last one, and only once the sustain window elapsed.
  AutoscalerInput in6 = in;
  in6.serving = 6;
  in6.spares = 0;
  EXPECT_EQ(as.Decide(31 * kSec, in6).delta, 0);
  // Sustain restarts at 31 s (ok from 61 s), but the rate limit allows the next step at 90 s.
  EXPECT_EQ(as.Decide(61 * kSec, in6).reason, "rate_limit");
  EXPECT_EQ(as.Decide(89 * kSec, in6).reason, "rate_limit");
  EXPECT_EQ(as.Decide(90 * kSec, in6).delta, 2);
  // Pending guard.
  AutoscalerInput busy = in6;
  busy.serving = 8;
  busy.action_in_progress = true;
  as.Decide(200 * kSec, busy);
  EXPECT_EQ(as.Decide(400 * kSec, busy).reason, "action_in_progress");
}

TEST(AutoscalerTest, BelowMinimumRestoresWithoutSustain) {
  Autoscaler as(AutoscalerConfig::Prefill());
  ScaleDecision d = as.Decide(0, {0, 100, 2, 0, false});
  EXPECT_EQ(d.delta, 2);
}

TEST(AutoscalerTest, SparePool) {  // AS-7 worked example: λ 0.5/h, 10 min, step 2 -> 3
  EXPECT_EQ(SparePoolSize(0.5, 600, 2), 3);
  EXPECT_EQ(SparePoolSize(0, 600, 0), 1);
}

TEST(DrainTest, GraceThenMigrate) {  // DRAIN-2
  EXPECT_EQ(DrainPhaseAt(0, 59 * kSec, 3), DrainPhase::kGrace);
  EXPECT_EQ(DrainPhaseAt(0, 60 * kSec, 3), DrainPhase::kMigrate);
  EXPECT_EQ(DrainPhaseAt(0, 10 * kSec, 0), DrainPhase::kDone);
  // Two requests moved with the decode LB; loads updated between picks.
  std::vector<RankLoad> targets = {{10, 100'000}, {10, 100'000}};
  std::vector<RankLoad> after;
  auto moves = PlanDrainMoves({{1, 5000, 5600}, {2, 5000, 5600}}, targets, {}, &after);
  ASSERT_EQ(moves.size(), 2u);
  EXPECT_EQ(moves[0].target, 0);
  EXPECT_EQ(moves[1].target, 1);
  EXPECT_EQ(after[0].running, 11);
  EXPECT_EQ(after[1].kv_tokens, 105'000);
  // No eligible target -> -1 (recompute migration, MIG-2).
  targets = {{1, 0, 0, true}};
  EXPECT_EQ(PlanDrainMoves({{3, 1, 1}}, targets)[0].target, -1);
}

}  // namespace
}  // namespace deepinfer::cluster
