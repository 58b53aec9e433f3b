// Prefill load balancer policy (cluster.md §2.2-2.4, rules PLB-1..PLB-12, PLB-15).
//
// Pure functions and plain value types: no I/O, no threads, no clock. Time (integer ns) and
// predicted costs (ns, from the CHUNK-1 cost model) are inputs. The real entrypoint/PE roles and
// the simulator (src/sim) both call these.
//
//  * BucketOf                  PLB-1  context-length bucket of a request
//  * BucketDemandTracker       PLB-5  per-round demand D_b and its smoothing
//  * AllocateInstances         PLB-6/7 greedy min-max allocation of PE instances to buckets
//  * ApplyHysteresis           PLB-8  whether / how far to move towards the target
//  * BucketQueue               PLB-10/12 entrypoint FIFO, pull by remaining quota
//  * RemainingQuota/ShouldPull PLB-11/12
//  * OrderPulls                PLB-12 racing pulls: larger remaining quota first
//
// Thread-safety: values only; callers synchronize.
#ifndef DEEPINFER_CLUSTER_PREFILL_LB_H_
#define DEEPINFER_CLUSTER_PREFILL_LB_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

namespace deepinfer::cluster {

// Number of context-length buckets (PLB-1).
inline constexpr int kNumBuckets = 4;

// Parameters of the prefill LB, with the seed's / spec's defaults.
struct PrefillLbConfig {
  // Lower bounds (tokens) of buckets 1..3; bucket 0 starts at 0 (PLB-1) [SEED].
  std::array<int64_t, kNumBuckets - 1> bucket_bounds = {16384, 65536, 262144};
  // Per-bucket step time budget `compute_quota_limit` in ns (PLB-2) [OURS defaults].
  std::array<int64_t, kNumBuckets> compute_quota_limit_ns = {400'000'000, 800'000'000,
                                                             1'500'000'000, 3'000'000'000};
  // Per-step token budget of a DP group (PLB-2, CHUNK-4) [SEED].
  int64_t step_token_budget = 32768;
  // Maximum share of all PE instances per bucket (PLB-2); 1.0 = no cap.
  std::array<double, kNumBuckets> max_share = {1.0, 1.0, 1.0, 0.5};
  // Round length W in ns (PLB-4).
  int64_t round_ns = 30'000'000'000;
  // D_b = A_b + backlog_weight * Q_b (PLB-5).
  double backlog_weight = 0.5;
  // D̂ = smoothing * D + (1 - smoothing) * D̂_prev (PLB-5).
  double smoothing = 0.5;
  // PLB-8: minimum gain of max load to apply a new target, and moves per round.
  double hysteresis_gain = 0.05;
  int max_moves_per_round = 2;
  // Queue limits per traffic class for PLB-15 (ns): chat, agent.
  int64_t chat_queue_limit_ns = 60'000'000'000;
  int64_t agent_queue_limit_ns = 300'000'000'000;
};

// PLB-1: bucket index in [0, 4) of a request whose total prompt length (hit included) is
// `prompt_tokens` (>= 0). Bounds are half-open: 16,384 belongs to bucket 1.
int BucketOf(int64_t prompt_tokens, const PrefillLbConfig& config = {});

// PLB-11: horizon H of a rank serving `bucket` = 2 x its compute_quota_limit (ns).
int64_t QuotaHorizonNs(int bucket, const PrefillLbConfig& config = {});

// PLB-11: remaining compute quota Q = H - (predicted cost of the local FIFO + remaining cost of
// in-progress sequences), all in ns. May be negative (over-committed).
int64_t RemainingQuota(int64_t horizon_ns, int64_t local_backlog_ns);

// PLB-12: a rank pulls when Q >= H / 2.
bool ShouldPull(int64_t remaining_ns, int64_t horizon_ns);

// PLB-5: tracks per-bucket demand over rounds. Costs are predicted rank-ns.
class BucketDemandTracker {
 public:
  explicit BucketDemandTracker(PrefillLbConfig config = {}) : config_(config) {}

  // Work of predicted cost `cost_ns` admitted to `bucket` during the current round (A_b).
  void Admit(int bucket, int64_t cost_ns);

  // Ends the round: `queued_ns[b]` is the predicted cost still queued or unfinished in b (Q_b).
  // Updates D̂_b and returns r_b = D̂_b / (W x ranks_per_instance), the demand in
  // instance-equivalents of busy time. Resets A_b.
  std::array<double, kNumBuckets> EndRound(const std::array<int64_t, kNumBuckets>& queued_ns,
                                           int ranks_per_instance);

  // Smoothed demand D̂_b in rank-ns (after the last EndRound).
  const std::array<double, kNumBuckets>& smoothed() const { return smoothed_; }

