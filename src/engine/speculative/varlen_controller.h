// The engine side of confidence-scheduled variable-length verification (issue #26;
// ../shared/spec/speculative.md §5.2, §5.5, §7.1 items 7-8): per step, how many of each
// speculating sequence's drafts the step verifies.
//
// Modes (spec §5.9 names):
//   kOff:            verify every draft (fixed length).
//   kSyncGreedyStop: the paper's Algorithm 1 on the current confidences (PlanSyncGreedyStop).
//   kAsyncBudget:    the production split: the budget B* from STALE confidences (the rows staged
//                    two steps earlier, per sequence slot, by ConfidencePipeline — a CPU
//                    simulation of the device→host double buffer so staleness is exercised
//                    exactly as a GPU pipeline would see it), the per-sequence lengths as the
//                    top-B* of the CURRENT confidences (AllocateVerifyLengths).
// Below `min_concurrency` speculating sequences the step verifies the full block (§5.8: the
// step cost is flat there, trimming saves nothing and loses expected tokens).
//
// Benefit gate (`benefit_gate`, §5.8 "gate it by measured benefit"): the controller measures
// what each policy delivers — tokens committed by speculating sequences (OnCommitted) per
// millisecond the runner was busy (ObserveStep: launch to result, so idle time between requests
// never counts) from one planned step to the next, as an EMA (weight 1/8) per
// concurrency bucket (speculating sequences 1, 2-3, 4-7, ...) — and plans with variable lengths
// only where they measured at least as fast as verifying the full block. Both policies are
// measured alternately until each has kBenefitWarmupSteps samples in a bucket; after that the
// losing policy is still tried every kBenefitExplorePeriod-th step of the bucket, so a change
// of load (or of acceptance) is noticed. Steps the gate sends to full blocks count in
// benefit_gated_steps().
//
// Confidences: a drafter's own c_j (Sequence::draft_confidence: MTP's draft probability,
// DSpark's confidence head) when it gives one per draft; otherwise (n-gram, scripted) an
// estimate from the engine's running per-position acceptance statistics,
// c_j = (accepted at j + 1) / (examined at j + 1), where "examined at j" counts verify items that
// verified draft j with drafts 1..j-1 accepted (so c_j estimates P(d_j accepted | d_<j accepted));
// the +1/+1 prior starts every position neutral (1.0) like a missing row. Both counts decay by
// kEstimateDecay per planned step, so a position whose estimate fell (and is therefore rarely
// verified) drifts back toward the prior and gets re-tried instead of never learning again.
//
// Thread-safety: engine thread only.
#ifndef DEEPINFER_ENGINE_SPECULATIVE_VARLEN_CONTROLLER_H_
#define DEEPINFER_ENGINE_SPECULATIVE_VARLEN_CONTROLLER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/speculative/verify_planner.h"

namespace deepinfer::engine {

enum class VarlenMode { kOff, kSyncGreedyStop, kAsyncBudget };

// Per-step decay of the acceptance statistics (time constant 64 planned steps).
inline constexpr double kEstimateDecay = 1.0 - 1.0 / 64.0;
// Benefit gate: measured steps per policy and bucket before it decides, and how often the
// losing policy is re-measured afterwards.
inline constexpr int kBenefitWarmupSteps = 4;
inline constexpr int kBenefitExplorePeriod = 16;

// "off" | "sync" (also "sync_greedy_stop") | "async" (also "async_budget"); nullopt-like false
// return for anything else.
bool ParseVarlenMode(std::string_view text, VarlenMode* mode);
std::string_view VarlenModeName(VarlenMode mode);

// Stale confidence rows per sequence slot with step stamps (spec §5.5): Stage(step, slot, row)
// after the step's drafts are known; Stale(step, slot) returns the newest row staged at a step
// <= step - lag (lag 2: the copy of step t-2's row has landed when step t is planned), or nullptr.
// Rows carry the slot's owner generation, so a recycled slot never serves its previous occupant's
// scores. Rows older than `keep_steps` are dropped.
class ConfidencePipeline {
 public:
  struct Row {
    int64_t step = -1;
    uint64_t owner = 0;
    std::vector<double> confidence;
  };
  explicit ConfidencePipeline(int lag = 2, int64_t keep_steps = 64)
      : lag_(lag), keep_steps_(keep_steps) {}
  void Stage(int64_t step, uint64_t slot, uint64_t owner, std::vector<double> confidence);
  const Row* Stale(int64_t step, uint64_t slot, uint64_t owner) const;
  // Drops rows staged before step - keep_steps.
  void Prune(int64_t step);
  int lag() const { return lag_; }

