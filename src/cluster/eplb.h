// Expert-parallel load balancer (expert-parallel.md §2): redundant experts, placement,
// replica choice per pick, the moe_lb metric and the window/period controller.
//
// The placement algorithm is a C++ port of the semantics described in expert-parallel.md §2.2
// (DeepSeek EPLB: replicate by largest load/count, balanced packing with a cardinality
// constraint, hierarchical policy when groups divide nodes, else global), with the spec's
// determinism rules: integer loads, exact cross-multiplied comparison of load/count in the
// replication step, stable descending sorts, first index wins on every tie. Per-replica loads
// in the packing step are w/cnt in double (a single division per item, sums accumulated in the
// same order on every machine), since exact rationals would need LCMs of all counts; this is
// enough for goldens G1 and G2 (expert-parallel.md §2.2, §2.3).
//
// Pure code; no clock. Thread-safety: values only; EplbController is not thread-safe.
#ifndef DEEPINFER_CLUSTER_EPLB_H_
#define DEEPINFER_CLUSTER_EPLB_H_

#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "absl/status/statusor.h"

namespace deepinfer::cluster {

// EPR-2 / §2.8 rounding rule: slots per rank s = ceil((E + r·EP) / EP) for E logical experts,
// r redundant experts per rank and EP ranks (total slots s·EP, a multiple of EP).
int SlotsPerRank(int num_logical, int ep, int redundant_per_rank);

// Placement of one layer.
struct EplbPlacement {
  std::vector<int> phy2log;               // [num_slots] logical expert held by slot p
  std::vector<int> phy_replica;           // [num_slots] replica index of slot p within its expert
  std::vector<int> logcnt;                // [num_logical] replicas per logical expert (>= 1)
  std::vector<std::vector<int>> log2phy;  // [num_logical][logcnt[e]] slot of replica j
  int slots_per_rank = 0;
};

// §2.2 "Replicate": start with one replica per expert; each of the num_phy - n extra slots goes
// to the expert with the largest weight/cnt (first index on ties). Outputs phy2log [num_phy],
// replica index [num_phy] and cnt [n]. Requires num_phy >= n.
void ReplicateExperts(std::span<const int64_t> weight, int num_phy, std::vector<int>& phy2log,
                      std::vector<int>& replica, std::vector<int>& cnt);

// §2.2 "Balanced packing": n items into num_packs packs of exactly n/num_packs items (n must
// be a multiple); items by load descending (stable), each into the least-loaded pack that still
// has room (first on ties). Outputs pack [n] and position in pack [n]. Identity if n/m == 1.
void BalancedPacking(std::span<const double> load, int num_packs, std::vector<int>& pack,
                     std::vector<int>& position);

// §2.2: placement of one layer with `num_slots` slots over `num_gpus` ranks. Hierarchical when
// num_groups % num_nodes == 0, else global (the hierarchical routine with one group and one
// node). Errors: InvalidArgument (naming the parameter) when num_slots is not a multiple of
// num_gpus, num_slots < number of experts, experts not divisible by num_groups, num_gpus not
// divisible by num_nodes, or a negative load.
absl::StatusOr<EplbPlacement> RebalanceExperts(std::span<const int64_t> weight, int num_slots,
                                               int num_groups, int num_nodes, int num_gpus);

// Start-up / no-EPLB placement: slot p holds expert p mod E (slots beyond E wrap), i.e.
// [0..E-1, 0, 1, ...], with s slots per rank. With s·EP == E this is the contiguous layout.
EplbPlacement ContiguousPlacement(int num_logical, int num_gpus, int slots_per_rank);

// §2.5 recommended replica rule: replica (token_index + src_rank) mod cnt of expert `e`;
// returns the slot.
int ChooseReplicaSlot(const EplbPlacement& placement, int expert, int64_t token_index,
                      int src_rank);

// Load per rank [num_gpus] of one layer, given per-expert counts and the even-split assumption
// of §2.2 (each replica gets weight/cnt). Used for predicted moe_lb.
std::vector<double> PredictedRankLoads(const EplbPlacement& placement,
                                       std::span<const int64_t> weight, int num_gpus);

// §2.4 moe_lb = Σ_steps Σ_layers max_r load / Σ_steps Σ_layers mean_r load.
class MoeLbAccumulator {
 public:
  // Adds one (step, layer) observation: load per rank.
  void Add(std::span<const double> rank_loads);
  // The ratio (1.0 when nothing was added or every load was 0).
  double Value() const { return sum_mean_ > 0 ? sum_max_ / sum_mean_ : 1.0; }

 private:
  double sum_max_ = 0, sum_mean_ = 0;
};

// EPLB parameters of one role (§2.8 [SEED]).
struct EplbConfig {
  int redundant_per_rank = 4;
  int window_steps = 100;    // W
  int period_steps = 1000;   // M
  int num_groups = 1;        // V4: no expert groups
  int num_nodes = 1;

  static EplbConfig Prefill() { return {4, 100, 1000, 1, 1}; }
  static EplbConfig Decode() { return {1, 1000, 10000, 1, 1}; }
};

// Window/period controller of one EP group: keeps the per-layer logical counts of the last W
// steps and re-places every M steps (step numbers count RecordStep calls, from 1).
class EplbController {
 public:
  // `num_layers` MoE layers of `num_logical` experts over `ep` ranks.
  EplbController(EplbConfig config, int num_layers, int num_logical, int ep);

  // Records one step's logical pick counts, [num_layers][num_logical] row-major. When the step
  // number is a multiple of M, recomputes every layer's placement from the window totals and
  // returns true.
  bool RecordStep(std::span<const int64_t> counts);

  const EplbPlacement& placement(int layer) const { return placements_[layer]; }
  int slots_per_rank() const { return slots_per_rank_; }
  int64_t steps() const { return steps_; }
  int replacements() const { return replacements_; }

 private:
  EplbConfig config_;
  int num_layers_, num_logical_, ep_, slots_per_rank_;
  std::deque<std::vector<int64_t>> window_;
  std::vector<int64_t> window_sum_;  // [num_layers * num_logical]
  std::vector<EplbPlacement> placements_;
  int64_t steps_ = 0;
  int replacements_ = 0;
};

}  // namespace deepinfer::cluster

#endif  // DEEPINFER_CLUSTER_EPLB_H_
