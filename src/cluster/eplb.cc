#include "cluster/eplb.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace deepinfer::cluster {

int SlotsPerRank(int num_logical, int ep, int redundant_per_rank) {
  CHECK_GT(ep, 0);
  return (num_logical + redundant_per_rank * ep + ep - 1) / ep;
}

void ReplicateExperts(std::span<const int64_t> weight, int num_phy, std::vector<int>& phy2log,
                      std::vector<int>& replica, std::vector<int>& cnt) {
  const int n = static_cast<int>(weight.size());
  CHECK_GE(num_phy, n);
  phy2log.resize(num_phy);
  replica.assign(num_phy, 0);
  cnt.assign(n, 1);
  for (int i = 0; i < n; ++i) phy2log[i] = i;
  for (int i = n; i < num_phy; ++i) {
    int best = 0;
    for (int e = 1; e < n; ++e) {
      // weight[e]/cnt[e] > weight[best]/cnt[best], exactly.
      const __int128 lhs = static_cast<__int128>(weight[e]) * cnt[best];
      const __int128 rhs = static_cast<__int128>(weight[best]) * cnt[e];
      if (lhs > rhs) best = e;
    }
    phy2log[i] = best;
    replica[i] = cnt[best];
    ++cnt[best];
  }
}

void BalancedPacking(std::span<const double> load, int num_packs, std::vector<int>& pack,
                     std::vector<int>& position) {
  const int n = static_cast<int>(load.size());
  CHECK_GT(num_packs, 0);
  CHECK_EQ(n % num_packs, 0);
  const int per_pack = n / num_packs;
  pack.assign(n, -1);
  position.assign(n, -1);
  if (per_pack == 1) {
    for (int i = 0; i < n; ++i) pack[i] = i, position[i] = 0;
    return;
  }
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return load[a] > load[b]; });
  std::vector<double> pack_load(num_packs, 0.0);
  std::vector<int> pack_items(num_packs, 0);
  for (int item : order) {
    int best = -1;
    for (int p = 0; p < num_packs; ++p) {
      if (pack_items[p] >= per_pack) continue;
      if (best < 0 || pack_load[p] < pack_load[best]) best = p;
    }
    pack[item] = best;
    position[item] = pack_items[best]++;
    pack_load[best] += load[item];
  }
}

absl::StatusOr<EplbPlacement> RebalanceExperts(std::span<const int64_t> weight, int num_slots,
                                               int num_groups, int num_nodes, int num_gpus) {
  const int num_logical = static_cast<int>(weight.size());
  if (num_gpus <= 0 || num_slots % num_gpus != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("eplb: num_slots ", num_slots, " is not a multiple of num_gpus ", num_gpus));
  }
  if (num_slots < num_logical) {
    return absl::InvalidArgumentError(
        absl::StrCat("eplb: num_slots ", num_slots, " < experts ", num_logical));
  }
  for (int64_t w : weight) {
    if (w < 0) return absl::InvalidArgumentError("eplb: negative expert load");
  }
  if (num_groups <= 0 || num_nodes <= 0 || num_groups % num_nodes != 0) {
    num_groups = 1;  // global policy
    num_nodes = 1;
  }
  if (num_logical % num_groups != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("eplb: experts ", num_logical, " not divisible by num_groups ", num_groups));
  }
  if (num_gpus % num_nodes != 0 || num_slots % num_nodes != 0 || num_logical % num_nodes != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("eplb: num_gpus ", num_gpus, " not divisible by num_nodes ", num_nodes));
  }
  const int group_size = num_logical / num_groups;
  const int groups_per_node = num_groups / num_nodes;
  const int slots_per_gpu = num_slots / num_gpus;
  const int log_per_node = num_logical / num_nodes;
  const int phy_per_node = num_slots / num_nodes;
  const int gpus_per_node = num_gpus / num_nodes;

  // Step 1: pack expert groups onto nodes.
  std::vector<double> group_load(num_groups, 0.0);
  for (int e = 0; e < num_logical; ++e) group_load[e / group_size] += static_cast<double>(weight[e]);
  std::vector<int> gpack, grank;
  BalancedPacking(group_load, num_nodes, gpack, grank);
  std::vector<int> log2mlog(num_logical), mlog2log(num_logical);
  for (int e = 0; e < num_logical; ++e) {
    const int g = e / group_size;
    log2mlog[e] = (gpack[g] * groups_per_node + grank[g]) * group_size + e % group_size;
  }
  for (int e = 0; e < num_logical; ++e) mlog2log[log2mlog[e]] = e;

  std::vector<int> pphy2mlog(num_slots), pphyrank(num_slots), mlogcnt(num_logical);
  for (int node = 0; node < num_nodes; ++node) {
    // Step 2: replicate inside the node.
    std::vector<int64_t> w(log_per_node);
    for (int i = 0; i < log_per_node; ++i) w[i] = weight[mlog2log[node * log_per_node + i]];
    std::vector<int> phy2mlog, phyrank, cnt;
    ReplicateExperts(w, phy_per_node, phy2mlog, phyrank, cnt);
    for (int i = 0; i < log_per_node; ++i) mlogcnt[node * log_per_node + i] = cnt[i];
    // Step 3: pack replicas onto the node's GPUs.
    std::vector<double> phy_load(phy_per_node);
    for (int i = 0; i < phy_per_node; ++i) {
      phy_load[i] = static_cast<double>(w[phy2mlog[i]]) / cnt[phy2mlog[i]];
    }
    std::vector<int> pack, pos;
    BalancedPacking(phy_load, gpus_per_node, pack, pos);
    for (int i = 0; i < phy_per_node; ++i) {
      const int pp = pack[i] * slots_per_gpu + pos[i];
      pphy2mlog[node * phy_per_node + pp] = phy2mlog[i] + node * log_per_node;
      pphyrank[node * phy_per_node + pp] = phyrank[i];
    }
  }
  EplbPlacement out;
  out.slots_per_rank = slots_per_gpu;
  out.phy2log.resize(num_slots);
  out.phy_replica = pphyrank;
  out.logcnt.resize(num_logical);
  for (int p = 0; p < num_slots; ++p) out.phy2log[p] = mlog2log[pphy2mlog[p]];
  for (int e = 0; e < num_logical; ++e) out.logcnt[e] = mlogcnt[log2mlog[e]];
  out.log2phy.assign(num_logical, {});
  for (int e = 0; e < num_logical; ++e) out.log2phy[e].assign(out.logcnt[e], -1);
  for (int p = 0; p < num_slots; ++p) out.log2phy[out.phy2log[p]][out.phy_replica[p]] = p;
  return out;
}

