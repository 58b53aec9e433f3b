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
//   and vLLM's names for dashboards written against vLLM: vllm:prefix_cache_queries_total and
//   vllm:prefix_cache_hits_total (counters in tokens, label model_name).
// The engine's cumulative counts never go down (a prefix-cache reset empties the cache, not the
// counters), so the counters follow them exactly.
//
// Thread-safety: Update() may be called from any thread (the registry's metrics are atomics);
// concurrent scrapes each render a consistent-enough snapshot, as Prometheus expects.
#ifndef DEEPINFER_API_ENGINE_METRICS_H_
#define DEEPINFER_API_ENGINE_METRICS_H_

#include <string>

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
  http::Counter* vllm_queries_;
  http::Counter* vllm_hits_;
};

}  // namespace deepinfer::api

#endif  // DEEPINFER_API_ENGINE_METRICS_H_