 private:
  PrefillLbConfig config_;
  std::array<int64_t, kNumBuckets> admitted_{};
  std::array<double, kNumBuckets> smoothed_{};
  bool first_round_ = true;
};

// An allocation of PE instances to buckets.
struct BucketAllocation {
  // Instances per bucket; a bucket with 0 instances and demand is served by `served_by`.
  std::array<int, kNumBuckets> instances{};
  // PLB-3 merging: bucket b's queue is pulled by the instances of bucket served_by[b]
  // (served_by[b] == b unless b was merged into an adjacent bucket).
  std::array<int, kNumBuckets> served_by = {0, 1, 2, 3};
};

// Max over buckets served by themselves of r_b / n_b, where a merged bucket's demand counts
// towards the bucket serving it (the PLB-6 objective). Buckets with r = 0 and n = 0 contribute 0.
double MaxLoad(const std::array<double, kNumBuckets>& demand, const BucketAllocation& alloc);

// PLB-6 + PLB-7 (+ PLB-3 merging): target allocation of `num_instances` (>= 1) instances given
// demand r_b (instance-equivalents, >= 0). A bucket is non-empty when r_b > 0. Each non-empty
// bucket gets one instance; the rest go one at a time to the largest r_b / n_b (ties: larger r_b,
// then lower index), never beyond floor(max_share_b x N) (but at least 1). With fewer instances
// than non-empty buckets, adjacent buckets are merged (smallest combined demand first) and the
// merged group is served by its lower bucket. Instances nobody can take (all capped) go to the
// uncapped bucket with the largest demand, else to bucket 0.
BucketAllocation AllocateInstances(const std::array<double, kNumBuckets>& demand,
                                   int num_instances, const PrefillLbConfig& config = {});

// PLB-8: the allocation to use this round, given the current one and the PLB-6 target. Applies
// the target only if it lowers MaxLoad by >= hysteresis_gain or some bucket's utilization
// r_b / n_b under the current allocation is > 1.0; then moves at most max_moves_per_round
// instances, each from the bucket with the largest surplus (current - target; ties lower index)
// to the one with the largest deficit (ties lower index). `moved` (optional) gets the count.
BucketAllocation ApplyHysteresis(const std::array<double, kNumBuckets>& demand,
                                 const BucketAllocation& current, const BucketAllocation& target,
                                 const PrefillLbConfig& config = {}, int* moved = nullptr);

// A queued prefill request as the entrypoint sees it.
struct QueuedPrefill {
  uint64_t id = 0;
  int64_t arrival_ns = 0;
  int64_t cost_ns = 0;  // predicted cost (CHUNK-1) of the whole uncached prefill
};

// PLB-10/12: one entrypoint's FIFO for one bucket, arrival order.
class BucketQueue {
 public:
  void Push(const QueuedPrefill& item);
  // PLB-9 / FT-4: returns an item to the head (unstarted local FIFO items of a moving or dead
  // rank); items pushed back keep FIFO order among themselves when pushed back last-first.
  void PushFront(const QueuedPrefill& item);
  // PLB-12: items in FIFO order while their cumulative cost <= `remaining_ns`, and always at
  // least one (however large) when the queue is non-empty.
  std::vector<QueuedPrefill> Pull(int64_t remaining_ns);
  bool empty() const { return items_.empty(); }
  size_t size() const { return items_.size(); }
  // Head (the queue must be non-empty).
  const QueuedPrefill& head() const { return items_.front(); }
  // Sum of predicted costs (ns).
  int64_t queued_cost_ns() const { return queued_cost_ns_; }

 private:
  std::deque<QueuedPrefill> items_;
  int64_t queued_cost_ns_ = 0;
};

// A rank's pull: who asks and with how much remaining quota (ns).
struct PullRequest {
  int rank = 0;
  int64_t remaining_ns = 0;
};

// PLB-12: order in which racing pulls are served: larger remaining quota first, ties lower rank.
std::vector<PullRequest> OrderPulls(std::vector<PullRequest> pulls);

// PLB-12: which entrypoint a rank asks: the one whose head arrived first (ties: lower index).
// `head_arrival_ns[i]` is entrypoint i's head arrival, or -1 if its queue is empty. Returns -1
// when every queue is empty.
int PickEntrypoint(const std::vector<int64_t>& head_arrival_ns);

// PLB-15: true if a new request for a bucket must be rejected: queued predicted cost (rank-ns)
// divided by the bucket's rank count exceeds the class's queue limit.
bool BucketOverloaded(int64_t queued_cost_ns, int bucket_ranks, bool agent_class,
                      const PrefillLbConfig& config = {});

}  // namespace deepinfer::cluster

#endif  // DEEPINFER_CLUSTER_PREFILL_LB_H_
