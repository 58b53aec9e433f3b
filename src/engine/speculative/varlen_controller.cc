#include "engine/speculative/varlen_controller.h"

#include <algorithm>
#include <bit>
#include <utility>

namespace deepinfer::engine {

bool ParseVarlenMode(std::string_view text, VarlenMode* mode) {
  if (text == "off") {
    *mode = VarlenMode::kOff;
  } else if (text == "sync" || text == "sync_greedy_stop") {
    *mode = VarlenMode::kSyncGreedyStop;
  } else if (text == "async" || text == "async_budget") {
    *mode = VarlenMode::kAsyncBudget;
  } else {
    return false;
  }
  return true;
}

std::string_view VarlenModeName(VarlenMode mode) {
  switch (mode) {
    case VarlenMode::kOff:
      return "off";
    case VarlenMode::kSyncGreedyStop:
      return "sync_greedy_stop";
    case VarlenMode::kAsyncBudget:
      return "async_budget";
  }
  return "off";
}

void ConfidencePipeline::Stage(int64_t step, uint64_t slot, uint64_t owner,
                               std::vector<double> confidence) {
  std::vector<Row>& rows = rows_[slot];
  if (!rows.empty() && rows.back().owner != owner) rows.clear();  // slot recycled: reset
  if (!rows.empty() && rows.back().step == step) rows.pop_back();
  rows.push_back({step, owner, std::move(confidence)});
  // Only the newest row at or below any future step - lag is ever read: keep lag + 1 rows.
  while (static_cast<int>(rows.size()) > lag_ + 1) rows.erase(rows.begin());
}

const ConfidencePipeline::Row* ConfidencePipeline::Stale(int64_t step, uint64_t slot,
                                                         uint64_t owner) const {
  auto it = rows_.find(slot);
  if (it == rows_.end()) return nullptr;
  const Row* best = nullptr;
  for (const Row& r : it->second) {
    if (r.owner == owner && r.step <= step - lag_) best = &r;  // rows are oldest first
  }
  return best;
}

void ConfidencePipeline::Prune(int64_t step) {
  for (auto it = rows_.begin(); it != rows_.end();) {
    if (it->second.empty() || it->second.back().step < step - keep_steps_) {
      it = rows_.erase(it);
    } else {
      ++it;
    }
  }
}

VarlenController::VarlenController(Options options)
    : options_(std::move(options)),
      examined_(std::max(options_.k_max, 1), 0.0),
      accepted_(std::max(options_.k_max, 1), 0.0) {}

double VarlenController::EstimatedConfidence(int j) const {
  if (j < 1 || j > static_cast<int>(examined_.size())) return 1.0;
  return (accepted_[j - 1] + 1.0) / (examined_[j - 1] + 1.0);
}

int VarlenController::BenefitBucket(int num_speculating) {
  return std::min(kMaxBuckets - 1,
                  static_cast<int>(std::bit_width(static_cast<unsigned>(std::max(num_speculating, 1)))));
}

double VarlenController::MeasuredRate(int bucket, bool varlen) const {
  if (bucket < 0 || bucket >= kMaxBuckets) return 0;
  return arms_[bucket][varlen ? 1 : 0].rate;
}

int VarlenController::MeasuredSteps(int bucket, bool varlen) const {
  if (bucket < 0 || bucket >= kMaxBuckets) return 0;
  return arms_[bucket][varlen ? 1 : 0].steps;
}

void VarlenController::CloseMeasurement() {
  if (last_bucket_ >= 0 && busy_ns_since_plan_ > 0) {
    Arm& a = arms_[last_bucket_][last_varlen_ ? 1 : 0];
    const double rate = static_cast<double>(committed_since_plan_) /
                        (static_cast<double>(busy_ns_since_plan_) / 1e6);
    a.rate = a.steps == 0 ? rate : a.rate + (rate - a.rate) / 8.0;
    ++a.steps;
  }
  last_bucket_ = -1;
  committed_since_plan_ = 0;
  busy_ns_since_plan_ = 0;
}

bool VarlenController::BenefitChoosesVarlen(int bucket) {
  const Arm& full = arms_[bucket][0];
  const Arm& var = arms_[bucket][1];
  const int64_t n = bucket_steps_[bucket]++;
  // Warm-up: measure both, alternating, the less measured first.
  if (full.steps < kBenefitWarmupSteps || var.steps < kBenefitWarmupSteps) {
    return var.steps <= full.steps;
  }
  const bool better = var.rate >= full.rate;
  return n % kBenefitExplorePeriod == 0 ? !better : better;
}

void VarlenController::OnCommitted(int tokens) { committed_since_plan_ += std::max(tokens, 0); }

void VarlenController::OnVerified(int verified, int accepted) {
  // Draft j was examined when it was verified and drafts 1..j-1 were accepted.
  for (int j = 1; j <= verified && j <= static_cast<int>(examined_.size()); ++j) {
    if (j - 1 > accepted) break;
    examined_[j - 1] += 1.0;
    if (j <= accepted) accepted_[j - 1] += 1.0;
  }
}

void VarlenController::ObserveStep(int target_tokens, int64_t ns) {
  if (ns > 0) busy_ns_since_plan_ += ns;
  if (options_.table == nullptr || target_tokens <= 0 || ns <= 0) return;
  const double residual =
      std::max(0.0, static_cast<double>(ns) / 1e6 - options_.table->StepMs(target_tokens));
  bias_ms_ = has_bias_ ? bias_ms_ + (residual - bias_ms_) / 16.0 : residual;
  has_bias_ = true;
}

std::vector<double> VarlenController::Current(const Input& in) const {
  std::vector<double> c(in.cap);
  const bool own = static_cast<int>(in.drafter_confidence.size()) >= in.cap;
  for (int j = 0; j < in.cap; ++j) {
    c[j] = own ? static_cast<double>(in.drafter_confidence[j]) : EstimatedConfidence(j + 1);
  }
  return c;
}

std::vector<int> VarlenController::Plan(int64_t step, std::span<const Input> in, int other_tokens,
                                        int other_samples, int running) {
  for (size_t j = 0; j < examined_.size(); ++j) {
    examined_[j] *= kEstimateDecay;
    accepted_[j] *= kEstimateDecay;
  }
  VarlenStepTrace trace;
  trace.step = step;
  trace.mode = options_.mode;
  std::vector<int> len(in.size(), 0);
  std::vector<PlannerRequest> current;
  int cap_sum = 0;
  for (const Input& i : in) {
    current.push_back({Current(i), i.cap, /*samples=*/true, /*non_draft_tokens=*/1});
    cap_sum += i.cap;
  }
  BudgetOptions bo;
  bo.extra_non_draft_tokens = other_tokens;
  bo.extra_samples = other_samples;
  bo.extra_requests = std::max(0, running - static_cast<int>(in.size()));
  bo.bias_ms = bias_ms_;
  trace.seqs.resize(in.size());
  for (size_t r = 0; r < in.size(); ++r) {
    trace.seqs[r].slot = in[r].slot;
    trace.seqs[r].cap = in[r].cap;
    trace.seqs[r].current = current[r].confidence;
  }
  if (options_.benefit_gate) CloseMeasurement();
  const bool gated =
      options_.mode == VarlenMode::kOff || static_cast<int>(in.size()) < options_.min_concurrency;
  bool benefit_gated = false;
  if (!gated && options_.benefit_gate) {
    const int bucket = BenefitBucket(static_cast<int>(in.size()));
    last_bucket_ = bucket;
    last_varlen_ = BenefitChoosesVarlen(bucket);
    benefit_gated = !last_varlen_;
  }
  if (gated || benefit_gated) {
    for (size_t r = 0; r < in.size(); ++r) len[r] = in[r].cap;
    trace.gated = gated && options_.mode != VarlenMode::kOff;
    trace.benefit_gated = benefit_gated;
    trace.budget = cap_sum;
    if (trace.gated) ++gated_steps_;
    if (benefit_gated) ++benefit_gated_steps_;
  } else if (options_.mode == VarlenMode::kSyncGreedyStop) {
    len = PlanSyncGreedyStop(current, options_.table.get(), bo);
    trace.no_table = options_.table == nullptr;
    trace.budget = 0;
    for (int l : len) trace.budget += l;
  } else {
    // Async: the budget from the stale rows only (independent of the drafts verified now).
    std::vector<PlannerRequest> stale;
    for (size_t r = 0; r < in.size(); ++r) {
      const ConfidencePipeline::Row* row = pipeline_.Stale(step, in[r].slot, in[r].owner);
      PlannerRequest q = current[r];
      q.confidence = row != nullptr ? row->confidence : std::vector<double>{};
      if (row != nullptr) {
        trace.seqs[r].stale_step = row->step;
        trace.seqs[r].stale = row->confidence;
      }
      stale.push_back(std::move(q));
    }
    const BudgetPlan plan = PlanVerifyBudget(stale, options_.table.get(), bo);
    trace.budget = plan.budget;
    trace.no_table = plan.no_table;
    trace.neutral_rows = plan.neutral_rows;
    // The split from the current confidences (spec §5.2 steps 8-10).
    len = AllocateVerifyLengths(current, plan.budget);
  }
  if (!gated && !benefit_gated) {
    ++planned_steps_;
    budget_total_ += trace.budget;
    candidates_total_ += cap_sum;
    last_budget_ = trace.budget;
    no_table_ += trace.no_table ? 1 : 0;
    neutral_rows_ += trace.neutral_rows;
  }
  // Stage this step's rows: the planner of step + lag reads them.
  for (size_t r = 0; r < in.size(); ++r) {
    pipeline_.Stage(step, in[r].slot, in[r].owner, current[r].confidence);
    trace.seqs[r].length = len[r];
  }
  pipeline_.Prune(step);
  if (options_.observer) options_.observer(trace);
  return len;
}

}  // namespace deepinfer::engine
