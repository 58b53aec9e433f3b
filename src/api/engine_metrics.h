// The engine's counters on GET /metrics (Prometheus text): EngineMetrics mirrors an
// engine::EngineStats snapshot into an http::MetricsRegistry at each scrape.
//
// Families (tokens are prompt tokens; `_total` families are counters, the rest gauges):
//   deepinfer_num_requests_running / _waiting, deepinfer_kv_blocks_used / _total,
//   deepinfer_kv_cache_usage_ratio;
//   prefix cache (KV-CACHE.md §2-6): deepinfer_prefix_cache_queries_total (tokens looked up),
//   deepinfer_prefix_cache_hits_total (tokens served from the cache), deepinfer_prefix_cache_
//   replays_total and _replayed_tokens_total (bounded replays and the tokens they recomputed),
//   deepinfer_prefix_cache_evicted_blocks_total, deepinfer_prefix_cache_blocks (cached blocks,
//   evictable or in use), deepinfer_prefix_cache_snapshots and _snapshot_bytes (SWA state
//   snapshots held), deepinfer_prefix_cache_snapshot_evictions_total;
//   KV tiers (docs/kv-tiers.md): deepinfer_prefix_cache_tier_hits_total{tier="pool"|"host"|
//   "store"} (hit tokens by where their blocks were: the engine's block pool, the host tier L1,
//   the KV store L2; the three sum to deepinfer_prefix_cache_hits_total),
//   deepinfer_kv_tier_fetches_total, _fetch_failures_total, _fetch_seconds_total,
//   _fetched_blocks_total, _fetched_bytes_total (L2 -> L1 fetches), deepinfer_kv_tier_writes_total,
//   _write_bytes_total, _dropped_writes_total, _write_failures_total{tier="l1"|"l2"} and the gauge
//   deepinfer_kv_tier_write_queue_depth (write-back), deepinfer_kv_tier_bad_records_total{tier=
//   "l1"} (records that failed verification), deepinfer_kv_tier_snapshot_writes_total and
//   _snapshot_reads_total (SWA snapshots in the shared-memory arena);
//   decoding: deepinfer_forward_passes_total, deepinfer_jump_forward_tokens_total (tokens a
//   grammar forced), deepinfer_spec_decode_num_drafts_total / _num_draft_tokens_total /
//   _num_accepted_tokens_total and _num_accepted_tokens_per_pos_total{position} (speculative
//   decoding; vllm:spec_decode_num_drafts_total / _num_draft_tokens_total /
//   _num_accepted_tokens_total / _num_accepted_tokens_per_pos_total carry the same values
//   under vLLM's names);
//   variable-length verification: deepinfer_spec_decode_varlen_steps_total (steps the planner
//   split), _verify_budget_tokens_total (Σ B*) and the gauge _verify_budget_tokens (the last B*),
//   _varlen_candidate_tokens_total (Σ drafts it could have verified), _varlen_gated_steps_total
//   (below the min-concurrency gate), _varlen_benefit_gated_steps_total (full blocks chosen by
//   the measured-benefit gate), _planner_fallbacks_total{reason="no_table"|"no_stale_row"};
//   and vLLM's names for dashboards and gateways written against vLLM (label model_name):
//   vllm:prefix_cache_queries_total and vllm:prefix_cache_hits_total (counters in tokens),
//   vllm:num_requests_running / _waiting (gauges, sequences), vllm:kv_cache_usage_perc and its
//   older name vllm:gpu_cache_usage_perc (gauges, fraction 0-1 of KV blocks in use),
//   vllm:num_preemptions_total (counter). The per-request vLLM series are in
//   api/request_metrics.h.
// The engine's cumulative counts never go down (a prefix-cache reset empties the cache, not the
// counters), so the counters follow them exactly.
//
// Thread-safety: Update() may be called from any thread (the registry's metrics are atomics);
// concurrent scrapes each render a consistent-enough snapshot, as Prometheus expects.
#ifndef DEEPINFER_API_ENGINE_METRICS_H_
#define DEEPINFER_API_ENGINE_METRICS_H_

#include <string>
#include <vector>

#include "engine/engine.h"
#include "http/metrics.h"

namespace deepinfer::api {

class EngineMetrics {
 public:
  // Registers every family in `registry` (not owned; must outlive this object). `model_name`
  // is the served model id, the value of vLLM's `model_name` label.
  EngineMetrics(http::MetricsRegistry* registry, const std::string& model_name);

  // Sets every metric from `stats` (a snapshot taken just before rendering).
  void Update(const engine::EngineStats& stats);

 private:
  http::Gauge* running_;
  http::Gauge* waiting_;
  http::Gauge* kv_used_;
  http::Gauge* kv_total_;
  http::Gauge* kv_usage_;
  http::Counter* queries_;
  http::Counter* hits_;
  http::Counter* replays_;
  http::Counter* replayed_tokens_;
  http::Counter* evicted_blocks_;
  http::Gauge* cached_blocks_;
  http::Gauge* snapshots_;
  http::Gauge* snapshot_bytes_;
  http::Counter* snapshot_evictions_;
  http::Counter* pool_hits_;
  http::Counter* host_hits_;
  http::Counter* store_hits_;
  http::Counter* fetches_;
  http::Counter* fetch_failures_;
  http::Counter* fetch_seconds_;
  http::Counter* fetched_blocks_;
  http::Counter* fetched_bytes_;
  http::Counter* writes_;
  http::Counter* write_bytes_;
  http::Counter* dropped_writes_;
  http::Counter* l1_write_failures_;
  http::Counter* l2_write_failures_;
  http::Gauge* write_queue_depth_;
  http::Counter* l1_bad_records_;
  http::Counter* tier_snapshot_writes_;
  http::Counter* tier_snapshot_reads_;
  http::Counter* vllm_queries_;
  http::Counter* vllm_hits_;
  // Decoding (forward passes, jump-forward, speculation): ours and vLLM's spec_decode names.
  http::Counter* forward_passes_;
  http::Counter* jump_forward_tokens_;
  http::Counter* spec_drafts_;
  http::Counter* spec_draft_tokens_;
  http::Counter* spec_accepted_tokens_;
  http::Counter* vllm_spec_drafts_;
  http::Counter* vllm_spec_draft_tokens_;
  http::Counter* vllm_spec_accepted_tokens_;
  std::vector<http::Counter*> spec_accepted_per_pos_;
  std::vector<http::Counter*> vllm_spec_accepted_per_pos_;
  // Variable-length verification (docs/speculative-decoding.md).
  http::Counter* varlen_steps_;
  http::Counter* verify_budget_;
  http::Gauge* verify_budget_last_;
  http::Counter* varlen_candidates_;
  http::Counter* varlen_gated_;
  http::Counter* varlen_benefit_gated_;
  http::Counter* planner_no_table_;
  http::Counter* planner_no_stale_row_;
  http::Gauge* vllm_running_;
  http::Gauge* vllm_waiting_;
  http::Gauge* vllm_kv_usage_;
  http::Gauge* vllm_gpu_cache_usage_;
  http::Counter* vllm_preemptions_;
};

}  // namespace deepinfer::api

#endif  // DEEPINFER_API_ENGINE_METRICS_H_
