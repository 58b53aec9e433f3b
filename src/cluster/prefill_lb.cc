#include "cluster/prefill_lb.h"

#include <algorithm>
#include <cmath>

#include "common/check.h"

namespace deepinfer::cluster {

int BucketOf(int64_t prompt_tokens, const PrefillLbConfig& config) {
  CHECK_GE(prompt_tokens, 0);
  int b = 0;
  while (b < kNumBuckets - 1 && prompt_tokens >= config.bucket_bounds[b]) ++b;
  return b;
}

int64_t QuotaHorizonNs(int bucket, const PrefillLbConfig& config) {
  CHECK(bucket >= 0 && bucket < kNumBuckets);
  return 2 * config.compute_quota_limit_ns[bucket];
}

int64_t RemainingQuota(int64_t horizon_ns, int64_t local_backlog_ns) {
  return horizon_ns - local_backlog_ns;
}

bool ShouldPull(int64_t remaining_ns, int64_t horizon_ns) {
  return 2 * remaining_ns >= horizon_ns;
}

void BucketDemandTracker::Admit(int bucket, int64_t cost_ns) {
  CHECK(bucket >= 0 && bucket < kNumBuckets);
  CHECK_GE(cost_ns, 0);
  admitted_[bucket] += cost_ns;
}

std::array<double, kNumBuckets> BucketDemandTracker::EndRound(
    const std::array<int64_t, kNumBuckets>& queued_ns, int ranks_per_instance) {
  CHECK_GT(ranks_per_instance, 0);
  std::array<double, kNumBuckets> r{};
  for (int b = 0; b < kNumBuckets; ++b) {
    const double d = static_cast<double>(admitted_[b]) +
                     config_.backlog_weight * static_cast<double>(queued_ns[b]);
    smoothed_[b] =
        first_round_ ? d : config_.smoothing * d + (1.0 - config_.smoothing) * smoothed_[b];
    r[b] = smoothed_[b] / (static_cast<double>(config_.round_ns) * ranks_per_instance);
    admitted_[b] = 0;
  }
  first_round_ = false;
  return r;
}

namespace {

// Bucket b with no instances is served by the nearest bucket that has some (ties: lower index).
void FillServedBy(BucketAllocation& a) {
  for (int b = 0; b < kNumBuckets; ++b) {
    if (a.instances[b] > 0) {
      a.served_by[b] = b;
      continue;
    }
    int best = -1;
    for (int dist = 1; dist < kNumBuckets && best < 0; ++dist) {
      if (b - dist >= 0 && a.instances[b - dist] > 0) best = b - dist;
      else if (b + dist < kNumBuckets && a.instances[b + dist] > 0) best = b + dist;
    }
    a.served_by[b] = best < 0 ? b : best;
  }
}

}  // namespace

double MaxLoad(const std::array<double, kNumBuckets>& demand, const BucketAllocation& alloc) {
  std::array<double, kNumBuckets> load{};
  for (int b = 0; b < kNumBuckets; ++b) load[alloc.served_by[b]] += demand[b];
  double m = 0;
  for (int b = 0; b < kNumBuckets; ++b) {
    if (load[b] <= 0) continue;
    if (alloc.instances[b] == 0) return INFINITY;
    m = std::max(m, load[b] / alloc.instances[b]);
  }
  return m;
}

BucketAllocation AllocateInstances(const std::array<double, kNumBuckets>& demand,
                                   int num_instances, const PrefillLbConfig& config) {
  CHECK_GE(num_instances, 1);
  std::array<double, kNumBuckets> r = demand;
  bool any = false;
  for (double x : r) {
    CHECK_GE(x, 0.0);
    any = any || x > 0;
  }
  // No demand at all: spread the fleet as if demand were equal, so every bucket has a server
  // when traffic arrives [OURS; PLB-6 says nothing about an idle fleet].
  if (!any) r.fill(1.0);

  // Groups of adjacent non-empty buckets [lo, hi] (PLB-3 merging).
  struct Group {
    int lo, hi;
    double r;
    double share;
    int n = 0;
  };
  std::vector<Group> groups;
  for (int b = 0; b < kNumBuckets; ++b) {
    if (r[b] > 0) groups.push_back({b, b, r[b], config.max_share[b]});
  }
  while (static_cast<int>(groups.size()) > num_instances) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < groups.size(); ++i) {
      if (groups[i].r + groups[i + 1].r < groups[best].r + groups[best + 1].r) best = i;
    }
    groups[best].hi = groups[best + 1].hi;
    groups[best].r += groups[best + 1].r;
    groups[best].share = std::min(1.0, groups[best].share + groups[best + 1].share);
    groups.erase(groups.begin() + best + 1);
  }
  auto cap = [&](const Group& g) {
    return std::max(1, static_cast<int>(std::floor(g.share * num_instances + 1e-9)));
  };
  int left = num_instances;
  for (Group& g : groups) g.n = 1, --left;
  for (; left > 0; --left) {
    int best = -1;
    for (int i = 0; i < static_cast<int>(groups.size()); ++i) {
      if (groups[i].n >= cap(groups[i])) continue;
      if (best < 0) {
        best = i;
        continue;
      }
      // Compare r_i / n_i > r_best / n_best exactly enough by cross multiplication.
      const double lhs = groups[i].r * groups[best].n, rhs = groups[best].r * groups[i].n;
      if (lhs > rhs || (lhs == rhs && groups[i].r > groups[best].r)) best = i;
    }
    if (best < 0) {  // every group at its cap: give the rest to the largest demand
      best = 0;
      for (int i = 1; i < static_cast<int>(groups.size()); ++i) {
        if (groups[i].r > groups[best].r) best = i;
      }
    }
    ++groups[best].n;
  }
  BucketAllocation a;
  for (const Group& g : groups) a.instances[g.lo] = g.n;
  FillServedBy(a);
  // Members of a merged group are served by its lower bucket, even when an outside bucket is
  // nearer.
  for (const Group& g : groups) {
    for (int b = g.lo; b <= g.hi; ++b) a.served_by[b] = g.lo;
  }
  return a;
}

