#include "api/engine_metrics.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace deepinfer::api {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

engine::EngineStats Stats() {
  engine::EngineStats st;
  st.num_running = 2;
  st.num_waiting = 1;
  st.kv_blocks_used = 30;
  st.kv_blocks_total = 120;
  st.prefix_cache_query_tokens = 1000;
  st.prefix_cache_hit_tokens = 640;
  st.prefix_cache_replayed_tokens = 256;
  st.prefix_cache_replays = 2;
  st.prefix_cache_evicted_blocks = 3;
  st.prefix_cache_blocks = 17;
  st.snapshots = 4;
  st.snapshot_bytes = 123456789;
  st.snapshot_evictions = 5;
  return st;
}

// Every line written by hand from the field values above and the exposition format.
TEST(EngineMetricsTest, PrefixCacheStatsRenderUnderOurNamesAndVllms) {
  http::MetricsRegistry r;
  EngineMetrics m(&r, "demo");
  m.Update(Stats());
  const std::string text = r.RenderText();
  for (const char* line : {
           "# TYPE deepinfer_prefix_cache_queries_total counter\n",
           "deepinfer_prefix_cache_queries_total 1000\n",
           "# TYPE deepinfer_prefix_cache_hits_total counter\n",
           "deepinfer_prefix_cache_hits_total 640\n",
           "# TYPE deepinfer_prefix_cache_replays_total counter\n",
           "deepinfer_prefix_cache_replays_total 2\n",
           "deepinfer_prefix_cache_replayed_tokens_total 256\n",
           "# TYPE deepinfer_prefix_cache_evicted_blocks_total counter\n",
           "deepinfer_prefix_cache_evicted_blocks_total 3\n",
           "# TYPE deepinfer_prefix_cache_blocks gauge\n",
           "deepinfer_prefix_cache_blocks 17\n",
           "# TYPE deepinfer_prefix_cache_snapshots gauge\n",
           "deepinfer_prefix_cache_snapshots 4\n",
           "# TYPE deepinfer_prefix_cache_snapshot_bytes gauge\n",
           "deepinfer_prefix_cache_snapshot_bytes 123456789\n",
           "# TYPE deepinfer_prefix_cache_snapshot_evictions_total counter\n",
           "deepinfer_prefix_cache_snapshot_evictions_total 5\n",
           "# TYPE vllm:prefix_cache_queries_total counter\n",
           "vllm:prefix_cache_queries_total{model_name=\"demo\"} 1000\n",
           "# TYPE vllm:prefix_cache_hits_total counter\n",
           "vllm:prefix_cache_hits_total{model_name=\"demo\"} 640\n",
           "deepinfer_num_requests_running 2\n",
           "deepinfer_num_requests_waiting 1\n",
           "deepinfer_kv_blocks_used 30\n",
           "deepinfer_kv_blocks_total 120\n",
           "deepinfer_kv_cache_usage_ratio 0.25\n",
       }) {
    EXPECT_THAT(text, HasSubstr(line));
  }
}

// Gauges follow the latest snapshot both ways; counters mirror the engine's running totals.
TEST(EngineMetricsTest, GaugesFollowSnapshotsCountersKeepTotals) {
  http::MetricsRegistry r;
  EngineMetrics m(&r, "m");
  m.Update(Stats());
  engine::EngineStats later = Stats();
  later.prefix_cache_query_tokens = 1300;
  later.prefix_cache_hit_tokens = 768;
  later.prefix_cache_blocks = 0;  // after POST /reset_prefix_cache
  later.snapshots = 0;
  later.snapshot_bytes = 0;
  m.Update(later);
  const std::string text = r.RenderText();
  EXPECT_THAT(text, HasSubstr("deepinfer_prefix_cache_queries_total 1300\n"));
  EXPECT_THAT(text, HasSubstr("vllm:prefix_cache_hits_total{model_name=\"m\"} 768\n"));
  EXPECT_THAT(text, HasSubstr("deepinfer_prefix_cache_blocks 0\n"));
  EXPECT_THAT(text, HasSubstr("deepinfer_prefix_cache_snapshot_bytes 0\n"));
  EXPECT_THAT(text, Not(HasSubstr("deepinfer_prefix_cache_blocks 17\n")));
}

