#include "api/engine_metrics.h"

namespace deepinfer::api {

EngineMetrics::EngineMetrics(http::MetricsRegistry* r, const std::string& model_name) {
  running_ = r->GetGauge("deepinfer_num_requests_running", "Sequences holding KV in the engine.");
  waiting_ = r->GetGauge("deepinfer_num_requests_waiting", "Sequences waiting for admission.");
  kv_used_ = r->GetGauge("deepinfer_kv_blocks_used", "KV cache blocks (128 tokens) in use.");
  kv_total_ = r->GetGauge("deepinfer_kv_blocks_total", "KV cache blocks (128 tokens) in total.");
  kv_usage_ = r->GetGauge("deepinfer_kv_cache_usage_ratio", "Fraction of KV blocks in use.");
  queries_ = r->GetCounter("deepinfer_prefix_cache_queries_total",
                           "Prompt tokens looked up in the prefix cache.");
  hits_ = r->GetCounter("deepinfer_prefix_cache_hits_total",
                        "Prompt tokens served from the prefix cache (replayed tokens excluded).");
  replays_ = r->GetCounter("deepinfer_prefix_cache_replays_total",
                           "Prefix-cache hits that rebuilt the window state by a bounded replay.");
  replayed_tokens_ = r->GetCounter("deepinfer_prefix_cache_replayed_tokens_total",
                                   "Tokens of hit prefixes recomputed by bounded replays.");
  evicted_blocks_ = r->GetCounter("deepinfer_prefix_cache_evicted_blocks_total",
                                  "Cached KV blocks evicted to make room.");
  cached_blocks_ = r->GetGauge("deepinfer_prefix_cache_blocks",
                               "KV blocks in the prefix cache (evictable or in use).");
  snapshots_ = r->GetGauge("deepinfer_prefix_cache_snapshots",
                           "Sliding-window state snapshots held for prefix-cache hits.");
  snapshot_bytes_ = r->GetGauge("deepinfer_prefix_cache_snapshot_bytes",
                                "Host memory held by sliding-window state snapshots.");
  snapshot_evictions_ = r->GetCounter("deepinfer_prefix_cache_snapshot_evictions_total",
                                      "Snapshots evicted from their memory budget (LRU).");
  const http::Labels model = {{"model_name", model_name}};
  vllm_queries_ =
      r->GetCounter("vllm:prefix_cache_queries_total",
                    "Prefix cache queries, in terms of number of queried tokens.", model);
  vllm_hits_ = r->GetCounter("vllm:prefix_cache_hits_total",
                             "Prefix cache hits, in terms of number of cached tokens.", model);
}

void EngineMetrics::Update(const engine::EngineStats& st) {
  running_->Set(st.num_running);
  waiting_->Set(st.num_waiting);
  kv_used_->Set(static_cast<double>(st.kv_blocks_used));
  kv_total_->Set(static_cast<double>(st.kv_blocks_total));
  kv_usage_->Set(st.kv_blocks_total > 0 ? static_cast<double>(st.kv_blocks_used) /
                                              static_cast<double>(st.kv_blocks_total)
                                        : 0.0);
  queries_->SetTotal(static_cast<double>(st.prefix_cache_query_tokens));
  hits_->SetTotal(static_cast<double>(st.prefix_cache_hit_tokens));
  replays_->SetTotal(static_cast<double>(st.prefix_cache_replays));
  replayed_tokens_->SetTotal(static_cast<double>(st.prefix_cache_replayed_tokens));
  evicted_blocks_->SetTotal(static_cast<double>(st.prefix_cache_evicted_blocks));
  cached_blocks_->Set(static_cast<double>(st.prefix_cache_blocks));
  snapshots_->Set(static_cast<double>(st.snapshots));
  snapshot_bytes_->Set(static_cast<double>(st.snapshot_bytes));
  snapshot_evictions_->SetTotal(static_cast<double>(st.snapshot_evictions));
  vllm_queries_->SetTotal(static_cast<double>(st.prefix_cache_query_tokens));
  vllm_hits_->SetTotal(static_cast<double>(st.prefix_cache_hit_tokens));
}

}  // namespace deepinfer::api
