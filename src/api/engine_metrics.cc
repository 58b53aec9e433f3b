#include "api/engine_metrics.h"

#include <algorithm>
#include <cstdint>
#include <string>

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
  const char* tier_hits = "deepinfer_prefix_cache_tier_hits_total";
  const char* tier_hits_help =
      "Prompt tokens served from the prefix cache, by the tier their blocks were in.";
  pool_hits_ = r->GetCounter(tier_hits, tier_hits_help, {{"tier", "pool"}});
  host_hits_ = r->GetCounter(tier_hits, tier_hits_help, {{"tier", "host"}});
  store_hits_ = r->GetCounter(tier_hits, tier_hits_help, {{"tier", "store"}});
  fetches_ = r->GetCounter("deepinfer_kv_tier_fetches_total",
                           "Fetches of a waiting request's blocks from the KV store (L2) into L1.");
  fetch_failures_ = r->GetCounter("deepinfer_kv_tier_fetch_failures_total",
                                  "Fetches cut short by a failed KV store read or match.");
  fetch_seconds_ = r->GetCounter("deepinfer_kv_tier_fetch_seconds_total",
                                 "Time spent in fetches, summed over the fetch threads.");
  fetched_blocks_ = r->GetCounter("deepinfer_kv_tier_fetched_blocks_total",
                                  "KV blocks copied from the KV store (L2) into L1.");
  fetched_bytes_ = r->GetCounter("deepinfer_kv_tier_fetched_bytes_total",
                                 "Record bytes copied from the KV store (L2) into L1.");
  writes_ = r->GetCounter("deepinfer_kv_tier_writes_total",
                          "KV blocks written back to every configured tier.");
  write_bytes_ = r->GetCounter("deepinfer_kv_tier_write_bytes_total",
                               "Record bytes written back (counted once per tier written).");
  dropped_writes_ = r->GetCounter("deepinfer_kv_tier_dropped_writes_total",
                                  "Write-backs dropped because the write queue was full.");
  const char* failures = "deepinfer_kv_tier_write_failures_total";
  const char* failures_help = "Write-backs a tier refused or failed (the block is not there).";
  l1_write_failures_ = r->GetCounter(failures, failures_help, {{"tier", "l1"}});
  l2_write_failures_ = r->GetCounter(failures, failures_help, {{"tier", "l2"}});
  write_queue_depth_ = r->GetGauge("deepinfer_kv_tier_write_queue_depth",
                                   "KV blocks queued for write-back now.");
  l1_bad_records_ =
      r->GetCounter("deepinfer_kv_tier_bad_records_total",
                    "Records that failed verification when read back (erased, a miss).",
                    {{"tier", "l1"}});
  tier_snapshot_writes_ =
      r->GetCounter("deepinfer_kv_tier_snapshot_writes_total",
                    "Sliding-window state snapshots stored in the shared-memory arena.");
  tier_snapshot_reads_ =
      r->GetCounter("deepinfer_kv_tier_snapshot_reads_total",
                    "Snapshots found in the shared-memory arena after a miss in memory.");
  const http::Labels model = {{"model_name", model_name}};
  vllm_queries_ =
      r->GetCounter("vllm:prefix_cache_queries_total",
                    "Prefix cache queries, in terms of number of queried tokens.", model);
  vllm_hits_ = r->GetCounter("vllm:prefix_cache_hits_total",
                             "Prefix cache hits, in terms of number of cached tokens.", model);
  // vLLM's scheduler-state series (names, types and help as vLLM's v1 PrometheusStatLogger),
  // read by the Gateway API inference extension's endpoint picker and vLLM's Grafana dashboard.
  vllm_running_ = r->GetGauge("vllm:num_requests_running",
                              "Number of requests in model execution batches.", model);
  vllm_waiting_ = r->GetGauge("vllm:num_requests_waiting",
                              "Number of requests waiting to be processed.", model);
  vllm_kv_usage_ = r->GetGauge("vllm:kv_cache_usage_perc",
                               "KV-cache usage. 1 means 100 percent usage.", model);
  vllm_gpu_cache_usage_ = r->GetGauge(
      "vllm:gpu_cache_usage_perc",
      "KV-cache usage. 1 means 100 percent usage. The name older vLLM releases and scrapers "
      "use; the same value as vllm:kv_cache_usage_perc.",
      model);
  vllm_preemptions_ = r->GetCounter("vllm:num_preemptions_total",
                                    "Cumulative number of preemption from the engine.", model);
  forward_passes_ = r->GetCounter("deepinfer_forward_passes_total",
                                  "Model forward passes run (engine steps that computed tokens).");
  jump_forward_tokens_ = r->GetCounter(
      "deepinfer_jump_forward_tokens_total",
      "Output tokens appended by jump-forward decoding (grammar-forced, no forward pass each).");
  spec_drafts_ = r->GetCounter("deepinfer_spec_decode_num_drafts_total",
                               "Speculative verify steps (one per sequence and step with drafts).");
  spec_draft_tokens_ = r->GetCounter("deepinfer_spec_decode_num_draft_tokens_total",
                                     "Draft tokens verified by the target model.");
  spec_accepted_tokens_ = r->GetCounter("deepinfer_spec_decode_num_accepted_tokens_total",
                                        "Draft tokens accepted.");
  vllm_spec_drafts_ =
      r->GetCounter("vllm:spec_decode_num_drafts_total", "Number of spec decoding drafts.", model);
  vllm_spec_draft_tokens_ =
      r->GetCounter("vllm:spec_decode_num_draft_tokens_total", "Number of draft tokens.", model);
  vllm_spec_accepted_tokens_ = r->GetCounter("vllm:spec_decode_num_accepted_tokens_total",
                                             "Number of accepted tokens.", model);
  varlen_steps_ = r->GetCounter("deepinfer_spec_decode_varlen_steps_total",
                                "Steps whose verify lengths the variable-length planner chose.");
  verify_budget_ = r->GetCounter("deepinfer_spec_decode_verify_budget_tokens_total",
                                 "Verification budget B* (draft tokens) summed over planned steps.");
  verify_budget_last_ = r->GetGauge("deepinfer_spec_decode_verify_budget_tokens",
                                    "Verification budget B* of the last planned step.");
  varlen_candidates_ =
      r->GetCounter("deepinfer_spec_decode_varlen_candidate_tokens_total",
                    "Draft tokens the planned steps could have verified (sum of the caps).");
  varlen_benefit_gated_ = r->GetCounter(
      "deepinfer_spec_decode_varlen_benefit_gated_steps_total",
      "Steps the measured-benefit gate verified with full blocks (they measured faster).");
  varlen_gated_ = r->GetCounter(
      "deepinfer_spec_decode_varlen_gated_steps_total",
      "Steps below --speculative-varlen-min-concurrency (full blocks verified).");
  planner_no_table_ = r->GetCounter("deepinfer_spec_decode_planner_fallbacks_total",
                                    "Planner fallbacks: steps planned without a cost table "
                                    "(verify-all), sequences without a stale confidence row.",
                                    {{"reason", "no_table"}});
  planner_no_stale_row_ = r->GetCounter("deepinfer_spec_decode_planner_fallbacks_total",
                                        "Planner fallbacks: steps planned without a cost table "
                                        "(verify-all), sequences without a stale confidence row.",
                                        {{"reason", "no_stale_row"}});
  for (int j = 0; j < engine::kMaxSpeculativeTokens; ++j) {
    http::Labels pos = {{"position", std::to_string(j)}};
    spec_accepted_per_pos_.push_back(r->GetCounter(
        "deepinfer_spec_decode_num_accepted_tokens_per_pos_total",
        "Accepted draft tokens by position in the draft (0 = first draft).", pos));
    pos.insert(pos.begin(), model.begin(), model.end());
    vllm_spec_accepted_per_pos_.push_back(
        r->GetCounter("vllm:spec_decode_num_accepted_tokens_per_pos_total",
                      "Accepted draft tokens per draft position.", pos));
  }
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
  const int64_t from_tiers = st.prefix_cache_host_hit_tokens + st.prefix_cache_store_hit_tokens;
  pool_hits_->SetTotal(static_cast<double>(std::max<int64_t>(0, st.prefix_cache_hit_tokens -
                                                                    from_tiers)));
  host_hits_->SetTotal(static_cast<double>(st.prefix_cache_host_hit_tokens));
  store_hits_->SetTotal(static_cast<double>(st.prefix_cache_store_hit_tokens));
  const engine::KvTierStats& t = st.tiers;
  fetches_->SetTotal(static_cast<double>(t.fetches));
  fetch_failures_->SetTotal(static_cast<double>(t.fetch_failures));
  fetch_seconds_->SetTotal(static_cast<double>(t.fetch_nanos) * 1e-9);
  fetched_blocks_->SetTotal(static_cast<double>(t.fetched_blocks));
  fetched_bytes_->SetTotal(static_cast<double>(t.fetched_bytes));
  writes_->SetTotal(static_cast<double>(t.writes));
  write_bytes_->SetTotal(static_cast<double>(t.write_bytes));
  dropped_writes_->SetTotal(static_cast<double>(t.dropped_writes));
  l1_write_failures_->SetTotal(static_cast<double>(t.l1_write_failures));
  l2_write_failures_->SetTotal(static_cast<double>(t.l2_write_failures));
  write_queue_depth_->Set(static_cast<double>(t.write_queue_depth));
  l1_bad_records_->SetTotal(static_cast<double>(t.l1_bad_records));
  tier_snapshot_writes_->SetTotal(static_cast<double>(t.snapshot_writes));
  tier_snapshot_reads_->SetTotal(static_cast<double>(t.snapshot_reads));
  vllm_queries_->SetTotal(static_cast<double>(st.prefix_cache_query_tokens));
  vllm_hits_->SetTotal(static_cast<double>(st.prefix_cache_hit_tokens));
  vllm_running_->Set(st.num_running);
  vllm_waiting_->Set(st.num_waiting);
  vllm_kv_usage_->Set(kv_usage_->value());
  vllm_gpu_cache_usage_->Set(kv_usage_->value());
  vllm_preemptions_->SetTotal(static_cast<double>(st.num_preemptions));
  forward_passes_->SetTotal(static_cast<double>(st.num_forward_passes));
  jump_forward_tokens_->SetTotal(static_cast<double>(st.jump_forward_tokens));
  spec_drafts_->SetTotal(static_cast<double>(st.spec_verify_steps));
  spec_draft_tokens_->SetTotal(static_cast<double>(st.spec_draft_tokens));
  spec_accepted_tokens_->SetTotal(static_cast<double>(st.spec_accepted_tokens));
  vllm_spec_drafts_->SetTotal(static_cast<double>(st.spec_verify_steps));
  vllm_spec_draft_tokens_->SetTotal(static_cast<double>(st.spec_draft_tokens));
  vllm_spec_accepted_tokens_->SetTotal(static_cast<double>(st.spec_accepted_tokens));
  varlen_steps_->SetTotal(static_cast<double>(st.spec_varlen_steps));
  verify_budget_->SetTotal(static_cast<double>(st.spec_verify_budget_total));
  verify_budget_last_->Set(static_cast<double>(st.spec_verify_budget_last));
  varlen_candidates_->SetTotal(static_cast<double>(st.spec_varlen_candidates_total));
  varlen_gated_->SetTotal(static_cast<double>(st.spec_varlen_gated_steps));
  varlen_benefit_gated_->SetTotal(static_cast<double>(st.spec_varlen_benefit_gated_steps));
  planner_no_table_->SetTotal(static_cast<double>(st.spec_planner_no_table));
  planner_no_stale_row_->SetTotal(static_cast<double>(st.spec_planner_no_stale_row));
  for (size_t j = 0; j < spec_accepted_per_pos_.size(); ++j) {
    const double v = j < st.spec_accepted_per_position.size()
                         ? static_cast<double>(st.spec_accepted_per_position[j])
                         : 0.0;
    spec_accepted_per_pos_[j]->SetTotal(v);
    vllm_spec_accepted_per_pos_[j]->SetTotal(v);
  }
}

}  // namespace deepinfer::api