EplbPlacement ContiguousPlacement(int num_logical, int num_gpus, int slots_per_rank) {
  const int num_slots = num_gpus * slots_per_rank;
  CHECK_GE(num_slots, num_logical);
  EplbPlacement out;
  out.slots_per_rank = slots_per_rank;
  out.phy2log.resize(num_slots);
  out.phy_replica.resize(num_slots);
  out.logcnt.assign(num_logical, 0);
  out.log2phy.assign(num_logical, {});
  for (int p = 0; p < num_slots; ++p) {
    const int e = p % num_logical;
    out.phy2log[p] = e;
    out.phy_replica[p] = out.logcnt[e]++;
    out.log2phy[e].push_back(p);
  }
  return out;
}

int ChooseReplicaSlot(const EplbPlacement& placement, int expert, int64_t token_index,
                      int src_rank) {
  const int cnt = placement.logcnt[expert];
  const int j = static_cast<int>((token_index + src_rank) % cnt);
  return placement.log2phy[expert][j];
}

std::vector<double> PredictedRankLoads(const EplbPlacement& placement,
                                       std::span<const int64_t> weight, int num_gpus) {
  std::vector<double> loads(num_gpus, 0.0);
  for (size_t p = 0; p < placement.phy2log.size(); ++p) {
    const int e = placement.phy2log[p];
    loads[p / placement.slots_per_rank] += static_cast<double>(weight[e]) / placement.logcnt[e];
  }
  return loads;
}

void MoeLbAccumulator::Add(std::span<const double> rank_loads) {
  if (rank_loads.empty()) return;
  double mx = 0, sum = 0;
  for (double x : rank_loads) mx = std::max(mx, x), sum += x;
  sum_max_ += mx;
  sum_mean_ += sum / static_cast<double>(rank_loads.size());
}

EplbController::EplbController(EplbConfig config, int num_layers, int num_logical, int ep)
    : config_(config), num_layers_(num_layers), num_logical_(num_logical), ep_(ep) {
  CHECK_GT(config_.window_steps, 0);
  CHECK_GT(config_.period_steps, 0);
  slots_per_rank_ = SlotsPerRank(num_logical, ep, config.redundant_per_rank);
  window_sum_.assign(static_cast<size_t>(num_layers) * num_logical, 0);
  placements_.assign(num_layers, ContiguousPlacement(num_logical, ep, slots_per_rank_));
}

bool EplbController::RecordStep(std::span<const int64_t> counts) {
  CHECK_EQ(counts.size(), window_sum_.size());
  window_.emplace_back(counts.begin(), counts.end());
  for (size_t i = 0; i < counts.size(); ++i) window_sum_[i] += counts[i];
  if (static_cast<int>(window_.size()) > config_.window_steps) {
    const std::vector<int64_t>& old = window_.front();
    for (size_t i = 0; i < old.size(); ++i) window_sum_[i] -= old[i];
    window_.pop_front();
  }
  ++steps_;
  if (steps_ % config_.period_steps != 0) return false;
  for (int l = 0; l < num_layers_; ++l) {
    std::span<const int64_t> w(window_sum_.data() + static_cast<size_t>(l) * num_logical_,
                               num_logical_);
    auto p = RebalanceExperts(w, slots_per_rank_ * ep_, config_.num_groups, config_.num_nodes, ep_);
    CHECK(p.ok()) << p.status();
    placements_[l] = std::move(*p);
  }
  ++replacements_;
  return true;
}

}  // namespace deepinfer::cluster