 private:
  int lag_;
  int64_t keep_steps_;
  std::unordered_map<uint64_t, std::vector<Row>> rows_;  // per slot, oldest first, <= lag+1 rows
};

// What the controller planned for one step (tests: E12; metrics).
struct VarlenStepTrace {
  int64_t step = 0;
  VarlenMode mode = VarlenMode::kOff;
  bool gated = false;     // below min_concurrency: full blocks
  bool benefit_gated = false;  // the benefit gate chose full blocks (measured faster)
  int budget = -1;        // B* (async), Σ ℓ (sync), Σ cap (off / gated)
  bool no_table = false;  // planned without a cost table (verify-all fallback)
  int neutral_rows = 0;   // sequences without a stale row
  struct Seq {
    uint64_t slot = 0;
    int cap = 0;
    int length = 0;
    std::vector<double> current;  // confidences the split used
    int64_t stale_step = -1;      // stamp of the stale row the budget used (-1: neutral)
    std::vector<double> stale;
  };
  std::vector<Seq> seqs;
};

class VarlenController {
 public:
  struct Options {
    VarlenMode mode = VarlenMode::kOff;
    int min_concurrency = 0;
    std::shared_ptr<const CostTable> table;  // null: verify-all (counted as a fallback)
    int k_max = 5;
    // The measured-benefit gate (above); off: plan every step above min_concurrency.
    bool benefit_gate = false;
    // Called once per planned step (tests).
    std::function<void(const VarlenStepTrace&)> observer;
  };
  struct Input {
    uint64_t slot = 0;                          // a stable per-sequence id
    uint64_t owner = 0;                         // generation of the slot's occupant
    int cap = 0;                                // drafts it has (<= k_max)
    std::span<const float> drafter_confidence;  // empty or cap entries
  };

  explicit VarlenController(Options options);

  // Plans step `step` for the sequences in `in` (those with drafts), with `other_tokens` target
  // tokens and `other_samples` sampling sequences outside them (non-speculating decodes), and
  // `running` sequences in the batch. Returns ℓ per input (<= cap).
  std::vector<int> Plan(int64_t step, std::span<const Input> in, int other_tokens,
                        int other_samples, int running);
  // After a verify item: `verified` drafts of which the first `accepted` were accepted.
  void OnVerified(int verified, int accepted);
  // After any decode item of a speculating sequence: the tokens it committed (the benefit
  // gate's numerator).
  void OnCommitted(int tokens);
  // A finished engine step of `target_tokens` tokens that kept the runner busy for `ns` (also
  // the benefit gate's denominator): the part of its time the table does not explain (the engine's fixed per-step cost) is tracked
  // as a running mean (EMA, weight 1/16, never below 0) and added to every T. Without it a
  // forward-only table on a small model makes verify tokens look expensive and over-trims.
  void ObserveStep(int target_tokens, int64_t ns);
  double bias_ms() const { return bias_ms_; }

  // Counters (EngineStats).
  int64_t planned_steps() const { return planned_steps_; }
  int64_t gated_steps() const { return gated_steps_; }
  int64_t benefit_gated_steps() const { return benefit_gated_steps_; }
  // The benefit gate's measured committed tokens per ms in `bucket` (see above) for variable
  // lengths (varlen true) or full blocks, and how many steps that average holds (0: none).
  double MeasuredRate(int bucket, bool varlen) const;
  int MeasuredSteps(int bucket, bool varlen) const;
  // The concurrency bucket of `num_speculating` sequences: bit_width (1 -> 1, 2-3 -> 2, ...).
  static int BenefitBucket(int num_speculating);
  int64_t budget_total() const { return budget_total_; }
  int64_t candidates_total() const { return candidates_total_; }
  int last_budget() const { return last_budget_; }
  int64_t no_table_fallbacks() const { return no_table_; }
  int64_t neutral_rows() const { return neutral_rows_; }
  // The running estimate of c_j (j = 1..k_max).
  double EstimatedConfidence(int j) const;

 private:
  std::vector<double> Current(const Input& in) const;
  // Closes the measurement of the previous planned step (benefit gate).
  void CloseMeasurement();
  // Whether this step plans variable lengths (true) or verifies full blocks, by measured rate.
  bool BenefitChoosesVarlen(int bucket);

  struct Arm {
    double rate = 0;  // committed tokens per ms, EMA
    int steps = 0;
  };
  static constexpr int kMaxBuckets = 24;

  Options options_;
  ConfidencePipeline pipeline_;
  std::vector<double> examined_;  // [k_max], decayed counts
  std::vector<double> accepted_;  // [k_max]
  int64_t planned_steps_ = 0;
  int64_t gated_steps_ = 0;
  int64_t benefit_gated_steps_ = 0;
  Arm arms_[kMaxBuckets][2] = {};  // [bucket][varlen]
  int64_t bucket_steps_[kMaxBuckets] = {};
  int64_t busy_ns_since_plan_ = 0;
  int last_bucket_ = -1;  // -1: the previous step is not measured
  bool last_varlen_ = false;
  int64_t committed_since_plan_ = 0;
  int64_t budget_total_ = 0;
  int64_t candidates_total_ = 0;
  int last_budget_ = 0;
  int64_t no_table_ = 0;
  int64_t neutral_rows_ = 0;
  double bias_ms_ = 0;
  bool has_bias_ = false;
};

}  // namespace deepinfer::engine

#endif  // DEEPINFER_ENGINE_SPECULATIVE_VARLEN_CONTROLLER_H_
