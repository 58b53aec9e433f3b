// Time-budgeted prefill chunk sizing (cluster.md §2.5, CHUNK-1..CHUNK-7).
//
//   cost(q, c) = k2·q² + k1·q·c + k0·q + d     one sequence's share of a step, ns
//   step time  = D + Σ_sequences cost(q_i, c_i)
// with q new tokens after a computed prefix of c tokens. The issue writes the same form as
// a·q² + b·q·c + d·q + e; here a = k2, b = k1, d = k0, e = d (+ D per step).
//
//  * FitCostModel  CHUNK-2 non-negative least squares on measured steps
//  * SolveChunk    CHUNK-5 largest q with cost(q, c) <= budget, caps and 128-rounding
//  * PackStep      CHUNK-4 FIFO walk filling one step's budget
//  * GroupBudget   CHUNK-6/7 MIN over the DP group's proposals
//
// Pure functions; no clock. Thread-safety: values only.
#ifndef DEEPINFER_CLUSTER_CHUNK_H_
#define DEEPINFER_CLUSTER_CHUNK_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace deepinfer::cluster {

// CHUNK-1 coefficients, all in ns (k2 ns/token², k1 ns/token², k0 ns/token, d and D ns).
struct CostModel {
  double k2 = 0;        // causal attention inside the chunk
  double k1 = 0;        // attention over the computed prefix
  double k0 = 0;        // linear work per token
  double d = 0;         // per-sequence overhead
  double step_ns = 0;   // D: per-step constant (launch, collectives)

  // cost(q, c) of one sequence (ns), without D.
  double Cost(int64_t q, int64_t c) const {
    const double qd = static_cast<double>(q), cd = static_cast<double>(c);
    return k2 * qd * qd + k1 * qd * cd + k0 * qd + d;
  }
  // Predicted cost of prefilling `tokens` new tokens after prefix `c` in chunks of at most
  // `chunk` tokens (ns, each chunk charged its own d, no D). Used as the "predicted cost" of a
  // queued request (PLB-5, PLB-11).
  double PrefillCost(int64_t tokens, int64_t c, int64_t chunk = 32768) const;
};

// One measured step: the sequences it carried and its wall time (ns).
struct MeasuredStep {
  struct Seq {
    int64_t q = 0;
    int64_t c = 0;
  };
  std::vector<Seq> seqs;
  double time_ns = 0;
};

// CHUNK-2: fits (k2, k1, k0, d, D) by non-negative least squares on the steps' wall times.
// Exact NNLS by enumeration of the 2^5 passive sets (the optimum is the unconstrained least
// squares solution on its passive set). d and D are separable only if some steps carry more
// than one sequence; with single-sequence steps only, d is 0 and D carries the constant.
// Errors: InvalidArgument if fewer than 2 steps, a step has no sequence, or a time is not
// positive and finite.
absl::StatusOr<CostModel> FitCostModel(const std::vector<MeasuredStep>& steps);

// Mean absolute percentage error of `model` on `steps` (CHUNK-2 acceptance uses <= 5%).
double MeanAbsPercentError(const CostModel& model, const std::vector<MeasuredStep>& steps);

// Chunk-solver inputs beyond the model.
struct ChunkLimits {
  int64_t remaining_tokens = 0;  // prompt tokens of this sequence not yet computed
  int64_t token_room = 32768;    // 32,768 - Σq already in the step
  int64_t align = 128;           // round down to a multiple unless the chunk ends the prompt
};

// CHUNK-5: the largest q with cost(q, c) <= budget_ns, clamped to remaining_tokens and
// token_room, rounded down to a multiple of `align` unless it finishes the prompt. Returns 0 if
// nothing fits (the caller applies the head-of-line progress guarantee, see PackStep).
int64_t SolveChunk(const CostModel& model, int64_t c, double budget_ns, const ChunkLimits& limits);

// A sequence waiting in a rank's FIFO.
struct PrefillSeq {
  uint64_t id = 0;
  int64_t computed = 0;  // c: prefix already computed (hit + earlier chunks)
  int64_t remaining = 0; // tokens left to compute
};

// One sequence's chunk in a planned step.
struct PlannedChunk {
  uint64_t id = 0;
  int64_t q = 0;
  int64_t c = 0;
  double cost_ns = 0;
};

// A planned step: chunks in FIFO order and the predicted step time (D + Σ cost).
struct StepPlan {
  std::vector<PlannedChunk> chunks;
  int64_t tokens = 0;
  double predicted_ns = 0;
};

// CHUNK-4: packs one step from `fifo` (head first) within `group_budget_ns` (the MIN of
// CHUNK-6) and `token_budget` tokens. B = group_budget - D - fixed_ns; walk the FIFO, solve
// each sequence for the largest q within B_left and the remaining token room, subtract, stop
// when B_left cannot fit min(128, remaining tokens of the next sequence). Progress guarantee
// (CHUNK-5): the head gets >= min(128, remaining) tokens even if that exceeds B.
StepPlan PackStep(const CostModel& model, const std::vector<PrefillSeq>& fifo,
                  double group_budget_ns, int64_t token_budget = 32768, double fixed_ns = 0);

// CHUNK-6: a rank's proposal b_r = min(cap, head deadline cap, cap - overrun debt); pass
// head_deadline_ns < 0 for "no deadline". Never below 0.
double ProposeBudget(double cap_ns, double head_deadline_ns, double overrun_debt_ns);

// CHUNK-6/7: the group budget = MIN over the ranks' proposals (an empty rank proposes its cap).
// `proposals` must be non-empty.
double GroupBudget(const std::vector<double>& proposals);

}  // namespace deepinfer::cluster

#endif  // DEEPINFER_CLUSTER_CHUNK_H_