// The tier series, each line written by hand from the values set here: 640 hit tokens, of which
// 128 came from L1 and 256 from L2, leave 256 for the pool.
TEST(EngineMetricsTest, KvTierStatsRenderByTier) {
  http::MetricsRegistry r;
  EngineMetrics m(&r, "demo");
  engine::EngineStats st = Stats();
  st.prefix_cache_host_hit_tokens = 128;
  st.prefix_cache_store_hit_tokens = 256;
  st.tiers.writes = 11;
  st.tiers.write_bytes = 22000;
  st.tiers.dropped_writes = 3;
  st.tiers.l1_write_failures = 1;
  st.tiers.l2_write_failures = 4;
  st.tiers.write_queue_depth = 7;
  st.tiers.fetches = 5;
  st.tiers.fetch_failures = 2;
  st.tiers.fetched_blocks = 9;
  st.tiers.fetched_bytes = 90000;
  st.tiers.fetch_nanos = 1500000000;
  st.tiers.l1_bad_records = 6;
  st.tiers.snapshot_writes = 8;
  st.tiers.snapshot_reads = 10;
  m.Update(st);
  const std::string text = r.RenderText();
  for (const char* line : {
           "# TYPE deepinfer_prefix_cache_tier_hits_total counter\n",
           "deepinfer_prefix_cache_tier_hits_total{tier=\"pool\"} 256\n",
           "deepinfer_prefix_cache_tier_hits_total{tier=\"host\"} 128\n",
           "deepinfer_prefix_cache_tier_hits_total{tier=\"store\"} 256\n",
           "# TYPE deepinfer_kv_tier_fetches_total counter\n",
           "deepinfer_kv_tier_fetches_total 5\n",
           "deepinfer_kv_tier_fetch_failures_total 2\n",
           "deepinfer_kv_tier_fetch_seconds_total 1.5\n",
           "deepinfer_kv_tier_fetched_blocks_total 9\n",
           "deepinfer_kv_tier_fetched_bytes_total 90000\n",
           "deepinfer_kv_tier_writes_total 11\n",
           "deepinfer_kv_tier_write_bytes_total 22000\n",
           "deepinfer_kv_tier_dropped_writes_total 3\n",
           "# TYPE deepinfer_kv_tier_write_failures_total counter\n",
           "deepinfer_kv_tier_write_failures_total{tier=\"l1\"} 1\n",
           "deepinfer_kv_tier_write_failures_total{tier=\"l2\"} 4\n",
           "# TYPE deepinfer_kv_tier_write_queue_depth gauge\n",
           "deepinfer_kv_tier_write_queue_depth 7\n",
           "deepinfer_kv_tier_bad_records_total{tier=\"l1\"} 6\n",
           "deepinfer_kv_tier_snapshot_writes_total 8\n",
           "deepinfer_kv_tier_snapshot_reads_total 10\n",
       }) {
    EXPECT_THAT(text, HasSubstr(line));
  }
  // No tiers configured: every hit is a pool hit and the tier series read 0.
  http::MetricsRegistry r0;
  EngineMetrics m0(&r0, "demo");
  m0.Update(Stats());
  const std::string text0 = r0.RenderText();
  EXPECT_THAT(text0, HasSubstr("deepinfer_prefix_cache_tier_hits_total{tier=\"pool\"} 640\n"));
  EXPECT_THAT(text0, HasSubstr("deepinfer_prefix_cache_tier_hits_total{tier=\"store\"} 0\n"));
  EXPECT_THAT(text0, HasSubstr("deepinfer_kv_tier_write_queue_depth 0\n"));
}

// Speculative decoding counters under our names and vLLM's (prometheus_client appends `_total`
// to a counter's name: vllm:spec_decode_num_drafts_total, ...). Lines written by hand.
TEST(EngineMetricsTest, SpecDecodeCountersRenderWithVllmNames) {
  http::MetricsRegistry r;
  EngineMetrics m(&r, "demo");
  engine::EngineStats st = Stats();
  st.spec_verify_steps = 11;
  st.spec_draft_tokens = 30;
  st.spec_accepted_tokens = 17;
  st.spec_accepted_per_position[0] = 10;
  st.spec_accepted_per_position[1] = 7;
  m.Update(st);
  const std::string text = r.RenderText();
  for (const char* line : {
           "deepinfer_spec_decode_num_drafts_total 11\n",
           "deepinfer_spec_decode_num_draft_tokens_total 30\n",
           "deepinfer_spec_decode_num_accepted_tokens_total 17\n",
           "deepinfer_spec_decode_num_accepted_tokens_per_pos_total{position=\"1\"} 7\n",
           "# TYPE vllm:spec_decode_num_drafts_total counter\n",
           "vllm:spec_decode_num_drafts_total{model_name=\"demo\"} 11\n",
           "vllm:spec_decode_num_draft_tokens_total{model_name=\"demo\"} 30\n",
           "vllm:spec_decode_num_accepted_tokens_total{model_name=\"demo\"} 17\n",
           "vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"demo\",position=\"0\"} 10\n",
       }) {
    EXPECT_THAT(text, HasSubstr(line));
  }
}

// Variable-length verification counters (lines written by hand from the values set here).
TEST(EngineMetricsTest, VarlenPlannerCountersRender) {
  http::MetricsRegistry r;
  EngineMetrics m(&r, "demo");
  engine::EngineStats st = Stats();
  st.spec_varlen_steps = 40;
  st.spec_verify_budget_total = 130;
  st.spec_verify_budget_last = 3;
  st.spec_varlen_candidates_total = 200;
  st.spec_varlen_gated_steps = 7;
  st.spec_varlen_benefit_gated_steps = 5;
  st.spec_planner_no_table = 2;
  st.spec_planner_no_stale_row = 9;
  m.Update(st);
  const std::string text = r.RenderText();
  for (const char* line : {
           "# TYPE deepinfer_spec_decode_varlen_steps_total counter\n",
           "deepinfer_spec_decode_varlen_steps_total 40\n",
           "deepinfer_spec_decode_verify_budget_tokens_total 130\n",
           "# TYPE deepinfer_spec_decode_verify_budget_tokens gauge\n",
           "deepinfer_spec_decode_verify_budget_tokens 3\n",
           "deepinfer_spec_decode_varlen_candidate_tokens_total 200\n",
           "deepinfer_spec_decode_varlen_gated_steps_total 7\n",
           "deepinfer_spec_decode_varlen_benefit_gated_steps_total 5\n",
           "deepinfer_spec_decode_planner_fallbacks_total{reason=\"no_table\"} 2\n",
           "deepinfer_spec_decode_planner_fallbacks_total{reason=\"no_stale_row\"} 9\n",
       }) {
    EXPECT_THAT(text, HasSubstr(line));
  }
}

}  // namespace
}  // namespace deepinfer::api
