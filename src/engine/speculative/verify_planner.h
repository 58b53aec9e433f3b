// Confidence-scheduled variable-length verification (issue #26; ../shared/spec/speculative.md
// §5): how many draft tokens a step verifies, and which ones.
//
// A step verifies, for every speculating request r, a prefix ℓ_r of its drafts. With c_{r,j} the
// conditional acceptance estimate of draft j (given drafts < j were accepted) and the survival
// a_{r,j} = Π_{i≤j} c_{r,i}, the expected committed tokens are τ = N_s + Σ_r Σ_{j≤ℓ_r} a_{r,j}
// and the step costs T(M) for M = N_nd + Σ ℓ_r target tokens; the planner maximises Θ = τ / T.
//
// The production split (spec §5.2, after vLLM #47808 and DeepInfer's async scheduler):
//   - PlanVerifyBudget (the "CPU" half, steps 1-7) fixes the total B* from STALE confidences
//     (staged two steps earlier, independent of the drafts being verified), by a global argmax
//     over B — Θ is not unimodal on a staircase cost curve, and the stale inputs make the
//     search safe (§4.4);
//   - AllocateVerifyLengths (the "device" half, steps 8-10) splits B* as the global top-B* of the
//     CURRENT survivals with the value-independent tie-break (−a, j, r), so the admission of
//     (r, j) depends on d_{r,<j} and on other requests' drafts, never on d_{r,j} (§4.4).
// PlanSyncGreedyStop is the paper's synchronous Algorithm 1 (§5.3, early stop at the first
// non-improving candidate), the reference semantics and the non-async mode.
//
// Units: milliseconds for costs, tokens for counts. Thread-safety: CostTable is immutable after
// construction (const methods may be called from any thread); the rest are pure functions.
#ifndef DEEPINFER_ENGINE_SPECULATIVE_VERIFY_PLANNER_H_
#define DEEPINFER_ENGINE_SPECULATIVE_VERIFY_PLANNER_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace deepinfer::engine {

// Step time vs target tokens M (and an optional additive cost vs the number of requests R, the
// draft pass and other batch-dependent work: T(M, R) = verify(M) + batch(R)), spec §5.4.
//
// Lookup of a curve at x: the points are made monotone (running max over x, so more tokens never
// look cheaper); for x <= max_captured (sizes execution pads to, e.g. CUDA graphs) the cost is a
// step function: the value at the first point with x_i >= x (never interpolated inside a pad
// bucket); above it, linear interpolation between the neighbouring points; below the first point
// the first value; above the last point the last segment's slope extended (real steps run there;
// a single point extends flat). An empty batch curve is 0.
class CostTable {
 public:
  struct Point {
    int x = 0;        // M (target tokens) or R (requests), >= 1
    double ms = 0.0;  // measured step time, >= 0
  };

  // Errors: InvalidArgument when `verify` is empty, an x is < 1 or repeated, or a time is
  // negative or not finite. Points may come in any order.
  static absl::StatusOr<CostTable> Create(std::vector<Point> verify, std::vector<Point> batch = {},
                                          int max_captured = 0);

  // JSON: {"verify": [{"tokens": M, "ms": t}, ...], "batch": [{"requests": R, "ms": t}, ...],
  // "max_captured_tokens": N} ("batch" and "max_captured_tokens" optional). Errors:
  // InvalidArgument naming the problem (parse error, missing field, Create's checks).
  static absl::StatusOr<CostTable> FromJson(std::string_view text);
  // The JSON above (the monotone points), FromJson(ToJson()) == *this.
  std::string ToJson() const;
  // File forms. Errors: NotFound / DataLoss from reading or writing, FromJson's errors with the
  // path in the message.
  static absl::StatusOr<CostTable> Load(const std::string& path);
  absl::Status Save(const std::string& path) const;

  // T(M, R) in ms: verify curve at m plus batch curve at r (r <= 0: no batch term).
  double StepMs(int m, int r = 0) const;
  // True when the verify curve is constant (every extra verified token looks free: the planner
  // then verifies everything, spec §5.4).
  bool flat() const;

  const std::vector<Point>& verify_points() const { return verify_; }
  const std::vector<Point>& batch_points() const { return batch_; }
  int max_captured() const { return max_captured_; }

 private:
  static double Lookup(const std::vector<Point>& pts, int x, int max_captured);
  std::vector<Point> verify_;  // ascending x, monotone ms
  std::vector<Point> batch_;
  int max_captured_ = 0;
};

