#include "sim/capacity_plan.h"

#include <gtest/gtest.h>

namespace deepinfer::sim {
namespace {

TEST(CapacityPlanTest, SeedArithmeticAndChecks) {  // cluster.md §6.6 EXP-3
  auto p = ComputeCapacityPlan({});
  ASSERT_TRUE(p.ok());
  EXPECT_NEAR(p->logical_tb, 1843.2, 1e-9);
  EXPECT_NEAR(p->raw_tb, 2211.84, 1e-9);
  EXPECT_NEAR(p->server_raw_tb, 614.6, 1e-9);
  EXPECT_NEAR(p->servers_exact, 3.60, 0.005);
  EXPECT_EQ(p->servers_min, 4);
  EXPECT_NEAR(p->snapshot_mib, 1.35, 0.005);
  EXPECT_NEAR(p->snapshots_gib, 1317.9, 0.05);
  // (a) 10+2 with one chunk per server: 12 servers, fan-out 11; at 4 servers 3 chunks each.
  EXPECT_EQ(p->fault_domain_servers, 12);
  EXPECT_EQ(p->read_fanout, 11);
  EXPECT_EQ(p->chunks_per_server_at_min, 3);
  EXPECT_FALSE(p->survives_server_loss_at_min);
  // (b) 614.6 TB at 5 GB/s = 122,920 s = 34.1 h.
  EXPECT_NEAR(p->fill_hours, 34.14, 0.01);
}

TEST(CapacityPlanTest, RetentionCheck) {
  CapacityInputs in;
  // 1e11 unique tokens/day x 890 B = 89 TB/day; usable 1,843.2 x 0.9 = 1,658.88 TB -> 18.6 d.
  in.unique_tokens_per_day = 1e11;
  auto p = ComputeCapacityPlan(in);
  ASSERT_TRUE(p.ok());
  EXPECT_NEAR(p->bytes_per_day_tb, 89.0, 1e-9);
  EXPECT_NEAR(p->retention_days, 1658.88 / 89.0, 1e-9);
  EXPECT_TRUE(p->ttl_fits);
  in.unique_tokens_per_day = 3e11;  // 267 TB/day x 7 d = 1,869 TB > 1,658.88
  p = ComputeCapacityPlan(in);
  EXPECT_FALSE(p->ttl_fits);
  in.gpus = 0;
  EXPECT_EQ(ComputeCapacityPlan(in).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace deepinfer::sim
