// Cluster-fidelity simulation (cluster.md SIM-5 "cluster", OUT-5/6/7, EXP-1).
//
// One run = one fleet (PE instances of lockstep ranks, CE instances of lockstep ranks) fed a
// request-level WL-4 mix at a given arrival rate, under one (prefill policy, decode policy) pair:
//  * prefill "deepinfer": entrypoint bucket queues (PLB-1/10), PE instances allocated to buckets
//    every round from last round's demand (PLB-5/6/8, cluster::AllocateInstances /
//    ApplyHysteresis, PLB-9 moves), ranks pulling by remaining quota (PLB-11/12, OrderPulls,
//    BucketQueue::Pull), each step packed by the chunk solver within the group MIN budget
//    (CHUNK-4..7, PackStep / GroupBudget); baselines "random", "round_robin", "least_requests"
//    push each arrival to one PE rank (no buckets; the same chunk solver).
//  * decode "deepinfer": DLB-7 instance choice + DLB-3 rank choice (PickDecodeInstance,
//    PickDecodeRank) with entrypoint reservations (DLB-5), bound when the final prefill chunk
//    finishes (DLB-8); baselines "random", "round_robin", "least_requests", "least_kv",
//    "min_step_time" over all ranks of the serving CEs (DLB-6 filters apply to all).
//  * CE step = two-phase lockstep model (CM-2): t0 + max_r(b K_r) + max_r(a n_r), one token per
//    request per step; PE step = max over ranks of its packed plan's cost (CHUNK-1), both with a
//    per-rank lognormal noise factor (the variance sources EXP-1 asks for).
//  * KV hand-off: bytes / link bandwidth + 50 µs (CM-3).
//  * Autoscaler (AS-1..7) decides every `autoscaler.interval_s` for both roles (logged, OUT-7);
//    with `autoscaler.apply` its actions take effect: spares join, PE scale-in drains a PE
//    (DRAIN-3), CE scale-in drains a CE (DRAIN-1/2: out of routing, grace, then PlanDrainMoves
//    migration with KV transfer; requests no rank can take wait for capacity). A scheduled
//    `drain` of one CE exercises the same path without the autoscaler.
//
// RunClusterSim (mode "cluster") runs, for every listed policy, a bisection over the arrival
// rate for the highest rate meeting the SLO (OUT-6: TPOT p90, TTFT p90 per bucket), then one
// full report run at that rate (drained to empty, invariants checked), and compares with the
// ideal offline benchmark computed from the same workload sample (identical batches at the mean
// shape on every rank). F = rate_LB / rate_ideal (throughput per GPU at SLO, same fleet and mix).
#ifndef DEEPINFER_SIM_CLUSTER_SIM_H_
#define DEEPINFER_SIM_CLUSTER_SIM_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cluster/autoscaler.h"
#include "cluster/chunk.h"
#include "cluster/decode_lb.h"
#include "cluster/prefill_lb.h"
#include "cluster/rng.h"
#include "sim/sim_io.h"