BucketAllocation ApplyHysteresis(const std::array<double, kNumBuckets>& demand,
                                 const BucketAllocation& current, const BucketAllocation& target,
                                 const PrefillLbConfig& config, int* moved) {
  if (moved) *moved = 0;
  const double cur = MaxLoad(demand, current), tgt = MaxLoad(demand, target);
  const bool worth = (cur - tgt >= config.hysteresis_gain) || cur > 1.0;
  if (!worth || current.instances == target.instances) return current;
  BucketAllocation next = current;
  int moves = 0;
  for (; moves < config.max_moves_per_round; ++moves) {
    int from = -1, to = -1, best_surplus = 0, best_deficit = 0;
    for (int b = 0; b < kNumBuckets; ++b) {
      const int diff = next.instances[b] - target.instances[b];
      if (diff > best_surplus) best_surplus = diff, from = b;
      if (-diff > best_deficit) best_deficit = -diff, to = b;
    }
    if (from < 0 || to < 0) break;
    --next.instances[from];
    ++next.instances[to];
  }
  if (next.instances == target.instances) {
    next.served_by = target.served_by;
  } else {
    FillServedBy(next);
  }
  if (moved) *moved = moves;
  return next;
}

void BucketQueue::Push(const QueuedPrefill& item) {
  CHECK_GE(item.cost_ns, 0);
  items_.push_back(item);
  queued_cost_ns_ += item.cost_ns;
}

void BucketQueue::PushFront(const QueuedPrefill& item) {
  items_.push_front(item);
  queued_cost_ns_ += item.cost_ns;
}

std::vector<QueuedPrefill> BucketQueue::Pull(int64_t remaining_ns) {
  std::vector<QueuedPrefill> out;
  int64_t sum = 0;
  while (!items_.empty()) {
    const QueuedPrefill& h = items_.front();
    if (!out.empty() && sum + h.cost_ns > remaining_ns) break;
    sum += h.cost_ns;
    queued_cost_ns_ -= h.cost_ns;
    out.push_back(h);
    items_.pop_front();
  }
  return out;
}

std::vector<PullRequest> OrderPulls(std::vector<PullRequest> pulls) {
  std::stable_sort(pulls.begin(), pulls.end(), [](const PullRequest& a, const PullRequest& b) {
    if (a.remaining_ns != b.remaining_ns) return a.remaining_ns > b.remaining_ns;
    return a.rank < b.rank;
  });
  return pulls;
}

int PickEntrypoint(const std::vector<int64_t>& head_arrival_ns) {
  int best = -1;
  for (int i = 0; i < static_cast<int>(head_arrival_ns.size()); ++i) {
    if (head_arrival_ns[i] < 0) continue;
    if (best < 0 || head_arrival_ns[i] < head_arrival_ns[best]) best = i;
  }
  return best;
}

bool BucketOverloaded(int64_t queued_cost_ns, int bucket_ranks, bool agent_class,
                      const PrefillLbConfig& config) {
  if (bucket_ranks <= 0) return true;
  const int64_t limit = agent_class ? config.agent_queue_limit_ns : config.chat_queue_limit_ns;
  return queued_cost_ns / bucket_ranks > limit;
}

}  // namespace deepinfer::cluster