// Survivals a_j = Π_{i<=j} clamp(c_i, 0, 1), j = 1..c.size() (non-increasing).
std::vector<double> Survivals(std::span<const double> confidence);

// One request of a step, as the planner sees it.
struct PlannerRequest {
  // Calibrated conditional confidences c_1..c_k of its drafts (stale ones for the planner,
  // current ones for the allocator). Missing entries (size < cap) count as neutral 1.0, spec
  // §5.2 step 1 (new, just prefilled or recycled requests: the whole block is a candidate).
  std::vector<double> confidence;
  // Drafts it may verify this step (0..k): min(k, drafts proposed, tokens left - 1, context).
  int cap = 0;
  // Whether it samples a token this step (counts 1 in N_s; every sampling request emits >= 1).
  bool samples = true;
  // Target tokens it computes besides drafts (1 anchor for a decode; a prefill chunk's length).
  int non_draft_tokens = 1;
};

struct BudgetOptions {
  // Most draft tokens a step may verify in total (e.g. a logits-chunk limit minus R); < 0 = none.
  int max_total_drafts = -1;
  // Tokens and samples of the step that belong to no PlannerRequest (prefill chunks of
  // non-speculating requests, decodes of requests that do not speculate).
  int extra_non_draft_tokens = 0;
  int extra_samples = 0;
  // Sequences in the batch besides `requests` (the batch curve's R counts them too).
  int extra_requests = 0;
  // Added to every T (ms): the untrimmable per-step cost a forward-only table misses (engine
  // overhead, sampling); too small a bias makes every verify token look expensive (spec §5.4).
  double bias_ms = 0;
};

// The planner's decision for one step (spec §5.2 steps 4-7).
struct BudgetPlan {
  int budget = 0;              // B*: draft tokens the step verifies in total
  int candidates = 0;          // min(Σ cap_r, max_total_drafts)
  int target_tokens = 0;       // M = N_nd + B*
  double expected_tokens = 0;  // τ̄(B*) from the planner's confidences
  double step_ms = 0;          // T(M, R)
  double theta = 0;            // Θ̄(B*) = τ̄ / T (tokens per ms)
  bool no_table = false;       // planned without a cost table: verify-all (fallback)
  int neutral_rows = 0;        // requests whose confidences were (partly) missing
  // Placeholder split (step 7): B* spread evenly over requests with cap > 0 in order, capped,
  // Σ == budget. The allocator replaces it with the confidence-ranked split.
  std::vector<int> placeholder;
};

// Steps 1-7 of spec §5.2 over `requests` (their confidences are the stale rows): candidates are
// the survivals of j <= cap_r, sorted by (−ā, j, r); τ̄(B) = N_s + the top-B sum;
// T(B) = table->StepMs(N_nd + B, R); B* = the global argmax of τ̄/T over B = 0..candidates, ties
// to the smaller B (so B* = 0 whenever plain decoding is at least as good — the baseline check).
// `table` nullptr: B* = candidates (verify-all) with no_table set.
BudgetPlan PlanVerifyBudget(std::span<const PlannerRequest> requests, const CostTable* table,
                            const BudgetOptions& options = {});

// Steps 8-10 of spec §5.2: ℓ_r = the number of request r's slots among the global top-`budget`
// candidates {(r, j) : j <= cap_r} ranked by the CURRENT survivals with key (−a_{r,j}, j, r).
// Each ℓ_r is a prefix length (a is non-increasing and ties go to earlier slots), ℓ_r <= cap_r,
// Σ ℓ_r = min(budget, Σ cap_r).
std::vector<int> AllocateVerifyLengths(std::span<const PlannerRequest> requests, int budget);

// The paper's Algorithm 1 (spec §5.3) on fresh confidences: admit candidates in (−a, j, r) order
// while each strictly improves Θ = τ / T(N_nd + B, R); stop at the first that does not. Returns
// ℓ_r per request. `table` nullptr: verify-all (ℓ_r = cap_r). Optimal only when Θ is unimodal
// in B; lossless because of the early stop (§4.4).
std::vector<int> PlanSyncGreedyStop(std::span<const PlannerRequest> requests,
                                    const CostTable* table, const BudgetOptions& options = {});

// τ = N_s + Σ_r Σ_{j<=ℓ_r} a_{r,j} for given lengths (N_s from requests' `samples` and
// options.extra_samples).
double ExpectedTokens(std::span<const PlannerRequest> requests, std::span<const int> lengths,
                      const BudgetOptions& options = {});

}  // namespace deepinfer::engine

#endif  // DEEPINFER_ENGINE_SPECULATIVE_VERIFY_PLANNER_H_