namespace deepinfer::sim {

// Request-level WL-4 mix (a compact stand-in for WL-1..WL-3 that keeps their length, hit and
// output distributions; sessions are not tracked, so hits are drawn per request).
struct ClusterWorkloadConfig {
  double agent_fraction = 0.12;  // of requests (≈ 40% of prompt tokens)
  double arrival_cv = 2.0;       // Gamma inter-arrival CV (burstiness, WL-1)
  // Chat.
  double chat_first_turn_prob = 0.3;
  double template_median = 1500, template_sigma = 1.0;
  double history_median = 3000, history_sigma = 1.0;
  double user_median = 200, user_sigma = 1.2;
  double doc_prob = 0.1, doc_median = 20000, doc_sigma = 1.0;
  double chat_output_median = 400, chat_output_sigma = 0.9;
  int64_t chat_output_cap = 8192;
  double chat_hit_prob = 0.95;   // history found in the store
  // Agent.
  int64_t agent_initial_min = 8192, agent_initial_max = 40960;
  double agent_turn_mean = 20;   // turn index of a request (geometric)
  double agent_turn_tokens = 2900;  // context growth per turn (tool result + output), mean
  double tool_result_median = 1500, tool_result_sigma = 1.0;
  double agent_output_median = 300, agent_output_sigma = 0.9;
  int64_t context_cap = 1 << 20;
};

// One generated request (time-independent part).
struct ClusterRequestShape {
  int cls = 0;            // 0 chat, 1 agent
  int64_t prompt = 0;     // L
  int64_t hit = 0;        // cached prefix (multiple of 128, < L)
  int64_t output = 0;     // true output length (never read by routing, INV-7)
};

// Fleet, cost models and SLO of a cluster run.
struct ClusterConfig {
  int pe = 16, pe_ranks = 8, ce = 2, ce_ranks = 64;
  int pe_spares = 0, ce_spares = 0;
  cluster::CostModel prefill_model{0.1, 0.2, 30000, 200000, 3'000'000};  // §2.5 illustrative
  double prefill_noise_sigma = 0.05;
  // CM-2 decode step (ms): t0 + max_r(b K_r) + max_r(a n_r).
  double decode_t0_ms = 20, decode_a_ms = 0.3, decode_b_ms = 5e-6;
  double decode_noise_sigma = 0.05;
  int64_t decode_kv_capacity_tokens = 8'000'000;  // per rank
  double kv_bytes_per_token = 890;     // 113,920 B per 128-token block
  double link_gbps_per_rank = 50;      // 400 Gbps per 8 GPUs [SEED]
  cluster::PrefillLbConfig plb;
  cluster::DecodeLbConfig dlb;
  // SLO (OUT-6): TPOT p90 and TTFT p90 per bucket.
  double tpot_p90_ms = 50;
  std::array<double, cluster::kNumBuckets> ttft_p90_s = {3, 8, 20, 60};
  ClusterWorkloadConfig workload;
  // Autoscaler / drain.
  double autoscaler_interval_s = 10;
  bool autoscaler_apply = false;
  int drain_ce = -1;          // CE drained at drain_at_s (-1: none)
  double drain_at_s = 0;
  double drain_grace_s = 60;  // DRAIN-2
};

// Outcome of one run at one rate.
struct ClusterRunResult {
  double rate = 0;
  bool slo_pass = false;
  bool aborted = false;  // overload detected early (search runs only)
  int64_t measured = 0, completed_measured = 0;
  double tpot_p90_ms = 0;
  std::array<double, cluster::kNumBuckets> ttft_p90_s{};
  std::array<int64_t, cluster::kNumBuckets> bucket_requests{};
  double eta_prefill = 0, eta_attention = 0, eta_dispatch = 0;  // OUT-5
  double input_tok_s = 0, output_tok_s = 0;
  int64_t migrations = 0, autoscaler_actions = 0, bucket_moves = 0;
  bool invariants_pass = true;
  std::vector<std::string> invariant_rows;  // "name,pass,detail"
};

// Draws one request shape from the workload.
ClusterRequestShape DrawClusterRequest(const ClusterWorkloadConfig& w, cluster::Rng& rng);

// Ideal offline benchmark (OUT-6) for the fleet and workload: the highest request rate at
// which identical batches at the mean shape on every rank meet the SLO exactly (prefill: every
// rank busy, D amortized over full steps; decode: n* per rank with t0 + a n* + b n* K̄ = TPOT
// SLO). Returns {prefill-limited rate, decode-limited rate}; the ideal is the smaller.
std::array<double, 2> IdealRates(const ClusterConfig& c, uint64_t seed, int samples);

// One simulated run. `search`: stop at duration (no drain), abort early on clear overload,
// skip the per-run tables. Tables (report runs) go to `results` with `policy` as a column.
ClusterRunResult RunClusterOnce(const ClusterConfig& c, const std::string& prefill_policy,
                                const std::string& decode_policy, double rate, uint64_t seed,
                                double duration_s, double warmup_s, bool search,
                                Results* results, const std::string& policy);

}  // namespace deepinfer::sim

#endif  // DEEPINFER_SIM_CLUSTER_SIM_H_
