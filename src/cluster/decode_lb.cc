#include "cluster/decode_lb.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/check.h"

namespace deepinfer::cluster {

int64_t DecodeRequestSize(int64_t prompt_tokens, int64_t max_tokens, int64_t expected_output) {
  const int64_t o = max_tokens > 0 ? std::min(max_tokens, expected_output) : expected_output;
  return prompt_tokens + o;
}

double RequestWeight(double mean_running, double mean_kv, const DecodeLbConfig& config) {
  const double a = config.step_ms_per_request * mean_running;
  const double b = config.step_ms_per_kv_token * mean_kv;
  return a + b > 0 ? a / (a + b) : 0.5;
}

bool RankEligible(const RankLoad& r, int64_t size, const DecodeLbConfig& config) {
  if (r.draining) return false;
  if (r.running >= config.max_running_per_rank) return false;
  if (r.kv_capacity > 0) {
    const double reserve = config.kv_reserve_fraction * static_cast<double>(r.kv_capacity);
    if (static_cast<double>(r.kv_capacity - r.kv_tokens) < static_cast<double>(size) + reserve) {
      return false;
    }
  }
  return true;
}

namespace {

void Means(const std::vector<RankLoad>& ranks, int64_t size, const DecodeLbConfig& config,
           double& n_bar, double& k_bar, int& eligible) {
  double n = 0, k = 0;
  eligible = 0;
  for (const RankLoad& r : ranks) {
    if (!RankEligible(r, size, config)) continue;
    n += static_cast<double>(r.running);
    k += static_cast<double>(r.kv_tokens);
    ++eligible;
  }
  n_bar = eligible ? std::max(1.0, n / eligible) : 1.0;
  k_bar = eligible ? std::max(1.0, k / eligible) : 1.0;
}

}  // namespace

std::vector<double> DecodeScores(const std::vector<RankLoad>& ranks, int64_t size, double w_n,
                                 const DecodeLbConfig& config) {
  double n_bar, k_bar;
  int eligible;
  Means(ranks, size, config, n_bar, k_bar, eligible);
  const double l_bar = k_bar / n_bar;
  std::vector<double> s(ranks.size(), std::numeric_limits<double>::infinity());
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (!RankEligible(ranks[i], size, config)) continue;
    s[i] = w_n * static_cast<double>(ranks[i].running) / n_bar +
           (1.0 - w_n) * (static_cast<double>(size) / l_bar) *
               static_cast<double>(ranks[i].kv_tokens) / k_bar;
  }
  return s;
}

int PickDecodeRank(const std::vector<RankLoad>& ranks, int64_t size, const DecodeLbConfig& config) {
  double n_bar, k_bar;
  int eligible;
  Means(ranks, size, config, n_bar, k_bar, eligible);
  if (eligible == 0) return -1;
  const std::vector<double> s = DecodeScores(ranks, size, RequestWeight(n_bar, k_bar, config), config);
  int best = -1;
  for (int i = 0; i < static_cast<int>(s.size()); ++i) {
    if (!std::isfinite(s[i])) continue;
    if (best < 0 || s[i] < s[best]) best = i;
  }
  return best;
}

namespace {

double InstanceScore(const InstanceLoad& x) {
  return std::max(static_cast<double>(x.running) / std::max<int64_t>(1, x.running_capacity),
                  static_cast<double>(x.kv_tokens) / std::max<int64_t>(1, x.kv_capacity));
}

}  // namespace

int PickDecodeInstance(const std::vector<InstanceLoad>& instances, uint64_t random_a,
                       uint64_t random_b) {
  std::vector<int> cand;
  for (int i = 0; i < static_cast<int>(instances.size()); ++i) {
    if (!instances[i].draining) cand.push_back(i);
  }
  if (cand.empty()) return -1;
  if (cand.size() > 4) {
    const uint64_t n = cand.size();
    const uint64_t ia = random_a % n;
    uint64_t ib = random_b % (n - 1);
    if (ib >= ia) ++ib;
    const int a = cand[ia], b = cand[ib];
    const int lo = std::min(a, b), hi = std::max(a, b);
    return InstanceScore(instances[hi]) < InstanceScore(instances[lo]) ? hi : lo;
  }
  int best = cand[0];
  for (int i : cand) {
    if (InstanceScore(instances[i]) < InstanceScore(instances[best])) best = i;
  }
  return best;
}

}  // namespace deepinfer::cluster
