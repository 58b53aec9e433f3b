// Decode load balancer policy (cluster.md §3.1-3.2, DLB-1..DLB-7).
//
// Two dimensions per rank: running requests n_r (dispatch/combine phase) and total KV length K_r
// (attention phase). DLB-3 score, lower is better:
//   s_r(ℓ) = w_n · n_r / N̄ + w_K · (ℓ / ℓ̄) · K_r / K̄,   N̄, K̄ means over candidates (floored
//   at 1), ℓ̄ = K̄ / N̄,
// with weights from the decode step model t = t0 + a·n + b·K (DLB-4). Pure functions.
// Thread-safety: values only.
#ifndef DEEPINFER_CLUSTER_DECODE_LB_H_
#define DEEPINFER_CLUSTER_DECODE_LB_H_

#include <cstdint>
#include <vector>

namespace deepinfer::cluster {

// Parameters of the decode LB with the spec's defaults.
struct DecodeLbConfig {
  // DLB-2: default expected output length when no EWMA exists (tokens).
  int64_t default_output_tokens = 600;
  // DLB-6: KV reserve per rank as a fraction of its capacity.
  double kv_reserve_fraction = 0.05;
  // DLB-6: max running requests per rank (2 x the seed's 60).
  int64_t max_running_per_rank = 120;
  // DLB-4: step model slopes, ms per request and ms per KV token (defaults: the §3.2 example).
  double step_ms_per_request = 0.15;
  double step_ms_per_kv_token = 5e-6;
};

// DLB-1 load of one rank (including this entrypoint's unreported reservations, DLB-5).
struct RankLoad {
  int64_t running = 0;      // n_r
  int64_t kv_tokens = 0;    // K_r
  int64_t kv_capacity = 0;  // tokens of KV the rank can hold (0 = unlimited, filter off)
  bool draining = false;
};

// DLB-2: request size ℓ = L + min(max_tokens, expected output). `max_tokens` <= 0 means none.
int64_t DecodeRequestSize(int64_t prompt_tokens, int64_t max_tokens, int64_t expected_output);

// DLB-4: w_n = a·N̄ / (a·N̄ + b·K̄) for the given means (w_K = 1 - w_n). 0.5 if both terms are 0.
double RequestWeight(double mean_running, double mean_kv, const DecodeLbConfig& config = {});

// DLB-6: true if rank `r` may take a request of size ℓ.
bool RankEligible(const RankLoad& r, int64_t size, const DecodeLbConfig& config = {});

// DLB-3 scores of every rank for a request of size ℓ, with w_n given (w_K = 1 - w_n). Means are
// taken over the eligible ranks (DLB-6); ineligible ranks get +infinity.
std::vector<double> DecodeScores(const std::vector<RankLoad>& ranks, int64_t size, double w_n,
                                 const DecodeLbConfig& config = {});

// DLB-3: index of the rank with the lowest score (ties: lowest index); w_n from DLB-4 on the
// eligible ranks' means. Returns -1 if no rank is eligible.
int PickDecodeRank(const std::vector<RankLoad>& ranks, int64_t size,
                   const DecodeLbConfig& config = {});

// Totals of one CE instance for DLB-7's first level.
struct InstanceLoad {
  int64_t running = 0, running_capacity = 1;
  int64_t kv_tokens = 0, kv_capacity = 1;
  bool draining = false;
};

// DLB-7 first level: the non-draining instance with the lowest max(Σn/N_cap, ΣK/K_cap) (ties:
// lowest index). With more than 4 candidates, power of two choices: two distinct candidates are
// drawn from `random_bits` (two independent uniform 64-bit words) and the better one is taken.
// Returns -1 if none is eligible.
int PickDecodeInstance(const std::vector<InstanceLoad>& instances, uint64_t random_a,
                       uint64_t random_b);

}  // namespace deepinfer::cluster

#endif  // DEEPINFER_CLUSTER_DECODE_LB_H_
